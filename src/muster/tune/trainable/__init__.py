"""``tune.Trainable``: Ray's class API for a trial (``setup``/``step``/``save_checkpoint``/``load_checkpoint``).

The Tuner runs a Trainable subclass as a function trainable: build it with
the trial's config, restore it from the trial's checkpoint (after a failure,
a restored experiment, or population-based training's exploit), then call
``step()`` and report its result until the result says ``done`` or the
stopper or scheduler stops the trial. A class that overrides
``save_checkpoint`` is saved with the report of every iteration, or, under
``tune.CheckpointConfig(checkpoint_frequency=K)``, every K-th, plus the last
one unless ``checkpoint_at_end=False``: the one whose result says ``done``, or
the one on which a stop condition, the scheduler or a pause ends the trial (as
in Ray). A result with ``should_checkpoint: True`` is saved too, whatever the
frequency (Ray's way for ``step()`` to ask). As in Ray, no step runs before the controller acted on the
last one's result: the worker hands each result to the controller before reporting it and learns whether
the trial ends there (see ``messages``).
"""

from __future__ import annotations

import inspect
import os
import pickle
import socket
import tempfile
import time
from typing import Any

from muster.exceptions import InvalidArgumentError, InvalidTypeError, UnsupportedRayAPIError
from muster.tune.result import SHOULD_CHECKPOINT

_DICT_FILE = "trainable_state.pkl"  # what save_checkpoint returned, when it returned a dict
_ITER_FILE = "trainable_iteration"


