"""A trial, and one run of it.

Every trial is an ordinary muster training run in its own folder under the
experiment (``<storage_path>/<experiment>/<trial dirname>/``): a function
trainable runs as a one-worker run, a ``TorchTrainer`` as its gang.  So a
trial gets, for free, what a run has: committed checkpoints, restarts from
the latest one under ``FailureConfig``, exact mid-epoch resume, every report
kept, and a ``Result`` that ``Result.from_path`` reads back.

A ``TrialRun`` drives one stretch of a trial on a thread of the driver (the
workers are the engine's processes); a trial that is paused and restarted
(population-based training) gets a new ``TrialRun`` on the same folder.
"""

from __future__ import annotations

import functools
import json
import logging
import posixpath
import queue
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import cloudpickle

from muster.core.resources import fmt
from muster.core.serialization import json_default
from muster.core.runtime import RuntimeActor
from muster.exceptions import InvalidArgumentError, InvalidTypeError, MusterError, UnsupportedRayAPIError
from muster.exceptions import MusterError as TuneError
from muster.train._internal.backend import Backend
from muster.train._internal.checkpoint_manager import SHOWN_ITERATION, round_of
from muster.train._internal.events import FitRequest
from muster.train.checkpoint import Checkpoint
from muster.train.config import RunConfig, ScalingConfig
from muster.train.controller import Controller, ControllerHooks
from muster.train._internal.result_base import Result
from muster.train.run_state import RunRecord
from muster.train.storage import Storage
from muster.train.validation import ValidationConfig
from muster.train.worker_group import Member
from muster.tune.messages import AwaitDecision, StepDecision, StepResult
from muster.tune.session import FunctionTrial, trial_local_folder
from muster.tune.nested_fit import NESTED_RUN, fit_in_trial
from muster.tune.result_file import settle_result_file
from muster.tune.trial_events import (  # noqa: F401 - the controller's events, named here too
    ReportForward,
    TrialAwaits,
    TrialEnded,
    TrialEvent,
    TrialNotice,
    TrialResult,
    TrialStep,
)
from muster.tune.trial_info import ERROR_FILE, ERROR_TEXT_FILE, RANKED_BY, as_users_error, update_metric_analysis
from muster.tune.trial_loggers import TrialLoggers

if TYPE_CHECKING:
    from muster.tune.schedulers.trial_scheduler import PendingConfig

_log = logging.getLogger(__name__)

PENDING, RUNNING, PAUSED, TERMINATED, ERROR = "PENDING", "RUNNING", "PAUSED", "TERMINATED", "ERROR"


def latest_checkpoint(storage: Storage) -> Checkpoint | None:
    """A trial's latest committed checkpoint: its own, or its nested trainer's."""
    for where in (storage, Storage(storage.uri, NESTED_RUN, storage.fs)):
        rounds = where.committed_rounds()
        if rounds:
            return Checkpoint(where.checkpoint_dir(rounds[-1]), where.fs)
    return None


PARAMS_JSON, PARAMS_PKL = "params.json", "params.pkl"


def write_params(storage: Storage, config: dict[str, Any]) -> None:
    """A trial's config in its folder as Ray's loggers leave it at each start (a PBT restart's
    new config too): ``params.json`` (values JSON cannot hold as their text) and ``params.pkl``."""
    storage.write_text(storage.join(storage.run_dir, PARAMS_JSON),
                       json.dumps(config, indent=2, default=json_default))
    storage.write_bytes(storage.join(storage.run_dir, PARAMS_PKL), cloudpickle.dumps(config))


