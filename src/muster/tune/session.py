"""What a trainable calls inside its trial: ``tune.report``, ``tune.get_checkpoint``, ``tune.get_context``.

A function trial is a one-worker training run, so these are the training
session's own calls; ``get_context`` adds the trial's identity.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import numbers
import os
import posixpath
import socket
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from muster.core import context as core_context
from muster.core import settings
from muster.exceptions import InvalidTypeError, MusterError, UnsupportedRayAPIError
from muster.tasks import runtime_context as rc
from muster.train import get_checkpoint as _train_get_checkpoint
from muster.train import get_context as _train_get_context
from muster.train import report as _train_report
from muster.train.checkpoint import Checkpoint
from muster.train.context import TrainContext
from muster.tune.messages import AwaitDecision, StepDecision, StepResult
from muster.tune.result import SHOULD_CHECKPOINT
from muster.tune.trial_output import output_to_files

DEFAULT_METRIC = "_metric"  # Ray's name for the result of a trainable that returns a number

_trial: dict[str, Any] | None = None
# a function trainable's trial: each tune.report waits for the controller's decision on its result (a class
# trainable's worker asks before it reports, with decide_step)
_awaits_decisions = False


def report(metrics: dict[str, Any], *, checkpoint: Checkpoint | None = None, **kwargs: Any) -> None:
    """Report this trial's metrics for one iteration, with an optional checkpoint.

    Tune adds ``training_iteration`` (1, 2, ...), ``time_total_s``,
    ``time_this_iter_s``, ``timestamp`` and ``trial_id``. The scheduler sees
    the result at once and may stop the trial. A result that carries a checkpoint says
    ``should_checkpoint: True``, as Ray's function trainables' do.

    In a function trainable's trial it returns once the controller has acted on the result (the
    checkpoint is committed before): as in Ray, a trial that a stopper, ``stop`` criteria or a
    scheduler stops (or pauses) on this result runs no further, so it reports nothing after it.

    Called outside a trial or training run (a trainable's function called directly, to try it
    out), it reports nothing and returns None, with a warning the first time, as Ray's does.
    """
    if not _in_a_run():
        _warn_outside_run("report")
        return None
    if checkpoint is not None and _trial is not None and isinstance(metrics, dict):
        metrics = {**metrics, SHOULD_CHECKPOINT: metrics.get(SHOULD_CHECKPOINT, True)}
    _train_report(metrics, checkpoint, **kwargs)
    if _awaits_decisions and core_context.in_worker():
        _await_decision()


def _await_decision() -> None:
    """Wait until the Tune controller acted on the result just reported; where it stopped (or paused)
    the trial on it, wait for the trial's process to be killed, as Ray's function trainable waits in
    ``report`` for a next result that is never asked for."""
    decision = core_context.send_event(AwaitDecision(), wait=True)
    if not isinstance(decision, StepDecision):
        raise MusterError(f"the Tune controller answered a report with {decision!r}, not a StepDecision")
    if decision.ends:
        threading.Event().wait()  # the controller kills this process


def get_checkpoint() -> Checkpoint | None:
    """The checkpoint to resume from: the trial's latest (after a failure or a
    restored experiment), another trial's (population-based training), or None (also outside a
    trial, with a warning the first time, as Ray's)."""
    if not _in_a_run():
        _warn_outside_run("get_checkpoint")
        return None
    return _train_get_checkpoint()


def _in_a_run() -> bool:
    """Whether this process runs a trial's (or a training run's) function."""
    try:
        _train_get_context()
    except RuntimeError:
        return False
    return True


def _warn_outside_run(api: str) -> None:
    if api not in _warned:
        _warned.add(api)
        warnings.warn(
            f"tune.{api}() was called outside a trial that a Tuner runs (the trainable called directly); "
            "it returns None, as Ray's does. Run the trainable with tune.Tuner(...).fit() to record results.",
            stacklevel=3,
        )


