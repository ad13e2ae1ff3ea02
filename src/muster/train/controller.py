"""The training controller: an explicit state machine in the driver.

    INITIALIZING -> SCHEDULING -> RUNNING -> FINISHED | STOPPED
                        ^            |
                        |            v
                        +------ RESTARTING ----> ERRORED

and INTERRUPTED (Ctrl-C, SIGTERM) or ERRORED from any state not final;
``_ALLOWED`` is the table.  It alone acts; what to do on a failure and which checkpoints to keep are
pure functions in ``_internal/policies.py``.  Reports are taken in on the
worker reader threads (so ``report()`` returns as soon as it is recorded);
everything else -- a worker finishing, raising, dying, or going silent --
arrives on one queue and is handled here, in order (what a stalled or failed
attempt is reported as: ``_internal/diagnosis.py``).  A local-mode run
(``num_workers=0``) has no gang: its one attempt runs the function on the
controller's thread and hands each report to ``take_report`` directly.
"""

from __future__ import annotations

import enum
import os
import queue
import signal
import threading
import time
import warnings
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

from muster.core.api import get_runtime
from muster.core.interrupts import SafeInterrupts, sigterm_as_interrupt
from muster.core.runtime import RuntimeActor
from muster.exceptions import MusterError, RunOutputWarning, TrainingFailedError
from muster.observe.progress import ProgressView
from muster.observe.recorder import RunRecorder
from muster.tasks import owner as task_owner
from muster.train._internal import events as ev
from muster.train._internal import diagnosis, listeners, local_mode
from muster.train._internal import policies
from muster.train._internal.backend import Backend
from muster.train._internal.checkpoint_manager import CheckpointManager
from muster.train._internal.datasets import DatasetLoop
from muster.train._internal.policies import CheckpointRecord
from muster.train._internal.session import SessionSpec
from muster.train._internal.validator import Validator
from muster.train.callback import TrainRunContext
from muster.train.checkpoint import Checkpoint
from muster.train.config import RunConfig, ScalingConfig
from muster.train.context import TrainContext
from muster.train._internal.result_base import Result
from muster.train.result import build, is_trial
from muster.train.run_state import RunRecord
from muster.train.validation import ValidationConfig, take_request
from muster.train.storage import Storage
from muster.train.worker_group import Member, WorkerGroup


_DRAIN_S = 2.0  # after killing a gang, how long to wait for its last reports to be read


@dataclass(frozen=True)
class _Grow:
    """Not a failure: an elastic gang ends its attempt to restart bigger."""

    reason: str


class State(enum.Enum):
    INITIALIZING = "INITIALIZING"
    SCHEDULING = "SCHEDULING"
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"
    FINISHED = "FINISHED"
    ERRORED = "ERRORED"
    INTERRUPTED = "INTERRUPTED"
    STOPPED = "STOPPED"


_FINAL = frozenset({State.FINISHED, State.ERRORED, State.INTERRUPTED, State.STOPPED})
#: Every transition the controller may make; anything else is a bug and raises.
_ALLOWED: dict[State, frozenset[State]] = {
    State.INITIALIZING: frozenset({State.SCHEDULING, State.ERRORED, State.INTERRUPTED}),
    State.SCHEDULING: frozenset({State.RUNNING, State.RESTARTING, State.ERRORED, State.INTERRUPTED, State.STOPPED}),
    State.RUNNING: frozenset({State.FINISHED, State.STOPPED, State.RESTARTING, State.ERRORED, State.INTERRUPTED}),
    State.RESTARTING: frozenset({State.SCHEDULING, State.ERRORED, State.INTERRUPTED}),
    **{s: frozenset() for s in _FINAL},
}


_GANG = "the Train run or Tune trial whose worker made it"