# hashed and compared by identity, as Ray's Trial (callbacks key dicts by trial); repr: its name, as Ray's
@dataclass(eq=False, repr=False)
class Trial:
    """One configuration being tried, as Tune callbacks and schedulers see it.

    Ray's attributes: ``trial_id``, ``config``, ``status`` (PENDING, RUNNING, PAUSED,
    TERMINATED or ERROR), ``last_result``, ``path`` (the trial's folder in storage, a
    local path or a URL), ``local_path`` (that folder on this machine's disk; it exists
    when ``on_trial_start`` is called), ``trainable_name``, ``evaluated_params`` (the values its search
    chose, ``{"a/b": value}``), ``experiment_tag``, ``custom_dirname`` (a ``trial_dirname_creator``'s
    folder name, else None), ``checkpoint`` (its latest committed checkpoint), ``num_failures`` (its
    failed attempts, the final one of an ERROR trial included), ``metric_analysis``, ``error_file``,
    ``get_error()``, ``get_pickled_error()``, ``is_finished()``; ``str(trial)`` and ``repr(trial)``:
    its name. See docs/tune.md for the status a callback sees at each hook.
    """

    trial_id: str
    trial_name: str
    config: dict[str, Any]
    path: str
    resources: dict[str, float]
    status: str = PENDING
    last_result: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    num_results: int = 0
    experiment_tag: str = ""  # Ray's: the trial's index and its searched values, e.g. "0_lr=0.0100"
    # set by a scheduler that pauses the trial to restart it: (config, checkpoint, donor trial id); the
    # config may be a PendingConfig still being worked out (the trial restarts once it is done)
    restart_plan: tuple[dict[str, Any] | PendingConfig, Checkpoint | None, str] | None = None
    run: TrialRun | None = field(default=None, repr=False)
    ending_as: str | None = field(default=None, repr=False)  # the status a stop request ends it in
    trainable: str = ""  # the trainable's name (trial_name may be a TuneConfig(trial_name_creator=)'s)
    # Ray's: the values its search algorithm chose, by "a/b" paths (TensorBoard's hparams)
    evaluated_params: dict[str, Any] = field(default_factory=dict)
    # ended by the experiment's stop (a stopper's stop_all, time_budget_s, fail_fast) while unfinished: Ray's
    # TERMINATED with no on_trial_complete, its last result not done
    experiment_stopped: bool = field(default=False, repr=False)
    num_failures: int = 0  # Ray's: failed attempts (each restart under FailureConfig, and a final failure)
    custom_dirname: str | None = None  # Ray's: the folder name a TuneConfig(trial_dirname_creator=) gave
    # Ray's: per numeric metric ("a/b" paths), its max, min, avg, last, last-5-avg and last-10-avg
    metric_analysis: dict[str, dict[str, Any]] = field(default_factory=dict)
    recent_values: dict[str, list[Any]] = field(default_factory=dict)  # each metric's last 10, for those
    fs: Any = field(default=None, repr=False)  # the experiment's file system (None: the path's own)

    @property
    def dirname(self) -> str:
        """The trial's folder's name (Ray's shape, ``trial_dirname``; ``<trainable>_<trial_id>`` in
        experiments written before muster named them so): the last part of ``path``."""
        return posixpath.basename(self.path.rstrip("/").replace("\\", "/"))

    @property
    def local_path(self) -> str:
        """The trial's folder on the driver's disk: ``path`` itself for local storage; for a
        URL (``s3://...``), a folder under the temp dir that muster does not upload."""
        return trial_local_folder(self.path)

    @property
    def trainable_name(self) -> str:
        if self.trainable:
            return self.trainable
        suffix = f"_{self.trial_id}"  # a trial recorded before its trainable's name was
        return self.trial_name[: -len(suffix)] if self.trial_name.endswith(suffix) else self.trial_name

    def is_finished(self) -> bool:
        return self.status in (TERMINATED, ERROR)

    def _storage(self) -> Storage:
        """The trial's folder as a muster ``Storage``."""
        return Storage.at(self.path, self.fs)

    @property
    def checkpoint(self) -> Checkpoint | None:
        """The trial's latest committed checkpoint (None before its first), as Ray's ``Trial.checkpoint``."""
        return latest_checkpoint(self._storage())

    def analyse(self, result: dict[str, Any]) -> None:
        """Fold one of the trial's results into ``metric_analysis``."""
        update_metric_analysis(self.metric_analysis, self.recent_values, result)

    @property
    def error_file(self) -> str | None:
        """Where the trial's error traceback is (``error.txt`` in its folder: on this machine's disk for
        local storage, else in storage), once it failed (an attempt it retried too, as Ray's); None before."""
        return None if self._never_failed() else f"{self.path.rstrip('/')}/{ERROR_TEXT_FILE}"

    def _never_failed(self) -> bool:
        return self.error is None and not self.num_failures

    def get_error(self) -> TuneError | None:
        """The trial's error as a ``TuneError`` holding its traceback (``error.txt``), as Ray's; None if
        it has not failed. ``get_pickled_error()`` gives the exception the trainable raised."""
        text = self._error_bytes(ERROR_TEXT_FILE)
        return None if text is None else TuneError(text.decode(errors="replace"))

    def get_pickled_error(self) -> BaseException | None:
        """The exception the trial failed with (``error.pkl``), also an instance of what the trainable raised
        (``isinstance(err, ValueError)``), as Ray's; None if it has not failed (or it did not pickle)."""
        data = self._error_bytes(ERROR_FILE)
        return None if data is None else as_users_error(cloudpickle.loads(data))

    def _error_bytes(self, filename: str) -> bytes | None:
        if self._never_failed():
            return None
        where = self._storage()
        path = where.join(where.run_dir, filename)
        return where.read_bytes(path) if where.exists(path) else None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        nearest = _RAY_ONLY.get(name)
        if nearest is not None:
            raise UnsupportedRayAPIError(f"Trial.{name} (Ray's ray.tune.experiment.Trial.{name}) is not supported "
                                         f"by muster; use {nearest}. See docs/porting.md for what is supported.")
        from muster._unsupported import raise_unsupported

        raise_unsupported("muster.tune.experiment.Trial", name)

    def to_json(self) -> dict[str, Any]:
        return {
            "trial_id": self.trial_id,
            "trial_name": self.trial_name,
            "config": self.config,
            "status": self.status,
            "last_result": self.last_result,
            "error": self.error,
            "path": self.path,
            "resources": self.resources,
            "num_results": self.num_results,
            "experiment_tag": self.experiment_tag,
            "trainable": self.trainable,
            "evaluated_params": self.evaluated_params,
            "experiment_stopped": self.experiment_stopped,
            "num_failures": self.num_failures,
            "custom_dirname": self.custom_dirname,
            "metric_analysis": self.metric_analysis,
            "recent_values": self.recent_values,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Trial:
        return cls(
            d["trial_id"], d["trial_name"], d["config"], d["path"], d.get("resources", {}),
            status=d.get("status", PENDING), last_result=d.get("last_result") or {}, error=d.get("error"),
            num_results=d.get("num_results", 0), experiment_tag=d.get("experiment_tag", ""),
            trainable=d.get("trainable", ""), evaluated_params=d.get("evaluated_params") or {},
            experiment_stopped=bool(d.get("experiment_stopped", False)), num_failures=d.get("num_failures", 0),
            custom_dirname=d.get("custom_dirname"), metric_analysis=d.get("metric_analysis") or {},
            recent_values=d.get("recent_values") or {},
        )

    def __str__(self) -> str:
        return self.trial_name

    __repr__ = __str__


# Ray's Trial attributes with no muster counterpart of the same shape, and what to use instead
_RAY_ONLY = {
    "placement_group_factory": "trial.resources (the trial's total resources, e.g. {'CPU': 1.0})",
    "run_metadata": "trial.last_result, trial.num_failures, trial.metric_analysis and trial.checkpoint",
    "num_failures_after_restore": "trial.num_failures (muster counts a trial's failures across restores)",
    "relative_logdir": "trial.dirname (the trial's folder's name)",
    "storage": "trial.path (the trial's folder in storage) and trial.local_path (on this machine)",
    "local_dir": "os.path.dirname(trial.local_path) (the experiment's folder)",
}


_MAX_IDENTIFIER = 130  # Ray's TUNE_MAX_LEN_IDENTIFIER: the name and tag part of a trial's folder name
# Ray replaces / ( ) < > : " \ | ? * (rsync's and Windows' refusals); a trial's folder is a muster run,
# whose name keeps to letters, digits and _ . = + - (valid on every file system and in URLs): the rest
# becomes "_" too (so Ray's "lr=0.0100,momentum=0.9000" is "lr=0.0100_momentum=0.9000" here)
_UNSAFE = re.compile(r"[^A-Za-z0-9_.=+-]")


def trial_dirname(trial_name: str, experiment_tag: str) -> str:
    """A trial's folder's name, as Ray makes it: ``<trainable>_<trial_id>_<experiment tag>``, cut to
    130 characters, then ``_<date>_<time>``, with characters other than letters, digits and
    ``_ . = + -`` as ``_`` (``train_fn_a1b2c_00000_0_lr=0.0100_2026-01-31_12-00-00``)."""
    identifier = f"{trial_name}_{experiment_tag}" if experiment_tag else trial_name
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    return _UNSAFE.sub("_", f"{identifier[:_MAX_IDENTIFIER]}_{stamp}")


def custom_dirname(name: Any, taken: set[str]) -> str:
    """What a ``TuneConfig(trial_dirname_creator=)`` returned, as a trial folder's name: the
    characters Ray's (and muster's) trial folders avoid as ``_``; unique in the experiment."""
    if not isinstance(name, str) or not name.strip("."):
        raise InvalidTypeError(f"TuneConfig(trial_dirname_creator=) returned {name!r}: return a folder name (a "
                               "non-empty str), e.g. f'trial_{trial.trial_id}'.")
    if "/" in name or "\\" in name:
        raise InvalidArgumentError(f"TuneConfig(trial_dirname_creator=) returned {name!r}: a folder name must not "
                                   "contain '/'; return one level, e.g. f'trial_{trial.trial_id}'.")
    dirname = _UNSAFE.sub("_", name)
    if dirname in taken:
        raise InvalidArgumentError(f"TuneConfig(trial_dirname_creator=) returned {name!r} for two trials: each "
                                   "trial needs its own folder; include trial.trial_id in the name.")
    return dirname


@dataclass
class RunPlan:
    """What a trial runs: built from the trainable and the trial's config."""

    train_fn: Callable[..., Any]
    train_config: dict[str, Any] | None
    scaling: ScalingConfig
    backend: Backend
    run_config: RunConfig  # checkpoint/failure settings and worker timeout for the trial
    resume_from: Checkpoint | None = None  # a trainer's resume_from_checkpoint: where a trial without its own starts
    validation: ValidationConfig | None = None  # a trainer's validation_config

    @property
    def resources(self) -> dict[str, float]:
        return self.scaling.total_resources

    def describe(self) -> str:
        return f"{self.scaling.num_workers} x {fmt(self.scaling.worker_resources)}"


_HOST = socket.gethostname()


@functools.lru_cache(maxsize=1)
def _node_ip() -> str:
    from muster.util import get_node_ip_address

    return get_node_ip_address()


class TrialRun:
    """One stretch of a trial: a training run's controller on a driver thread.

    Results (rank 0's reports, with Tune's fields added) and the end (a
    ``Result`` or the error) are put on ``events`` as ``("result", trial,
    run, row)`` and ``("end", trial, run, outcome)``.
    """

    def __init__(
        self,
        trial: Trial,
        plan: RunPlan,
        storage: Storage,
        extra: dict[str, Any],
        events: queue.Queue[TrialEvent],
        start_from: Checkpoint | None = None,
        time_offset: float = 0.0,
    ):
        self.trial, self.plan, self.storage, self.events = trial, plan, storage, events
        self.extra, self.start_from, self.time_offset = extra, start_from, time_offset
        # the loggers of RunConfig(callbacks=): the Tune controller logs the results and closes them
        self.loggers = TrialLoggers(plan.run_config.callbacks, trial, local=storage.is_local)
        self.controller: Controller | None = None
        self.inner: Controller | None = None  # a trainer the trial's function built and fit
        self.forward = ReportForward(self)
        self._started_wall = time.time()
        self._restored_wall = self._started_wall  # when the run's current attempt began (a restart restores)
        # per run that reports for the trial (its own: None; each trainer its function fit: that fit's key),
        # the start of its attempt whose reports came last
        self._attempts_seen: dict[object, float] = {}
        self._last_time: dict[int, float] = {}
        self._since_restore: dict[int, int] = {}
        # Ray's training_iteration: the iteration of the checkpoint the attempt restored (0 without
        # one) plus its iterations since: a trial restarted from scratch counts from 1 again, one that
        # exploited another's checkpoint (PBT) from that checkpoint's iteration
        self._restored_iteration: int | None = None  # set by a restore, taken by the attempt's first report
        self._attempt_base = 0
        self._stop = threading.Event()
        self.deciding: Future | None = None  # the worker waits for the answer to its StepResult (AwaitDecision)
        self.decided_round: int | None = None  # the round of that result: not handed on again when reported
        self.thread = threading.Thread(target=self._main, name=f"muster-trial-{trial.trial_id}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stopping(self) -> bool:
        """Whether the run was asked to stop."""
        return self._stop.is_set()

    def stop(self) -> None:
        """Kill the trial's workers; the run ends as STOPPED with its checkpoints kept."""
        self._stop.set()
        if self.deciding is not None and not self.deciding.done():
            self.deciding.set_result(StepDecision(ends=True))  # nothing waits on a killed worker
        for controller in (self.inner, self.controller):
            if controller is not None:
                controller.request_stop()

    @contextmanager
    def keeping(self, checkpoint: Checkpoint) -> Iterator[None]:
        """Keep ``checkpoint`` from this run's retention (``CheckpointConfig(num_to_keep=...)``) while
        the block runs: another trial copies it (PBT). Its own run's or its nested trainer's, whichever
        committed it; one that neither has (already removed, or not loaded yet) is not kept."""
        with ExitStack() as stack:
            for controller in (self.controller, self.inner):
                if controller is not None:
                    stack.enter_context(controller.ledger.holding(checkpoint.path))
            yield

    # -- on the trial's thread ----------------------------------------------------------
    def _main(self) -> None:
        outcome: Any
        try:
            ranked = isinstance(self.plan.train_fn, FunctionTrial)  # Result.from_path ranks its best_checkpoints
            extra = {**self.extra, RANKED_BY: vars(self.plan.run_config.checkpoint_config)} if ranked else self.extra
            record = RunRecord(self.storage, "Trial", extra)
            record.open(allow_finished=True)
            run_config = RunConfig(
                name=self.storage.name,
                storage_path=self.storage.storage_path,
                checkpoint_config=self.plan.run_config.checkpoint_config,
                failure_config=self.plan.run_config.failure_config,
                worker_timeout_s=self.plan.run_config.worker_timeout_s,
                stall_report_s=self.plan.run_config.stall_report_s,
                storage_filesystem=self.storage.fs,
                callbacks=[self.forward, *self.loggers.run_side()],
                verbose=0,
            )
            self.controller = Controller(
                self.plan.train_fn, self.plan.train_config, self.plan.scaling, run_config, self.plan.backend, record,
                self.plan.resume_from,
                hooks=ControllerHooks(
                    on_metrics=self.add_tune_fields, on_other_event=self._on_request, start_from=self.start_from,
                    on_restore=self.on_restore, on_recover=self.on_recover,
                ),
                validation=self.plan.validation,
            )
            if self._stop.is_set():
                self.controller.request_stop()
            result: Result = self.controller.run()
            result.config = self.trial.config
            self._settle_result_file()
            outcome = result
        except BaseException as exc:  # noqa: BLE001 - the trial's failure, handed to the controller
            outcome = exc
        self.forward.flush()
        self.events.put(TrialEnded(self.trial, self, outcome))

    def _settle_result_file(self) -> None:
        """``result.json`` as Ray's logger leaves it (``result_file``): the controller decided the trial's end
        (its stop or the experiment's) before it stopped the run, so what it decided is known here."""
        trial = self.trial
        stopped_on = trial.ending_as == TERMINATED and bool((trial.last_result or {}).get("done"))
        try:
            settle_result_file(self.storage, trial.last_result, stopped_on, trial.experiment_stopped)
        except Exception as exc:  # noqa: BLE001 - the trial ended as it did; its record stays as written
            _log.warning("muster: could not settle %s's result.json (%s): it keeps the rows as reported",
                         trial.trial_name, exc)

    def on_restore(self, checkpoint: Checkpoint) -> None:
        try:
            metrics = self.storage.read_manifest(checkpoint.path).get("metrics", {})
            self._restored_iteration = int(metrics.get("training_iteration", 0))
        except (OSError, ValueError, TypeError):
            self._restored_iteration = 0  # not a committed checkpoint (a trainer's resume_from_checkpoint)
        self.events.put(TrialNotice(self.trial, self, "on_trial_restore", {}))

    def on_recover(self, error: BaseException) -> None:
        """An attempt failed and the run restarts: the controller keeps ``error`` and tells the callbacks."""
        self.forward.flush()
        self.forward.reported_round = -1  # the next attempt reports again from its checkpoint's round
        self.events.put(TrialNotice(self.trial, self, "on_trial_recover", {}, error))

    def add_tune_fields(self, rank: int, metrics: dict[str, Any], t: float, attempt_started: float,
                        member: Member | None, source: object = None) -> dict[str, Any]:
        """``metrics`` with Tune's fields (the controller's ``on_metrics`` hook). ``source``: the run that
        reported (None: the trial's own; a trainer its function fit has a key of its own): a new attempt
        of the same run is a restart after a failure (Ray's "restore"), a trainer's first attempt is not
        (its reports and the function's own continue one count, as Ray's ``TuneReportCallback`` gives)."""
        self._note_attempt(attempt_started, source)
        where = (member.pid, member.host, member.ip) if member is not None else None
        out = self._tune_fields(rank, metrics, t, where)
        self._last_time[rank] = t
        self._since_restore[rank] = out["iterations_since_restore"]
        return out

    def _note_attempt(self, attempt_started: float, source: object = None) -> None:
        """A report or step of the attempt that began at ``attempt_started``: a new attempt of a run
        already seen is a restart (Ray's "restore"), counted from the checkpoint it resumed."""
        seen = self._attempts_seen.get(source)
        if attempt_started == seen:
            return
        if seen is not None:
            self._restored_wall = attempt_started  # a restart after a failure: Ray's "restore"
            self._since_restore.clear()
            self._last_time.clear()
        if seen is not None or self._restored_iteration is not None or not self._attempts_seen:
            self._attempt_base = self._restored_iteration or 0
        self._restored_iteration = None
        self._attempts_seen[source] = attempt_started

    def _tune_fields(self, rank: int, metrics: dict[str, Any], t: float,
                     where: tuple[int | None, str | None, str | None] | None) -> dict[str, Any]:
        """``metrics`` with what Tune adds to a result (fields already there are kept); ``where``:
        the reporting process's pid, host name and IP, as it gave them."""
        pid, host, ip = where or (None, None, None)
        last = self._last_time.get(rank, self._restored_wall)
        since_restore = self._since_restore.get(rank, 0) + 1
        base = self._attempt_base if self._restored_iteration is None else self._restored_iteration
        # what Ray adds to every result, in the order its result (and result.json) holds them; each start of
        # the trial's run is a "restore": this run of a paused or restored trial, and each restart after a
        # failure. A result's own training_iteration is kept (Ray's Trainable fills it in only where missing).
        # (the ledger adds training_iteration, timestamp and checkpoint_dir_name after these)
        added: dict[str, Any] = {
            "done": False,
            SHOWN_ITERATION: metrics.get("training_iteration",
                                         base + metrics.get("iterations_since_restore", since_restore)),
            "trial_id": self.trial.trial_id, "date": time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(t)),
            "time_this_iter_s": max(t - last, 0.0),
            "time_total_s": self.time_offset + max(t - self._started_wall, 0.0),
        }
        if pid is not None:  # the reporting process (the trial's function, or a trainer's worker)
            added["pid"] = pid
        added.update({
            "hostname": host or _HOST,  # the reporting worker's, as Ray's (the trial actor's)
            "node_ip": ip or _node_ip(), "config": self.trial.config,
            "time_since_restore": max(t - self._restored_wall, 0.0), "iterations_since_restore": since_restore,
        })
        if self.trial.experiment_tag:
            added["experiment_tag"] = self.trial.experiment_tag
        out = dict(metrics)
        for key, value in added.items():
            out.setdefault(key, value)
        out["trial_id"] = self.trial.trial_id
        return out

    def _on_step(self, step: StepResult) -> Future:
        """A class trainable's result before it is reported: the controller acts on it as on a
        report (``TrialStep``) and answers whether the trial ends there. The worker reports it
        with the Tune fields computed here, so the recorded row is the one acted on."""
        started = self.controller.attempt_started_wall() if self.controller is not None else None
        if started is not None:  # the first step after a restart counts from the restored checkpoint
            self._note_attempt(started)
        fields = self._tune_fields(0, step.metrics, step.time, (step.pid, step.host, step.ip))
        round_ = self.newest_round() + 1
        row = {**fields, "training_iteration": fields[SHOWN_ITERATION], "timestamp": step.time}
        added = {k: v for k, v in fields.items() if k not in step.metrics or k == "trial_id"}
        self.decided_round = round_
        self.deciding = Future()
        self.events.put(TrialStep(self.trial, self, row, added, self.deciding))
        return self.deciding

    def newest_round(self) -> int:
        """The newest round the trial's run has seen (0: none): the worker's next report gets the one after."""
        ledger = self.controller.ledger if self.controller is not None else None
        if ledger is None:
            return 0
        rounds = [round_of(r) for r in ledger.reports] + [c.round for c in ledger.committed]
        return max(rounds + [0])

    def _on_request(self, handle: RuntimeActor, payload: Any) -> Any:
        """The trial's function called ``TorchTrainer(...).fit()``: run that trainer here, in the
        driver, as part of this trial. Its rank 0's reports become the trial's results."""
        if isinstance(payload, StepResult):
            return self._on_step(payload)
        if isinstance(payload, AwaitDecision):  # its result is on the queue already: the report came first
            self.deciding = Future()
            self.events.put(TrialAwaits(self.trial, self, self.deciding))
            return self.deciding
        if not isinstance(payload, FitRequest):
            raise MusterError(f"unknown request from a trial's worker: {type(payload).__name__}")
        return fit_in_trial(self, handle, payload)