@dataclass
class TuneContext:
    """Who this trial is: Ray's ``TuneContext`` methods.

    Outside a trial (a trainable's function called directly, as Ray's guides do to try it
    out) the trial's getters return None, and the rank getters those of a single process
    (rank 0 of 1), each with a warning the first time, as Ray's do.
    """

    _train: TrainContext | None
    _trial: dict[str, Any] | None

    def _get(self, key: str, getter: str) -> Any:
        if self._trial is None:
            _warn_outside(getter, None)
            return None
        return self._trial[key]

    def get_trial_id(self) -> str | None:
        return self._get("trial_id", "get_trial_id")

    def get_trial_name(self) -> str | None:
        return self._get("trial_name", "get_trial_name")

    def get_trial_dir(self) -> str | None:
        return self._get("path", "get_trial_dir")

    def get_trial_resources(self) -> Any:
        """What the trial holds, as Ray gives it: a ``PlacementGroupFactory`` (``required_resources``,
        ``head_cpus``, ``bundles``): the one ``with_resources`` was given, bundles and all, else one bundle
        of the trial's resources (None outside a trial)."""
        from muster.tune.tune_config import PlacementGroupFactory

        resources = self._get("resources", "get_trial_resources")
        if resources is None:
            return None
        given = self._trial.get("placement_group_factory") if self._trial else None
        return given if given is not None else PlacementGroupFactory([dict(resources)])

    def get_experiment_name(self) -> str | None:
        return self._get("experiment", "get_experiment_name")

    def _rank(self, getter: str, default: int) -> int:
        if self._train is None:
            _warn_outside(getter, default)
            return default
        return int(getattr(self._train, getter)())

    def get_world_rank(self) -> int:
        return self._rank("get_world_rank", 0)

    def get_world_size(self) -> int:
        return self._rank("get_world_size", 1)

    def get_local_rank(self) -> int:
        return self._rank("get_local_rank", 0)

    def get_local_world_size(self) -> int:
        return self._rank("get_local_world_size", 1)

    def get_node_rank(self) -> int:
        return self._rank("get_node_rank", 0)

    def get_attempt(self) -> int:
        return self._rank("get_attempt", 0)

    def __getattr__(self, name: str) -> Any:
        """Ray 2.60's ``TuneContext`` names this one lacks (``get_storage``, ``get_metadata``): an error naming
        what to use (a bare ``AttributeError`` named nothing)."""
        nearest = _RAY_ONLY.get(name)
        if nearest is None:
            raise AttributeError(f"'TuneContext' object has no attribute {name!r}. See docs/porting.md for what "
                                 "is supported.")
        raise UnsupportedRayAPIError(
            f"muster.tune.TuneContext.{name} (Ray's ray.tune.TuneContext.{name}) is not supported by muster; "
            f"nearest equivalent: {nearest}. See docs/porting.md for what is supported."
        )


# Ray's TuneContext methods with no muster counterpart, and what to use instead
_RAY_ONLY = {
    "get_storage": "get_trial_dir() for the trial's folder in storage, get_experiment_name() for the experiment's "
    "(the folder under RunConfig(storage_path=...)); Ray's StorageContext is not ported",
    "get_metadata": "the trial's config (Ray 2.60 deprecates get_metadata, raising a DeprecationWarning)",
}

_warned: set[str] = set()


def _warn_outside(getter: str, value: Any) -> None:
    if getter not in _warned:
        _warned.add(getter)
        warnings.warn(
            f"tune.get_context().{getter}() was called outside a trial that a Tuner runs; it returns {value!r}.",
            stacklevel=4,
        )


def get_context() -> TuneContext:
    """This trial's id, name, folder and resources.

    Returns:
        The trial's ``TuneContext``; outside a trial (the trainable called directly) one
        whose trial getters return None, as Ray's does.
    """
    try:
        train = _train_get_context()
    except RuntimeError:  # not in a training worker: the function was called directly
        train = None
    return TuneContext(train, _trial)