class Trainable:
    """Subclass it and override ``setup``, ``step`` and, for checkpoints, ``save_checkpoint``/``load_checkpoint``.

    Attributes:
        config: the trial's config.
        iteration / training_iteration: steps run so far (restored with checkpoints).
    """

    def __init__(self, config: dict[str, Any] | None = None, **setup_kwargs: Any):
        self.config: dict[str, Any] = dict(config or {})
        self._iteration = 0
        self._time_total = 0.0
        self._since_restore = (0, time.time())  # (iteration, wall time) of the last start or restore
        self._logdir: str | None = None
        self.setup(self.config, **setup_kwargs)

    # -- what subclasses override ---------------------------------------------------------
    def setup(self, config: dict[str, Any], **kwargs: Any) -> None:
        """Build models and data from ``config`` (called once per trial start)."""

    def step(self) -> dict[str, Any]:
        """One iteration: return its metrics (``{"done": True}`` ends the trial)."""
        raise NotImplementedError(f"{type(self).__name__}.step() is not implemented; return a dict of metrics.")

    def save_checkpoint(self, checkpoint_dir: str) -> dict[str, Any] | str | None:
        """Write state into ``checkpoint_dir`` and return None or ``checkpoint_dir`` itself, or
        return a dict of the state. Default: no checkpoints."""
        return None

    def load_checkpoint(self, checkpoint: dict[str, Any] | str) -> None:
        """Restore what ``save_checkpoint`` saved: its dict, or the folder path."""

    def cleanup(self) -> None:
        """Release resources when the trial ends."""

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        """Ray's in-place reset; muster always starts a fresh object instead (returns False)."""
        return False

    @classmethod
    def default_resource_request(cls, config: dict[str, Any]) -> Any:
        """Override to size each trial from its config: return a dict such as ``{"cpu": 2}`` or a
        ``PlacementGroupFactory`` (its bundles added up), or None for the default, 1 CPU. As in Ray,
        ``tune.with_resources`` on the class takes precedence."""
        return None

    @classmethod
    def resource_help(cls, config: dict[str, Any]) -> str:
        """A help string on configuring this trainable's resources (empty, as Ray's default)."""
        return ""

    # -- Ray's helpers -----------------------------------------------------------------------
    @property
    def iteration(self) -> int:
        return self._iteration

    @property
    def training_iteration(self) -> int:
        return self._iteration

    @property
    def trial_id(self) -> str:
        """The trial's id; ``"default"`` for an object made outside a Tuner, as in Ray."""
        return self._trial_value("get_trial_id")

    @property
    def trial_name(self) -> str:
        return self._trial_value("get_trial_name")

    @property
    def trial_resources(self) -> Any:
        """What the trial holds, as a ``PlacementGroupFactory``; None outside a Tuner, as in Ray."""
        return self._trial_value("get_trial_resources", None)

    @property
    def logdir(self) -> str:
        """The trial's folder; outside a Tuner, a temporary folder made on first use."""
        trial_dir = self._trial_value("get_trial_dir", None)
        if trial_dir is not None:
            return trial_dir
        if self._logdir is None:
            self._logdir = tempfile.mkdtemp(prefix=f"{type(self).__name__}_")
        return self._logdir

    @staticmethod
    def _trial_value(getter: str, default: Any = "default") -> Any:
        from muster.tune import session

        if session._trial is None:
            return default
        return getattr(session.get_context(), getter)()

    def get_config(self) -> dict[str, Any]:
        """The config this trainable was made with (``self.config``)."""
        return self.config

    def stop(self) -> None:
        """Release what the trainable holds: runs ``cleanup()``, as Ray's does (Tune calls it at a trial's end)."""
        self.cleanup()

    def train(self) -> dict[str, Any]:
        """Run one ``step()`` and return its result. Outside a Tuner it carries what Tune adds to a
        result, as Ray's does (``training_iteration``, ``done``, ``time_this_iter_s``, ``pid``...);
        inside one, the Tuner adds them when it records the result."""
        start = time.time()
        result = self.step()
        if not isinstance(result, dict):
            raise InvalidTypeError(
                f"{type(self).__name__}.step() returned {type(result).__name__}; return a dict of metrics.")
        self._iteration += 1
        from muster.tune import session

        if session._trial is not None:
            return result
        now = time.time()
        self._time_total += now - start
        since_iter, since_time = self._since_restore
        return {**result, "done": bool(result.get("done", False)), "training_iteration": self._iteration,
                "trial_id": "default", "time_this_iter_s": now - start, "time_total_s": self._time_total,
                "timestamp": int(now), "date": time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(now)),
                "pid": os.getpid(), "hostname": socket.gethostname(), "config": dict(self.config),
                "iterations_since_restore": self._iteration - since_iter, "time_since_restore": now - since_time}

    def save(self, checkpoint_dir: str | None = None) -> str:
        """Save into ``checkpoint_dir`` (made if missing; default: a new folder under :attr:`logdir`),
        and return it; the dict form is pickled there.

        Raises:
            InvalidTypeError: ``save_checkpoint`` returned something other than None, a dict,
                or ``checkpoint_dir`` itself.
        """
        if checkpoint_dir is None:
            checkpoint_dir = os.path.join(self.logdir, f"checkpoint_{self._iteration:06d}")
        os.makedirs(checkpoint_dir, exist_ok=True)
        state = self.save_checkpoint(checkpoint_dir)
        if isinstance(state, dict):
            with open(os.path.join(checkpoint_dir, _DICT_FILE), "wb") as f:
                pickle.dump(state, f)
        elif state is not None and not _same_folder(state, checkpoint_dir):
            got = repr(state) if isinstance(state, (str, os.PathLike)) else f"a {type(state).__name__}"
            raise InvalidTypeError(
                f"{type(self).__name__}.save_checkpoint returned {got}; return None or the checkpoint_dir it "
                f"was given ({checkpoint_dir!r}) after writing files into that folder, or return a dict of "
                "the state."
            )
        with open(os.path.join(checkpoint_dir, _ITER_FILE), "w") as f:
            f.write(str(self._iteration))
        return checkpoint_dir

    def restore(self, checkpoint_dir: Any) -> None:
        """Load what ``save`` wrote into ``checkpoint_dir`` (a path, or a local ``Checkpoint``)."""
        checkpoint_dir = os.fspath(getattr(checkpoint_dir, "path", checkpoint_dir))
        state_file = os.path.join(checkpoint_dir, _DICT_FILE)
        if os.path.exists(state_file):
            with open(state_file, "rb") as f:
                self.load_checkpoint(pickle.load(f))
        else:
            self.load_checkpoint(checkpoint_dir)
        iter_file = os.path.join(checkpoint_dir, _ITER_FILE)
        if os.path.exists(iter_file):
            with open(iter_file) as f:
                self._iteration = int(f.read().strip() or 0)
        self._since_restore = (self._iteration, time.time())


def _same_folder(returned: Any, checkpoint_dir: str) -> bool:
    """Whether ``save_checkpoint`` returned the folder it was given (Ray's samples return it)."""
    if not isinstance(returned, (str, os.PathLike)):
        return False
    return os.path.realpath(os.fspath(returned)) == os.path.realpath(checkpoint_dir)


def _saves_checkpoints(cls: type) -> bool:
    return getattr(cls, "save_checkpoint", None) is not Trainable.save_checkpoint


