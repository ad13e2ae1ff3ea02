"""Ray Train's asynchronous checkpoint validation: ``ValidationConfig`` and ``ValidationTaskConfig``.

``TorchTrainer(..., validation_config=ValidationConfig(fn=evaluate))`` and then, in the
training loop, ``report(metrics, checkpoint=ckpt, validation=True)``: once the round's
checkpoint is committed, the driver runs ``evaluate(checkpoint, **fn_kwargs)`` as a task
(one at a time, in report order) while training goes on. The dict it returns is merged into
that checkpoint's metrics, which rank it for ``CheckpointConfig`` retention and
``Result.best_checkpoints``. ``fit()`` returns once every requested validation has ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from muster.exceptions import InvalidArgumentError, InvalidTypeError

if TYPE_CHECKING:
    from muster.train.checkpoint import Checkpoint

#: the key under which a report's metrics carry its ``validation=`` to the driver (removed there)
REPORT_KEY = "_validation"


class ValidationFn(Protocol):
    """``fn(checkpoint, **fn_kwargs) -> dict of metrics``."""

    def __call__(self, checkpoint: Checkpoint, **kwargs: Any) -> dict[str, Any]: ...


@dataclass
class ValidationTaskConfig:
    """One validation's settings, passed as ``report(..., validation=ValidationTaskConfig(...))``.

    Args:
        fn_kwargs: keyword arguments for the validation function (JSON values: they are kept
            with the checkpoint, so a resumed run can still validate it); they override
            ``ValidationConfig.task_config``'s key by key.
        timeout_s: cancel the validation after this many seconds (its status is then
            ``VALIDATION_TIMEOUT``); None waits as long as it takes.
    """

    fn_kwargs: dict[str, Any] = field(default_factory=dict)
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        if self.fn_kwargs is None:
            self.fn_kwargs = {}
        if not isinstance(self.fn_kwargs, dict):
            raise InvalidTypeError(f"ValidationTaskConfig(fn_kwargs={self.fn_kwargs!r}): pass a dict of keyword "
                                   "arguments for the validation function.")
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise InvalidArgumentError(f"ValidationTaskConfig(timeout_s={self.timeout_s!r}): pass a number of "
                                       "seconds above 0, or None for no timeout.")


class ValidationConfig:
    """How a trainer validates the checkpoints reported with ``validation=``.

    Args:
        fn: called as ``fn(checkpoint, **fn_kwargs)`` in a task; returns a dict of metrics.
        task_config: default ``fn_kwargs`` and ``timeout_s`` for every validation.
        ray_remote_kwargs: options for the validation task (``num_cpus``, ``num_gpus``,
            ``max_retries``, ...), as ``muster.remote`` takes them. The task needs its resources
            free: with every CPU held by training workers, validations wait until training ends.
    """

    def __init__(self, fn: ValidationFn, task_config: ValidationTaskConfig | None = None,
                 ray_remote_kwargs: dict[str, Any] | None = None):
        if not callable(fn):
            raise InvalidTypeError(f"ValidationConfig(fn={fn!r}): pass a function (checkpoint, **kwargs) -> dict.")
        if task_config is not None and not isinstance(task_config, ValidationTaskConfig):
            raise InvalidTypeError(f"ValidationConfig(task_config={task_config!r}): pass a "
                                   "muster.train.ValidationTaskConfig.")
        self.fn = fn
        self.task_config = task_config or ValidationTaskConfig()
        self.ray_remote_kwargs = dict(ray_remote_kwargs or {})

    def settings(self, spec: Any) -> tuple[dict[str, Any], float | None]:
        """The keyword arguments and timeout of one validation, from what ``report()`` sent
        (``True`` or the fields of a ``ValidationTaskConfig``)."""
        kwargs, timeout_s = dict(self.task_config.fn_kwargs), self.task_config.timeout_s
        if isinstance(spec, dict):
            kwargs.update(spec.get("fn_kwargs") or {})
            timeout_s = spec.get("timeout_s")
        return kwargs, timeout_s


def report_spec(validation: Any, has_checkpoint: bool) -> bool | dict[str, Any] | None:
    """``report(validation=...)`` as the worker sends it: None (no validation), True, or the fields
    of a ``ValidationTaskConfig`` (plain values, so they can be kept in the checkpoint's manifest)."""
    if validation is False or validation is None:
        return None
    if validation is not True and not isinstance(validation, ValidationTaskConfig):
        raise InvalidTypeError(f"report(validation={validation!r}): pass True, False or a "
                               "muster.train.ValidationTaskConfig.")
    if not has_checkpoint:
        raise InvalidArgumentError("report(validation=...) validates a checkpoint: pass checkpoint= in the same "
                                   "report (the rank that saves it asks for its validation).")
    if validation is True:
        return True
    return {"fn_kwargs": validation.fn_kwargs, "timeout_s": validation.timeout_s}


def take_request(metrics: dict[str, Any], configured: bool) -> tuple[dict[str, Any], Any]:
    """In the driver: a report's metrics without its validation request, and the request (or None).

    Raises:
        InvalidArgumentError: a validation was asked for, but the trainer has no ``validation_config``.
    """
    if REPORT_KEY not in metrics:
        return metrics, None
    metrics = dict(metrics)
    spec = metrics.pop(REPORT_KEY)
    if not configured:
        raise InvalidArgumentError(
            f"report(validation={spec!r}) asks for a validation, but the trainer has no validation_config: pass "
            "validation_config=muster.train.ValidationConfig(fn=...) to the trainer, or drop validation=.")
    return metrics, spec