def decide_step(metrics: dict[str, Any]) -> StepDecision:
    """Inside a class trainable's trial: hand a step's result to the Tune controller before it is
    reported, and learn whether the trial ends with it (then the trainable is saved with it)."""
    from muster.util import get_node_ip_address

    step = StepResult(dict(metrics), time.time(), os.getpid(), socket.gethostname(), get_node_ip_address())
    decision = core_context.send_event(step, wait=True)
    if not isinstance(decision, StepDecision):
        raise MusterError(f"the Tune controller answered a step with {decision!r}, not a StepDecision")
    return decision


def trial_local_folder(path: str) -> str:
    """A trial's folder on this machine's disk: ``path`` itself for local storage; for a URL
    (``s3://...``), a folder under the temp dir that muster does not upload."""
    if "://" not in path:
        return path
    trial = posixpath.basename(path.rstrip("/"))
    experiment = posixpath.basename(posixpath.dirname(path.rstrip("/")))
    return os.path.join(tempfile.gettempdir(), "muster-tune", experiment, trial)


@contextlib.contextmanager
def _in_trial_folder(path: str | None) -> Iterator[None]:
    """Run the trainable in its trial's folder, as Ray does (so the files it writes to relative
    paths stay apart per trial), unless ``RAY_CHDIR_TO_TRIAL_DIR=0``; ``TUNE_ORIG_WORKING_DIR``
    names the folder it came from."""
    before = os.getcwd()
    os.environ.setdefault("TUNE_ORIG_WORKING_DIR", before)
    if not path or not settings.chdir_to_trial_dir():
        yield
        return
    folder = trial_local_folder(path)
    os.makedirs(folder, exist_ok=True)
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


@contextlib.contextmanager
def _in_head_bundle(head: dict[str, float] | None) -> Iterator[None]:
    """Run the trainable as in its placement group's head bundle, where Ray places its trainable actor: in it,
    ``get_runtime_context().get_assigned_resources()`` is that bundle (``{"CPU": 1.0}`` for
    ``PlacementGroupFactory([{"CPU": 1}, {"CPU": 2}])``), not the bundles' sum the trial reserves."""
    worker = rc.library_worker()
    if head is None or worker is None:
        yield
        return
    rc.set_library_worker(dataclasses.replace(worker, resources=dict(head)))
    try:
        yield
    finally:
        rc.set_library_worker(worker)


class FunctionTrial:
    """The training function of a function trainable's trial (runs in the worker)."""

    def __init__(self, fn: Callable[..., Any], parameters: dict[str, Any], trial: dict[str, Any]):
        self.fn, self.parameters, self.trial = fn, parameters, trial

    def __call__(self, config: dict[str, Any]) -> None:
        global _trial, _awaits_decisions
        from muster.tune.trainable import ClassTrainable

        _trial, _awaits_decisions = self.trial, not isinstance(self.fn, ClassTrainable)
        try:
            path = self.trial.get("path")
            files = self.trial.get("log_to_file") or (None, None)
            folder, head = trial_local_folder(path or "."), self.trial.get("head_bundle")
            with _in_trial_folder(path), output_to_files(files, folder), _in_head_bundle(head):
                final = self.fn(config, **self.parameters)
                if inspect.isgenerator(final):  # Ray: each value a generator trainable yields is a result
                    for value in final:
                        self._result(value)
                    final = None
        finally:
            _trial, _awaits_decisions = None, False
        self._result(final)

    def _result(self, value: Any) -> None:
        """Ray's rule for what a trainable returns or yields: a dict is a result, a number is the result
        ``{"_metric": value}`` (``TuneConfig(metric="_metric")``), ``None`` is nothing."""
        if isinstance(value, dict):
            report(value)
        elif isinstance(value, numbers.Number) and not isinstance(value, bool):
            report({DEFAULT_METRIC: value})
        elif value is not None:
            raise InvalidTypeError(
                f"trainable {getattr(self.fn, '__name__', self.fn)!r} returned a {type(value).__name__}; a "
                "trainable returns (or yields) None, a number or a dict of metrics (report the rest with "
                "tune.report)."
            )