class ClassTrainable:
    """A Trainable subclass as the function the Tuner runs in each trial.

    Args:
        cls: the ``Trainable`` subclass.
        checkpoint_frequency: save every this many iterations (0: not periodically).
        checkpoint_at_end: save the last iteration (its result says ``done``, or the trial is stopped on it).
    """

    def __init__(self, cls: type[Trainable], checkpoint_frequency: int = 1, checkpoint_at_end: bool = True):
        self.cls = cls
        self.checkpoint_frequency, self.checkpoint_at_end = checkpoint_frequency, checkpoint_at_end
        self.__name__ = cls.__name__
        self.__qualname__ = cls.__qualname__

    def checkpointing(self, frequency: int, at_end: bool) -> ClassTrainable:
        """The same class, saved every ``frequency`` iterations and (``at_end``) at its end."""
        return ClassTrainable(self.cls, frequency, at_end)

    def _due(self, trainable: Trainable, done: bool, asked: bool = False) -> bool:
        every = self.checkpoint_frequency
        return asked or bool(every and trainable.iteration % every == 0) or (done and self.checkpoint_at_end)

    def __call__(self, config: dict[str, Any], **setup_kwargs: Any) -> None:
        from muster.train.checkpoint import Checkpoint
        from muster.tune.session import decide_step, get_checkpoint, report

        trainable = self.cls(config, **setup_kwargs)
        start = get_checkpoint()
        if start is not None:
            with start.as_directory() as d:
                trainable.restore(d)
        saves = _saves_checkpoints(self.cls)
        try:
            while True:
                result = trainable.train()
                done = bool(result.get("done"))
                asked = bool(result.get(SHOULD_CHECKPOINT))
                if not done:
                    # As Ray's controller does, act on this result before the next step runs: does the
                    # trial end here (stopper, scheduler)? does a callback ask for a checkpoint? A trial
                    # ended here is saved with this result (checkpoint_at_end) and steps no further.
                    decision = decide_step(result)
                    result = {**result, **decision.fields}
                    done, asked = decision.ends, asked or decision.checkpoint
                due = saves and self._due(trainable, done, asked)
                if due:
                    with tempfile.TemporaryDirectory(prefix="muster-trainable-") as d:
                        trainable.save(d)
                        report(result, checkpoint=Checkpoint.from_directory(d))
                else:
                    report(result)
                if done:
                    return
        finally:
            trainable.stop()


class FunctionTrainable(Trainable):
    """Ray's class of a function trainable: ``wrap_function(fn)`` makes a subclass that carries ``fn``.

    A Tuner (or ``tune.run``, ``with_resources``, ``with_parameters``) given such a class runs ``fn``
    as the function trainable it is, as Ray does. Building one to call ``train()`` by hand, outside a
    Tuner, is not ported (the error says so), nor is a subclass of your own.
    """

    _name = "func"
    _function: Any = None  # what wrap_function wrapped

    def __init__(self, config: dict[str, Any] | None = None, **setup_kwargs: Any):
        raise UnsupportedRayAPIError(
            f"{type(self).__name__}({config!r}): muster runs a function trainable only in a trial, not as an "
            f"object stepped by hand. Pass the class (or the function {self._name!r} itself) to "
            "muster.tune.Tuner(...).fit(), or call the function with a config dict."
        )


def wrap_function(train_func: Any, name: str | None = None) -> type[FunctionTrainable]:
    """Ray's ``wrap_function``: ``train_func`` as a :class:`FunctionTrainable` subclass named ``name``
    (default: the function's name), which a Tuner runs as the function itself.

    Raises:
        InvalidTypeError: ``train_func`` is not a function.
        InvalidArgumentError: it cannot be called with the config dict alone, ``train_func(config)``.
    """
    if isinstance(train_func, type) or not callable(train_func):
        raise InvalidTypeError(f"wrap_function({train_func!r}): pass a function trainable(config) that calls "
                               "tune.report(...); a tune.Trainable subclass goes to the Tuner as it is.")
    try:
        inspect.signature(train_func).bind({})
    except TypeError:
        raise InvalidArgumentError(
            f"wrap_function({train_func!r}): the function must take the trial's config as its one positional "
            f"argument, def {getattr(train_func, '__name__', 'train_func')}(config): ... (as Ray requires); pass "
            "other values with tune.with_parameters(train_func, name=value)."
        ) from None
    except ValueError:  # no signature to read (a builtin): let the trial call it
        pass
    label = name or getattr(train_func, "__name__", None) or "func"
    return type("ImplicitFunc", (FunctionTrainable,), {"_name": label, "_function": staticmethod(train_func),
                                                        "__module__": FunctionTrainable.__module__})


def _wrapped_function(cls: type[FunctionTrainable]) -> Any:
    """What a Tuner runs for a ``wrap_function`` class: its function, under the class's name."""
    fn = getattr(cls, "_function", None)
    if fn is None:
        raise InvalidTypeError(
            f"{cls.__name__}: a FunctionTrainable subclass of your own is not run by muster; pass the function "
            "trainable(config) itself (or wrap_function(trainable)), or subclass tune.Trainable."
        )
    if cls._name == getattr(fn, "__name__", None):
        return fn
    from muster.tune.tune_config import renamed

    return renamed(fn, cls._name)


def as_function(trainable: Any) -> Any:
    """A Trainable subclass becomes a :class:`ClassTrainable`, a ``wrap_function`` class its function;
    anything else is returned as it is."""
    if isinstance(trainable, type) and issubclass(trainable, FunctionTrainable):
        return _wrapped_function(trainable)
    if isinstance(trainable, type) and issubclass(trainable, Trainable):
        return ClassTrainable(trainable)
    return trainable