@dataclass
class _Attempt:
    index: int
    group: WorkerGroup
    events: "queue.Queue[ev.ControlEvent]" = field(default_factory=queue.Queue)
    finished: set[int] = field(default_factory=set)
    uploads: dict[int, set[int]] = field(default_factory=dict)  # rank -> rounds queued for async upload
    last_activity: float = field(default_factory=time.monotonic)
    stall_reported: tuple[float, float] | None = None  # (last_activity then, quiet seconds said)
    start_latest: CheckpointRecord | None = None  # the latest checkpoint when the attempt began
    started_wall: float = field(default_factory=time.time)  # when it began (epoch seconds)
    owner: task_owner.Gang = field(default_factory=lambda: task_owner.Gang(_GANG))


@dataclass
class ControllerHooks:
    """What a library running trainers (Tune) may plug into a run's controller.

    Attributes:
        on_metrics: ``(rank, metrics, time, attempt_started, member) -> metrics`` applied to each
            report before it is recorded (Tune adds ``time_total_s``, ``trial_id``...);
            ``attempt_started`` is when the attempt that reported began (a restart: a new one),
            ``member`` the reporting worker (its pid, host and IP, as the worker gave them; None if
            it is no longer in the gang).
        on_other_event: handles worker events that are not reports; its
            return value (or Future) is the reply. Requests of the tasks layer
            (``.remote()``, ``muster.get``, actors) never reach it.
        start_from: the checkpoint the first attempt starts from, even if the
            run has committed checkpoints of its own (PBT's exploit step).
        on_restore: ``(checkpoint) -> None``, called as an attempt's gang starts from a
            checkpoint of the run's own, or from ``start_from`` (not from the trainer's
            ``resume_from_checkpoint``, which starts a run rather than restores one).
        on_recover: ``(error) -> None``, called when an attempt failed and the run restarts.
    """

    on_metrics: Callable[[int, dict[str, Any], float, float, Member | None], dict[str, Any]] | None = None
    on_other_event: Callable[[RuntimeActor, Any], Any] | None = None
    start_from: Checkpoint | None = None
    on_restore: Callable[[Checkpoint], None] | None = None
    on_recover: Callable[[BaseException], None] | None = None


