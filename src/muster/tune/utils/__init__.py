"""Ray's ``ray.tune.utils`` (and ``ray.tune.utils.util``): :func:`validate_save_restore`, the check that a class
trainable resumes, and :func:`diagnose_serialization`, which names what keeps a trainable from pickling.

``mock_trainable`` has Ray's toy ``MyTrainableClass``. Ray's other helpers there (``flatten_dict``,
``wait_for_gpu``...) are not provided; importing one names what to use instead.
"""

from __future__ import annotations

from typing import Any

from muster.exceptions import InvalidArgumentError
from muster.tune.result import TRAINING_ITERATION

__all__ = ["diagnose_serialization", "validate_save_restore"]


def diagnose_serialization(trainable: Any) -> bool | set[str]:
    """Check that ``trainable`` can be shipped to a trial (pickled, as the Tuner does), as Ray's helper does.

    It prints what it tries. When the trainable does not pickle, each global and nonlocal name its code
    uses is tried alone, and the ones that fail are printed and returned: move what they hold into the
    trainable (build it there) or pass it with ``tune.with_parameters``.

    Args:
        trainable: a function or class trainable.

    Returns:
        True when it pickles, else the set of the names that do not (empty when none of them is to blame).
    """
    import inspect

    import cloudpickle

    print(f"Trying to serialize {trainable}...")
    try:
        cloudpickle.dumps(trainable)
        print("Serialization succeeded!")
        return True
    except Exception as exc:  # noqa: BLE001 - any pickling failure is what this reports
        print(f"Serialization failed: {exc}")
    closure = inspect.getclosurevars(trainable)
    failures: set[str] = set()
    for kind, names in (("global", closure.globals), ("nonlocal", closure.nonlocals)):
        if names:
            print(f"Detected {len(names)} {kind} variables. Checking serializability...")
        for name, value in names.items():
            try:
                cloudpickle.dumps(value)
                print(f"   {value!s}[name='{name}']... PASSED")
            except Exception:  # noqa: BLE001 - a name that fails to pickle is the finding
                print(f"   {value!s}[name='{name}']... FAILED")
                failures.add(name)
    if failures:
        print(f"Variable(s) {failures} could not be serialized. Build them inside the trainable, or pass them "
              "with tune.with_parameters(trainable, name=value).")
    else:
        print("None of the trainable's global or nonlocal variables failed alone; the trainable itself does not "
              "pickle.")
    return failures


def validate_save_restore(trainable_cls: type, config: dict[str, Any] | None = None, num_gpus: float = 0) -> bool:
    """Check that a ``tune.Trainable`` class resumes where it was saved, as Ray's helper does: one
    actor trains 3 steps and saves, a second actor restores that checkpoint and trains on; its
    ``training_iteration`` must go on from 3 (4, then 5).

    Args:
        trainable_cls: the ``tune.Trainable`` subclass to check.
        config: the config both actors get.
        num_gpus: GPUs for each actor.

    Returns:
        True when the round trip resumed.

    Raises:
        InvalidArgumentError: the restored trainable did not go on from the saved iteration.
        Whatever the trainable's ``setup``, ``step``, ``save_checkpoint`` or ``load_checkpoint``
        raised, as that error.
    """
    from muster.tasks import get, kill, remote

    actor_cls = remote(num_gpus=num_gpus)(trainable_cls)
    first, second = actor_cls.remote(config=config), actor_cls.remote(config=config)
    try:
        for _ in range(3):
            get(first.train.remote())
        get(second.restore.remote(get(first.save.remote())))
        for expected in (4, 5):
            got = get(second.train.remote()).get(TRAINING_ITERATION)
            if got != expected:
                raise InvalidArgumentError(
                    f"validate_save_restore({trainable_cls.__name__}): after restoring a checkpoint saved at "
                    f"iteration 3, training_iteration was {got}, not {expected}. Make save_checkpoint write and "
                    "load_checkpoint read everything step() depends on.")
    finally:
        for actor in (first, second):
            kill(actor)
    return True


def __getattr__(name: str) -> Any:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.tune.utils", name)