class Controller:
    def __init__(
        self,
        train_fn: Callable[..., Any],
        train_config: dict[str, Any] | None,
        scaling: ScalingConfig,
        run_config: RunConfig,
        backend: Backend,
        record: RunRecord,
        initial_checkpoint: Checkpoint | None = None,
        hooks: ControllerHooks | None = None,
        validation: ValidationConfig | None = None,
    ):
        self.train_fn, self.train_config = train_fn, train_config
        self.scaling, self.run_config, self.backend = scaling, run_config, backend
        self.record = record
        self.storage: Storage = record.storage
        self.initial_checkpoint = initial_checkpoint
        self.state = State.INITIALIZING
        self.failures: list[BaseException] = []
        self.view = ProgressView(self.storage.name, scaling.max_workers, run_config.verbose, self.storage.uri)
        self.ledger = CheckpointManager(
            self.storage, run_config.checkpoint_config, on_commit=self._on_commit,  # type: ignore[arg-type]
            warn=lambda message: _warn(self.view, message), on_round=self._on_round,
        )
        self._attempt: _Attempt | None = None
        self.return_value: Any = None  # what rank 0's training function returned (the Result's return_value)
        self.hooks = hooks or ControllerHooks()
        self._stop_requested = threading.Event()
        self.recorder = RunRecorder(
            root=record.state.get("store_root") or self.storage.root_uri, path=self.storage.uri,
            name=self.storage.name, state=record.state, resources=scaling.worker_resources,
            logs=get_runtime(),
        )
        self._resizes = 0  # elastic restarts to grow the gang: not failures
        self._next_check = 0.0
        self._grow_to = 0  # an elastic restart's target size (the resources were seen free)
        self._uploads_lock = threading.Lock()
        run_context = TrainRunContext(run_config, train_config, scaling, getattr(backend, "config", backend),
                                      getattr(train_fn, "data_config", None))
        self._user = listeners.UserCallbacks(run_config.callbacks or [], self.storage.fs, run_context)
        self.validator = Validator(validation, self.ledger, self.view.event,
                                   lambda message: _warn(self.view, message)) if validation is not None else None
        # Every report and every commit goes to each of these, in this order.
        self._listeners: list[listeners.RunListener] = [
            listeners.ViewListener(self.view),
            listeners.RecordListener(self.record, State.RUNNING.value),
            listeners.RecorderListener(self.recorder),
            self._user,
        ]

    def _max_failures(self) -> int:
        config = self.run_config.failure_config
        assert config is not None  # RunConfig.__post_init__ fills it
        return config.max_failures

    def request_stop(self) -> None:
        """End the run early, as a success (Tune's schedulers and stoppers use this).

        Thread-safe. The gang is killed at once; reports it already sent are kept and
        the run finishes with status STOPPED, its committed checkpoints intact."""
        self._stop_requested.set()
        attempt = self._attempt
        if attempt is not None:
            attempt.events.put(ev.StopRequested())

    def record_report(self, round_: int, metrics: dict[str, Any], t: float) -> dict[str, Any]:
        """Record a report that no worker of this run made, as rank 0's (Tune records a nested
        trainer's reports as its trial's own). Returns the stored row."""
        return self.ledger.record(0, round_, metrics, None, t, 0)

    # -- the state machine ----------------------------------------------------------
    def run(self) -> Result:
        self.ledger.load_previous()
        self._previous_attempts = int(self.record.state.get("attempts", 0))
        self.record.mark(State.RUNNING.value, self.ledger.latest)
        self.view.start()
        restore_sigterm = sigterm_as_interrupt()
        try:
            self._user.call("on_run_start", self.storage.uri, self.storage.name)
            if self.validator is not None:
                self.validator.resume()
            while True:
                # attempts are numbered across drivers: a resumed run's first attempt is not 0
                index = self._previous_attempts + len(self.failures) + self._resizes
                error = self._run_attempt(index)
                if isinstance(error, _Grow):  # not a failure: the gang restarts bigger
                    self.recorder.attempt_ended(index, None)
                    self._resizes += 1
                    self._transition(State.RESTARTING)
                    self._say_restart(error.reason)
                    continue
                self.recorder.attempt_ended(index, error)
                if error is None:
                    self._transition(State.STOPPED if self._stop_requested.is_set() else State.FINISHED)
                    break
                self.failures.append(error)
                self._user.on_failure(error)
                max_failures = self._max_failures()
                decision = policies.on_failure(max_failures, len(self.failures), retryable=policies.retryable(error))
                if decision is policies.Decision.RAISE:
                    if self.validator is not None:
                        self.validator.finish()
                    self._transition(State.ERRORED)
                    trial = self.record.state.get("trial_id")
                    raise TrainingFailedError(self.failures, self.storage.uri, max_failures,
                                              subject="Training" if trial is None else f"Trial {trial}")
                self._transition(State.RESTARTING)
                if self.hooks.on_recover is not None:
                    self.hooks.on_recover(error)
                self._say_restart(f"attempt {index + 1} failed: {_first_line(error)}")
            if self.validator is not None:
                self.validator.finish()
            if self.state is State.STOPPED:
                self.return_value = None  # as Ray's: only a run that finished by itself has one
            result = build(self.storage, self.ledger.reports, self.ledger.best(), None, is_trial(self.record.state),
                           self.return_value, self.ledger.config.num_to_keep)
            self._user.call("on_run_end", result)
            return result
        except KeyboardInterrupt as exc:
            if self.state not in _FINAL:
                self._transition(State.INTERRUPTED)
            latest = self.ledger.latest
            self.view.event(
                "interrupted; workers stopped. "
                + (f"Latest checkpoint: {latest.path}. " if latest else "")
                + "Run the same script again (same RunConfig name and storage_path) to resume."
            )
            self._tell_failed(exc)  # torn down as Ray's abort tears its callbacks down
            raise
        except BaseException as exc:
            # Failed for good, or not by an attempt (e.g. the gang can never be scheduled): recorded
            # ERRORED rather than left RUNNING
            if self.state not in _FINAL:
                self._transition(State.ERRORED)
            self._tell_failed(exc)
            raise
        finally:
            if self.validator is not None:  # Ctrl-C or an engine error: those not done stay pending
                self.validator.stop()
            restore_sigterm()
            self.view.stop(self.state.value.lower())
            self.recorder.close()

    def _say_restart(self, reason: str) -> None:
        """Show and record that the gang restarts, and from which checkpoint."""
        latest = self.ledger.latest
        message = f"{reason}; restarting from " + (latest.path.rsplit("/", 1)[-1] if latest else
                                                   "the start (no checkpoint yet)")
        self.view.event(message)
        self.recorder.event("restart", message)

    def _tell_failed(self, exc: BaseException) -> None:
        """Interrupted or failed: no on_run_end comes, so on_run_failed (loggers flush and close their files)."""
        try:
            self._user.call("on_run_failed", exc)
        except Exception as hook_error:  # noqa: BLE001 - the run's own error is the one to raise
            _warn(self.view, f"a RunConfig callback's on_run_failed raised {hook_error!r}")

    def _transition(self, state: State) -> None:
        if state is not self.state and state not in _ALLOWED[self.state]:
            raise AssertionError(f"controller bug: no transition {self.state.value} -> {state.value}")
        self.state = state
        self.view.set_state(state.value.lower())
        if state in _FINAL:
            self.record.mark(state.value, self.ledger.latest, [str(e) for e in self.failures])
            self.recorder.finished(state.value, self.failures[-1] if state is State.ERRORED and self.failures else None)

    def _run_attempt(self, index: int) -> BaseException | _Grow | None:
        """One gang, start to end. Returns the attempt's root cause, or None on success."""
        if self.scaling.max_workers == 0:
            self._run_in_driver(index)
            return None
        self._transition(State.SCHEDULING)
        self.record.state["attempts"] = index + 1
        env_vars = (self.run_config.worker_runtime_env or {}).get("env_vars") or {}
        group = WorkerGroup(get_runtime(), self.scaling, {str(k): str(v) for k, v in env_vars.items()})
        attempt = self._attempt = _Attempt(index, group, start_latest=self.ledger.latest)
        self.view.set_state("scheduling", workers_up=0, attempt=index)
        complete = False
        try:
            group.start(self._on_event, self._on_death, on_wait=self.view.event, size=self._gang_size(),
                        run=f"{self.record.trainer_cls} run {self.storage.name!r}")
            self.backend.check_placement([(m.rank, m.node, m.handle.gpu_ids) for m in group.members])
            self.view.set_state("running", workers_up=len(group.members))
            self.recorder.attempt_started(index, group.members)
            self.view.event(
                f"{len(group.members)}/{self.scaling.max_workers} workers up (pids "
                f"{', '.join(str(m.pid) for m in group.members)})"
                + (f", attempt {index + 1}" if index else "")
            )
            self._transition(State.RUNNING)
            futures = self._launch(group, index)
            for member, fut in zip(group.members, futures):
                fut.add_done_callback(lambda f, m=member: attempt.events.put(ev.WorkerDone(m, f)))
            error = self._watch(attempt)
            if isinstance(error, BaseException):
                self._drain_uploads(attempt)
            # a stopped gang was killed mid-loop: its open rounds are treated as after a failure
            complete = error is None and not self._stop_requested.is_set()
            return error
        finally:
            # Kill the gang, then take in every report its members had already sent
            # (their links are read to the end) before deciding what is committed.
            group.shutdown(drain_s=_DRAIN_S)
            attempt.owner.close()  # the actors its workers made go with them
            self._attempt = None
            self.view.set_state(self.state.value.lower(), workers_up=0)
            self.ledger.close_all(complete=complete)

    def _launch(self, group: WorkerGroup, index: int) -> list[Future]:
        envs = group.rendezvous_env()
        start_round, checkpoint, train_fn = self._start_point(len(group.members))
        args = []
        for member, env in zip(group.members, envs):
            ctx = TrainContext(
                world_rank=member.rank,
                world_size=len(group.members),
                local_rank=member.local_rank,
                local_world_size=member.local_world_size,
                node_rank=member.node_rank,
                experiment_name=self.storage.name,
                run_dir=self.storage.uri,
                attempt=index,
            )
            spec = SessionSpec(ctx, self.storage, start_round, checkpoint, self.scaling.worker_resources)
            args.append((train_fn, self.train_config, spec, env, self.backend))
        return group.run("run", args)

    def _start_point(self, world: int) -> tuple[int, Checkpoint | None, Callable[..., Any]]:
        """An attempt of ``world`` ranks begins: the round it continues from, the checkpoint it starts
        from, and the function its ranks run."""
        start_round = self.ledger.start_attempt(world)
        latest = self.ledger.latest_sound(lambda msg: _warn(self.view, msg)) if self.ledger.committed else None
        restored = Checkpoint(latest.path, self.storage.fs) if latest else None
        if self.hooks.start_from is not None:  # once: e.g. a PBT trial cloning another's checkpoint
            restored, self.hooks.start_from = self.hooks.start_from, None
        if restored is not None and self.hooks.on_restore is not None:
            self.hooks.on_restore(restored)
        checkpoint = restored if restored is not None else self.initial_checkpoint
        train_fn = self.train_fn
        if isinstance(train_fn, DatasetLoop):  # this gang's shards (a DataConfig.configure; Ray's streaming splits)
            train_fn = train_fn.for_gang(world)
        return start_round, checkpoint, train_fn

    def _run_in_driver(self, index: int) -> None:
        """Local mode (``num_workers=0``, Ray Train V2's): the training function runs on this thread as rank 0
        of 1 (``_internal/local_mode.py``); its reports take a worker's path through ``take_report``. Its
        exception is raised as it is, with no retry, as in Ray."""
        local_mode.check_alone(self.record.trainer_cls, in_trial=self.hooks != ControllerHooks())
        self._transition(State.SCHEDULING)
        self.record.state["attempts"] = index + 1
        self._attempt = _Attempt(index, WorkerGroup(get_runtime(), self.scaling), start_latest=self.ledger.latest)
        self._transition(State.RUNNING)
        self.recorder.attempt_started(index, [local_mode.DriverRank()])
        self.view.event(f"local mode (num_workers=0): the training function runs in this process ({os.getpid()})")
        start_round, checkpoint, train_fn = self._start_point(1)
        ctx = TrainContext(world_rank=0, world_size=1, local_rank=0, local_world_size=1, node_rank=0,
                           experiment_name=self.storage.name, run_dir=self.storage.uri, attempt=index)
        spec = SessionSpec(ctx, self.storage, start_round, checkpoint, {})
        complete = False
        try:
            self.return_value = local_mode.run_in_driver(train_fn, self.train_config, spec, self.backend,
                                                         lambda payload, _wait: self.take_report(payload))
            self.ledger.rank_finished(0)
            complete = True
        except Exception as exc:
            self.failures.append(exc)  # recorded as the run's error; run() raises it as it is
            self.recorder.attempt_ended(index, exc)
            raise
        finally:
            self._attempt = None
            self.ledger.close_all(complete=complete)

    # -- elastic runs -----------------------------------------------------------------
    def _gang_size(self) -> int:
        if not self.scaling.elastic:
            return self.scaling.max_workers
        grow_to, self._grow_to = self._grow_to, 0
        # The last gang's resources return to the engine a moment after it is killed: look twice.
        fit = get_runtime().capacity(self.scaling.worker_resources)
        time.sleep(0.5)
        fit = max(fit, get_runtime().capacity(self.scaling.worker_resources), grow_to)
        return policies.elastic_size(self.scaling.min_workers, self.scaling.max_workers, fit)

    def _grow_now(self, attempt: _Attempt) -> "_Grow | None":
        """Checked while an elastic gang runs (every ``elastic_resize_monitor_interval_s``, default 1 s): do more
        workers fit now?"""
        if not self.scaling.elastic or time.monotonic() < self._next_check:
            return None
        self._next_check = time.monotonic() + (self.scaling.elastic_resize_monitor_interval_s or 1.0)
        size = len(attempt.group.members)
        latest, before = self.ledger.latest, attempt.start_latest
        fresh = latest is not None and (before is None or latest.round != before.round)
        if size >= self.scaling.max_workers or not fresh:
            return None
        more = get_runtime().capacity(self.scaling.worker_resources)
        if not policies.should_grow(size, self.scaling.max_workers, more, fresh):
            return None
        self._grow_to = min(self.scaling.max_workers, size + more)
        return _Grow(f"resources for {self._grow_to - size} more worker(s) came free: "
                     f"growing from {size} to {self._grow_to} workers")

    def _watch(self, attempt: _Attempt) -> BaseException | _Grow | None:
        n = len(attempt.group.members)
        timeout = self.run_config.worker_timeout_s
        with SafeInterrupts(signal.SIGINT, signal.SIGTERM) as interrupts:  # Ctrl-C between waits, not in one
            return self._watch_until_done(attempt, n, timeout, interrupts)

    def _watch_until_done(self, attempt: _Attempt, n: int, timeout: float | None,
                          interrupts: SafeInterrupts) -> BaseException | _Grow | None:
        while len(attempt.finished) < n:
            interrupts.check()
            if self._stop_requested.is_set():
                return None
            try:
                event = attempt.events.get(timeout=0.25)
            except queue.Empty:
                grow = self._grow_now(attempt)
                if grow is not None:
                    return grow
                diagnosis.report_stall(attempt, self.run_config.stall_report_s,
                                       lambda message: _warn(self.view, message), self.recorder)
                if timeout is not None and time.monotonic() - attempt.last_activity > timeout:
                    return MusterError(
                        f"No worker reported for {timeout:.0f} s (RunConfig(worker_timeout_s={timeout})); "
                        "the gang was stopped as hung. Raise worker_timeout_s if a step legitimately "
                        "takes that long."
                    )
                continue
            if isinstance(event, ev.StopRequested):
                return None
            if isinstance(event, ev.WorkerDied):
                return diagnosis.root_cause(event.error, event.member)
            exc = event.future.exception()
            if exc is not None:
                return diagnosis.pick_root_cause(attempt, diagnosis.root_cause(exc, event.member))
            attempt.finished.add(event.member.rank)
            if event.member.rank == 0:  # (of the attempt that succeeds: each sets it as its rank 0 ends)
                self.return_value = event.future.result()
            attempt.last_activity = time.monotonic()
            self.ledger.rank_finished(event.member.rank)
        return None

    def _drain_uploads(self, attempt: _Attempt) -> None:
        """A rank failed: let the healthy ranks finish the async uploads they had queued
        (up to ``RunConfig.upload_drain_s``), so rounds whose ``report()`` returned on
        every reporter still commit. Their reports arrive on the reader threads meanwhile."""
        deadline = time.monotonic() + self.run_config.upload_drain_s
        members = {m.rank: m for m in attempt.group.members}
        while time.monotonic() < deadline:
            with self._uploads_lock:
                waiting = [r for r, rounds in attempt.uploads.items() if rounds and members[r].handle.is_alive()]
            if not waiting:
                return
            try:
                attempt.events.get(timeout=0.05)  # deaths and ends are seen through is_alive()
            except queue.Empty:
                pass
        with self._uploads_lock:
            left = {r: sorted(rounds) for r, rounds in attempt.uploads.items() if rounds}
        if left:
            _warn(self.view, f"async checkpoint uploads still pending after RunConfig(upload_drain_s="
                             f"{self.run_config.upload_drain_s}) were dropped (rank: rounds): {left}")

    def attempt_started_wall(self) -> float | None:
        """When the running attempt began (wall clock), as ``on_metrics`` is told; None between attempts."""
        attempt = self._attempt
        return attempt.started_wall if attempt is not None else None

    # -- worker reader threads ------------------------------------------------------
    def _on_event(self, handle: RuntimeActor, payload: Any) -> Any:
        if isinstance(payload, ev.Sample):
            self.recorder.sample(payload.rank, payload.figures)
            if payload.figures.get("data"):  # muster.data's operators in that worker
                self.view.on_data(payload.rank, payload.figures["data"])
            return None
        if isinstance(payload, ev.FitRequest) and self.hooks.on_other_event is not None:
            return self.hooks.on_other_event(handle, payload)  # a Tune trial runs it as part of the trial
        if task_owner.serves(payload):
            # The training function called .remote(), muster.get/put or made an actor: the driver
            # owns those, as it owns a task's (before, these got None back and went on silently).
            attempt = self._attempt
            return (attempt.owner if attempt else task_owner).handle_event(handle, payload)
        if not isinstance(payload, (ev.Report, ev.ReportStarted, ev.UploadFailed)):
            if self.hooks.on_other_event is None:
                raise MusterError(f"unknown request from a training worker: {type(payload).__name__}")
            return self.hooks.on_other_event(handle, payload)
        return self.take_report(payload, handle)

    def take_report(self, payload: ev.Report | ev.ReportStarted | ev.UploadFailed,
                    handle: RuntimeActor | None = None) -> Any:
        """A rank's report event, from ``handle`` (None: the driver's own rank, in local mode); returns the reply."""
        attempt = self._attempt
        if attempt is None:
            raise MusterError("the run is ending; this report was not recorded")
        if isinstance(payload, ev.ReportStarted):
            if payload.async_upload:
                with self._uploads_lock:
                    attempt.uploads.setdefault(payload.rank, set()).add(payload.round)
            self.ledger.announce(payload.rank, payload.round)
            return None
        with self._uploads_lock:
            attempt.uploads.get(payload.rank, set()).discard(payload.round)
        if isinstance(payload, ev.UploadFailed):
            return None
        attempt.last_activity = time.monotonic()
        metrics, validation = take_request(payload.metrics, self.validator is not None)
        if self.hooks.on_metrics is not None:
            member = attempt.group.member_of(handle) if handle is not None else None
            metrics = self.hooks.on_metrics(payload.rank, metrics, payload.time, attempt.started_wall, member)
        row = self.ledger.record(
            payload.rank, payload.round, metrics, payload.files, payload.time, attempt.index, payload.state,
            validation,
        )
        for listener in self._listeners:
            listener.on_report(row, payload.timing)
        return True

    def _on_death(self, handle: RuntimeActor, error: BaseException) -> None:
        attempt = self._attempt
        if attempt is None:
            return
        member = attempt.group.member_of(handle)
        if member is not None:
            attempt.events.put(ev.WorkerDied(member, error))

    def _on_commit(self, record: CheckpointRecord) -> None:
        for listener in self._listeners:
            listener.on_checkpoint(record)

    def _on_round(self, round_: int, metrics: dict[int, dict[str, Any]], record: CheckpointRecord | None,
                  validation: Any) -> None:
        self._user.on_round(round_, metrics, record)
        if validation is not None and record is not None and self.validator is not None:
            self.validator.submit(round_, record.path, validation)


def _warn(view: ProgressView, message: str) -> None:
    """Say ``message`` once: on the run's live output when it has one (and as a RunOutputWarning,
    recorded but not printed again), else as a plain UserWarning."""
    if view.verbose:
        view.event(f"WARNING: {message}")
        warnings.warn(RunOutputWarning(message), stacklevel=3)
    else:
        warnings.warn(message, stacklevel=3)


warnings.filterwarnings("ignore", category=RunOutputWarning, append=True)  # printed by the run's output


def _first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
