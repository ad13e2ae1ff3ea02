"""The Tune controller: one loop in the driver that starts, watches and ends trials.

Trials are packed onto the engine's resources by the controller's own accounting: a trial starts only
when everything it needs (a function trial's worker, or a trainer trial's whole gang) fits in what running
trials leave free, so gangs never hold half their members while waiting for the rest, and too many
multi-worker trials cannot deadlock.  Each trial's run reports on its own thread; results and ends arrive
on one queue and are handled here, in order: searcher and scheduler see each result before the next one,
and a decision to stop a trial kills its workers at once -- except a class trainable's: it hands each result
over before reporting it (``TrialStep``) and waits for the answer before its next step, and a decision to
stop or pause it on that result lets it save (``checkpoint_at_end``), report and end by itself. A function
trainable's ``tune.report`` waits for the decision on its result (``TrialAwaits``), as Ray's, so it is killed there.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import time
from collections.abc import Callable
from typing import Any

import cloudpickle

from muster.core import resources as res, settings
from muster.core.interrupts import SafeInterrupts
from muster.core.api import get_runtime
from muster.exceptions import InvalidTypeError, ResourcesUnavailableError, root_cause_summary
from muster.observe.trial_rows import trial_result
from muster.observe.tune_progress import TuneProgress, flatten_config
from muster.train.checkpoint import Checkpoint
from muster.train.storage import Storage
from muster.tune.callback import CallbackList
from muster.tune.checkpoint_clone import clone_latest_checkpoint
from muster.tune.experiment_state import save_state
from muster.tune.schedulers.trial_scheduler import PendingConfig, TrialScheduler
from muster.tune.stopper import Stopper
from muster.tune.trial import (
    ERROR,
    PAUSED,
    PENDING,
    RUNNING,
    TERMINATED,
    RunPlan,
    Trial,
    TrialAwaits,
    TrialEnded,
    TrialEvent,
    TrialNotice,
    TrialResult,
    TrialRun,
    TrialStep,
    custom_dirname,
    latest_checkpoint,
    trial_dirname,
    write_params,
)
from muster.tune.messages import StepDecision
from muster.tune.metric_check import check_reported, wanted_metrics
from muster.tune.trial_info import ERROR_FILE, write_error
from muster.tune.trial_loggers import TrialLoggers
from muster.tune.result import SHOULD_CHECKPOINT

_log = logging.getLogger(__name__)
_SAVE_EVERY_S = 1.0


def graceful_stops() -> tuple[str, ...]:
    """The signals on which, as in Ray, Tuner.fit() and tune.run stop the trials and return (SIGTERM and a
    second signal raise KeyboardInterrupt); Ctrl-C is not one under ``TUNE_DISABLE_SIGINT_HANDLER=1``."""
    return ("SIGUSR1",) if settings.tune_sigint_handler_disabled() else ("SIGINT", "SIGUSR1")


def _watched_signals() -> list[signal.Signals]:
    """The signals the loop takes at a safe point. Under ``TUNE_DISABLE_SIGINT_HANDLER=1`` a program's own
    SIGINT handler is left in place, as Ray leaves it; Python's default one (raise ``KeyboardInterrupt``)
    is still taken between waits, so that the interrupt stops the trials cleanly before it is raised."""
    watched = [signal.SIGINT, signal.SIGTERM, signal.SIGUSR1]
    if settings.tune_sigint_handler_disabled() and signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        watched.remove(signal.SIGINT)
    return watched


_FINISHED = "FINISHED"


class TuneController:
    def __init__(
        self,
        experiment: Storage,
        trials: list[Trial],
        make_plan: Callable[[Trial, dict[str, Any]], RunPlan],
        trainable_name: str,
        searcher: Any,
        scheduler: TrialScheduler,
        stopper: Stopper,
        metric: str | None,
        mode: str | None,
        max_concurrent: int | None,
        time_budget_s: float | None,
        verbose: int,
        id_prefix: str,
        store_root: str,
        fail_fast: bool | str = False,
    ):
        self.experiment, self.trials, self.make_plan = experiment, trials, make_plan
        for trial in trials:
            trial.fs = experiment.fs  # (a restored experiment's trials: their folders' file system)
        self.trainable_name, self.searcher, self.scheduler, self.stopper = trainable_name, searcher, scheduler, stopper
        self.metric, self.mode, self.max_concurrent, self.time_budget_s = metric, mode, max_concurrent, time_budget_s
        self._wanted_metrics = wanted_metrics(metric, scheduler, searcher)  # each result must hold them (strict check)
        self.id_prefix, self.store_root = id_prefix, store_root
        # FailureConfig(fail_fast=True): the first trial error stops the experiment; "raise": and
        # Tuner.fit() raises it (``failed_fast`` names that trial)
        self.fail_fast = fail_fast
        self.failed_fast: str | None = None
        self.interrupted_by: str | None = None  # the signal ("SIGINT"...) that stopped the loop, its state saved
        self._deciding: Trial | None = None  # the trial whose step result is being acted on
        # TuneConfig(trial_name_creator=, trial_dirname_creator=): each a function of the new trial, or None
        self.trial_namers: tuple[Callable[[Trial], str] | None, Callable[[Trial], str] | None] = (None, None)
        self.events: queue.Queue[TrialEvent] = queue.Queue()
        self.errors: dict[str, BaseException] = {}
        self.progress = TuneProgress(experiment.name, experiment.uri, metric, mode, verbose)
        self._search_done = False
        self._stopping_all = False
        self._dirty = True
        self._last_save = 0.0
        self._plans: dict[str, RunPlan] = {}
        self._paused_loggers: dict[str, tuple[TrialLoggers, Any]] = {}  # trial id -> its last run's, with its outcome
        self.callbacks = CallbackList(None)  # the Tuner sets RunConfig(callbacks=...)'s Tune callbacks
        self.setup_info: dict[str, Any] = {}  # and the keywords of their setup()

    # -- what schedulers may ask ----------------------------------------------------------
    def live_trials(self) -> list[Trial]:
        """Trials not finished: a running one being stopped for good counts as finished (Ray marks it
        TERMINATED at once), so PBT never clones the checkpoint of a trial that met its stop criteria."""
        return [t for t in self.trials if t.status in (RUNNING, PAUSED, PENDING) and t.ending_as != TERMINATED]

    def latest_checkpoint(self, trial: Trial) -> Checkpoint | None:
        return latest_checkpoint(self._trial_storage(trial))

    def clone_latest_checkpoint(self, donor: Trial, into: Trial) -> Checkpoint | None:
        """``donor``'s latest checkpoint, copied now into ``into``'s folder (``pbt_exploit``): see
        ``checkpoint_clone.clone_latest_checkpoint``."""
        return clone_latest_checkpoint(donor, lambda: self.latest_checkpoint(donor), self._trial_storage(into))

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> None:
        runtime = get_runtime()
        self.total = runtime.resources()
        started = time.monotonic()
        self.progress.start()
        self.callbacks("setup", **self.setup_info)
        self.callbacks.set_restored()  # a restored run's callback states, as Ray hands them back after setup
        interrupts = SafeInterrupts(*_watched_signals())
        try:
            with interrupts:
                self._loop(started, interrupts)
        except BaseException as exc:
            # Ctrl-C, or an error of the search itself: stop the workers, keep trial states as
            # they are (RUNNING ones resume on Tuner.restore), and say how to go on.
            for trial in self.trials:
                if trial.run is not None:
                    trial.run.stop()
            self._wait_for_runs(10.0)
            self._end_loggers_after_interrupt()
            self._save(force=True)
            if isinstance(exc, KeyboardInterrupt):
                self.progress.interrupted = True
                self.interrupted_by = str(exc)
                self.progress.event(
                    f"experiment interrupted; resume it with Tuner.restore({self.experiment.uri!r}, trainable)"
                )
            raise
        finally:
            for trial in self.trials:
                self._end_paused_loggers(trial)
            self._save(force=True)
            self.progress.stop(self.trials)
            self.callbacks("on_experiment_end", trials=self.trials)

    def _loop(self, started: float, interrupts: SafeInterrupts) -> None:
        """The scheduling loop; a Ctrl-C takes effect between its waits (see SafeInterrupts)."""
        while True:
            interrupts.check()
            self.callbacks.step_begin(self.trials)
            going_on = self._step(started)
            self.callbacks.step_end(self.trials)
            if not going_on:
                return

    def _step(self, started: float) -> bool:
        """One step: start what fits, handle what arrived (waiting up to 0.5 s), save the state.
        Returns False once nothing runs and nothing can start."""
        self._start_trials()
        if not self._running() and not self._startable():
            return False
        if not self._running() and self._stalled():
            return True  # the paused trials nobody would resume were ended: look again
        event = self._next_event(0.5)
        while event is not None:
            self._handle(event)
            event = self._next_event()
        if self.time_budget_s is not None and time.monotonic() - started > self.time_budget_s:
            if not self._stopping_all:
                self.progress.event(f"time budget of {self.time_budget_s:g} s spent; stopping every trial")
            self._stop_everything()
        self.progress.update(self.trials, self.scheduler.debug_string())
        self._save()
        return True

    def _running(self) -> list[Trial]:
        return [t for t in self.trials if t.run is not None]

    def _startable(self) -> bool:
        if self._stopping_all:
            return False
        waiting = [t for t in self.trials if t.status == PENDING or (t.status == PAUSED and t.restart_plan)]
        paused = [t for t in self.trials if t.status == PAUSED]
        return bool(waiting) or not self._search_done or bool(paused)

    def _stalled(self) -> bool:
        """Nothing runs, the search is done, and the scheduler resumes none of the paused trials: no
        event can change that, so rather than wait forever, end them (their results stay) and say so."""
        paused = [t for t in self.trials if t.status == PAUSED and t.run is None and not t.restart_plan]
        if not self._search_done or not paused or any(t.status == PENDING for t in self.trials):
            return False
        self.progress.event(
            f"{type(self.scheduler).__name__} resumes none of the {len(paused)} paused trial(s) and nothing else "
            "runs: ending them as TERMINATED (their results are kept)"
        )
        for trial in paused:
            trial.status = TERMINATED
            self._dirty = True
            self.scheduler.on_trial_complete(self, trial, trial.last_result or None)
            self.searcher.on_trial_complete(trial.trial_id, result=trial.last_result or None)
            self._tell_as(trial, PAUSED, "on_trial_complete")
            self._end_paused_loggers(trial)
        return True

    def _start_trials(self) -> None:
        while not self._stopping_all:
            if self.max_concurrent and len(self._running()) >= self.max_concurrent:
                return
            trial = self._next_trial()
            if trial is None:
                return
            plan = self._plan(trial)
            used = _sum(t.resources for t in self._running())
            free = {k: v - used.get(k, 0.0) for k, v in self.total.items()}
            if not res.fits(plan.resources, free):
                return  # the next trial waits for running ones to end (it stays first in line)
            self._launch(trial, plan)

    def _next_trial(self) -> Trial | None:
        """The trial to start next: a paused one with a restart plan, then pending ones, then new ones.
        A paused trial whose scheduler still works out its config (a ``PendingConfig``) waits for it."""
        self._settle_pending_configs()
        waiting = [t for t in self.trials if t.run is None and t.status == PAUSED and t.restart_plan
                   and _config_pending(t) is None]
        waiting += [t for t in self.trials if t.run is None and t.status == PENDING]
        if waiting:
            return self.scheduler.choose_trial_to_run(self, waiting)
        if not self._search_done:
            trial_id = f"{self.id_prefix}_{len(self.trials):05d}"
            config = self.searcher.suggest(trial_id)
            if config == _FINISHED:
                self._search_done = True
            elif config is not None:
                name = f"{self.trainable_name}_{trial_id}"
                tagger = getattr(self.searcher, "experiment_tag", None)
                tag = tagger(len(self.trials), config) if tagger else str(len(self.trials))
                path = self.experiment.join(self.experiment.uri, trial_dirname(name, tag))
                trial = Trial(trial_id, name, config, path, {}, experiment_tag=tag, trainable=self.trainable_name,
                              fs=self.experiment.fs)
                evaluated = getattr(self.searcher, "evaluated_params", None)
                trial.evaluated_params = evaluated(trial_id, config) if evaluated else {}
                self._name(trial)
                self.trials.append(trial)
                self.scheduler.on_trial_add(self, trial)
                self._dirty = True
                return trial
            return None
        paused = [t for t in self.trials if t.run is None and t.status == PAUSED and _config_pending(t) is None]
        return self.scheduler.choose_trial_to_run(self, paused) if paused else None

    def _settle_pending_configs(self) -> None:
        """Take the restart configs that schedulers finished working out (a failure raises here)."""
        for trial in self.trials:
            pending = _config_pending(trial)
            if pending is not None and pending.done() and trial.restart_plan:
                trial.restart_plan = (pending.result(), *trial.restart_plan[1:])

    def _name(self, trial: Trial) -> None:
        """A new trial's name and folder from ``TuneConfig(trial_name_creator=, trial_dirname_creator=)``,
        each called with the trial, as Ray calls them (the folder's creator sees the custom name)."""
        name_creator, dirname_creator = self.trial_namers
        if name_creator is not None:
            name = name_creator(trial)
            if not isinstance(name, str) or not name:
                raise InvalidTypeError(f"TuneConfig(trial_name_creator=) returned {name!r} for trial "
                                       f"{trial.trial_id}: return a non-empty str, e.g. f'trial_{{trial.trial_id}}'.")
            trial.trial_name = name
        if dirname_creator is not None:
            taken = {t.dirname for t in self.trials if t is not trial}
            trial.custom_dirname = custom_dirname(dirname_creator(trial), taken)
            trial.path = self.experiment.join(self.experiment.uri, trial.custom_dirname)

    def _plan(self, trial: Trial) -> RunPlan:
        plan = self._plans.get(trial.trial_id)
        config = _start_config(trial)
        if plan is None or trial.restart_plan:
            plan = self._plans[trial.trial_id] = self.make_plan(trial, config)
            trial.resources = plan.resources
            if not res.fits(plan.resources, self.total):
                raise ResourcesUnavailableError(
                    f"Trial {trial.trial_name} needs {plan.describe()} = {res.fmt(plan.resources)}, but the "
                    f"whole engine has {res.fmt(res.machine(self.total))}, so it could never start. Give each trial "
                    "less (tune.with_resources(trainable, {'cpu': 1}), or a smaller ScalingConfig for a trainer), or "
                    "run on a bigger machine or cluster (muster.init(address=...))."
                )
        return plan

    def _launch(self, trial: Trial, plan: RunPlan) -> None:
        start_from = None
        if trial.restart_plan:
            config, (_, start_from, donor) = _start_config(trial), trial.restart_plan
            source = "restarting from its own" if donor == trial.trial_id else f"exploiting {donor}'s"  # (a replay)
            self.progress.event(f"{trial.trial_name}: {source} checkpoint, new config {_short(config)}")
            trial.config, trial.restart_plan = config, None
        extra = {
            "experiment": self.experiment.name,
            "trial_id": trial.trial_id,
            "config": trial.config,
            "store_root": self.store_root,
        }
        run = TrialRun(
            trial, plan, self._trial_storage(trial), extra, self.events, start_from,
            float(trial.last_result.get("time_total_s", 0.0) or 0.0),
        )
        self._end_paused_loggers(trial)  # (it is PAUSED still: no hparams)
        trial.run, trial.status, trial.ending_as = run, RUNNING, None
        self._dirty = True
        # The trial's folder exists before callbacks see it (Ray's loggers open files in it).
        storage = self._trial_storage(trial)
        storage.makedirs(storage.run_dir)
        os.makedirs(trial.local_path, exist_ok=True)
        write_params(storage, trial.config)
        self.progress.event(f"{trial.trial_name} started with {_short(trial.config)}")
        self._tell_as(trial, PENDING, "on_trial_start")
        run.start()

    def _trial_storage(self, trial: Trial) -> Storage:
        return Storage(self.experiment.uri, trial.dirname, self.experiment.fs)

    # -- events -----------------------------------------------------------------------------
    def _next_event(self, timeout_s: float = 0.0) -> TrialEvent | None:
        """The next event of the trials' runs, waiting up to ``timeout_s``; None if none came."""
        try:
            return self.events.get(timeout=timeout_s) if timeout_s else self.events.get_nowait()
        except queue.Empty:
            return None

    def _handle(self, event: TrialEvent) -> None:
        if isinstance(event, TrialAwaits):  # the results before it are handled: may the function go on?
            ends = event.run is not event.trial.run or event.trial.ending_as is not None
            return None if event.reply.done() else event.reply.set_result(StepDecision(ends=ends))
        if event.run is not event.trial.run:
            return  # from a run already ended
        if isinstance(event, TrialResult):
            self._on_result(event.trial, event.row)
        elif isinstance(event, TrialStep):
            self._on_step(event)
        elif isinstance(event, TrialNotice):
            if event.hook == "on_trial_recover":  # an attempt failed and the trial's run restarts
                self._on_recover(event.trial, event.error)
            elif not event.trial.experiment_stopped:  # (a checkpoint saved after it: as its results, dropped)
                self.callbacks.trial_event(event.hook, self.trials, event.trial, **event.kwargs)
        else:
            self._on_end(event.trial, event.outcome, event.run.loggers)

    def _on_recover(self, trial: Trial, error: BaseException | None) -> None:
        """As Ray's: the failed attempt's error is added to the trial's ``error.txt``, and the callbacks get
        ``on_trial_recover`` and then ``on_trial_start`` again (its run restarts)."""
        trial.num_failures += 1
        self._dirty = True
        if error is not None:
            self._keep_error(trial, error)
        if not trial.experiment_stopped:
            self._tell_as(trial, PENDING, "on_trial_recover", "on_trial_start")

    def _tell_as(self, trial: Trial, seen_as: str, *hooks: str) -> None:
        """Call ``hooks`` of the callbacks with the trial's status shown as Ray's callbacks see it (``seen_as``):
        a trial that (re)starts is PENDING (RUNNING once they had it); one that completes is still RUNNING, or
        PAUSED where a paused trial is ended (Ray's ``stop_trial`` calls them before it sets TERMINATED)."""
        status, trial.status = trial.status, seen_as
        try:
            for hook in hooks:
                self.callbacks.trial_event(hook, self.trials, trial)
        finally:
            trial.status = status

    def _on_step(self, step: TrialStep) -> None:
        """A class trainable's result, acted on before the worker reports it: a decision to stop
        or pause the trial on it lets the worker save the trainable and report the result with
        that checkpoint (``checkpoint_at_end``) and end, instead of being killed."""
        self._deciding = step.trial
        try:
            result = self._on_result(step.trial, step.row)
        finally:
            self._deciding = None
        if not step.reply.done():  # a callback may have asked for a checkpoint (Ray's SHOULD_CHECKPOINT)
            step.reply.set_result(StepDecision(ends=step.trial.ending_as is not None, fields=step.fields,
                                               checkpoint=bool(result.get(SHOULD_CHECKPOINT))))

    def _on_result(self, trial: Trial, row: dict[str, Any]) -> dict[str, Any]:
        """Act on one result, in Ray's order: the stopper, else the scheduler, decides first (a result
        that stops the trial says ``done=True``), the searcher sees it unless it stopped the trial, then
        the callbacks and the trial's loggers get it, without ``experiment_tag`` (added after them, as
        Ray's trial does). Returns it as the callbacks left it (they may change it, as in Ray)."""
        result = trial_result(row)  # the user's own "_" keys too: Ray hands schedulers the whole result
        tag = result.pop("experiment_tag", None)
        if trial.ending_as is not None:
            # Reported while being stopped (a trainer's; a function trainable waits for each decision): recorded
            # in its run, and no searcher, stopper or scheduler acts on it; shown to callbacks (loggers keep every
            # result) unless the experiment's stop ended the trial: Ray drops those with its pending futures.
            if not trial.experiment_stopped:
                self._tell_callbacks(trial, result)
            return result
        trial.last_result, trial.num_results = result, trial.num_results + 1
        self._dirty = True
        check_reported(trial.trial_id, result, self._wanted_metrics)
        stops = self.stopper(trial.trial_id, result)
        decision = TrialScheduler.STOP if stops else self.scheduler.on_trial_result(self, trial, result)
        if decision == TrialScheduler.STOP:  # done first: the trial's thread reads it once its run stopped
            result["done"] = True  # as Ray marks the result it stops a trial on (its last_result keeps it)
            self._stop(trial, TERMINATED)
        else:
            self.searcher.on_trial_result(trial.trial_id, result)
            if decision == TrialScheduler.PAUSE:
                self._stop(trial, PAUSED)
        trial.analyse(result)
        self._tell_callbacks(trial, result)
        result.update({"experiment_tag": tag} if tag else {})  # into trial.last_result (the same dict)
        if self.stopper.stop_all():
            self.progress.event("the stopper asked to stop the experiment")
            self._stop_everything()
        return result

    def _tell_callbacks(self, trial: Trial, result: dict[str, Any]) -> None:
        """``on_trial_result`` of the Tune callbacks, then the trial's loggers (Ray's come last too)."""
        self.callbacks.trial_event("on_trial_result", self.trials, trial, result=result)
        if trial.run is not None:
            trial.run.loggers.log(result)

    def _on_end(self, trial: Trial, outcome: Any, loggers: TrialLoggers) -> None:
        trial.run = None
        self._dirty = True
        if trial.experiment_stopped:
            # TERMINATED by the experiment's stop: an error its run ended with meanwhile (it failed as the
            # stop came, or before its end was handled) is ignored, as Ray drops the trial's futures
            if isinstance(outcome, BaseException):
                _log.debug("muster: %s, stopped with the experiment, ended with %r (ignored)", trial.trial_name,
                           outcome)
                outcome = None
            trial.status = TERMINATED
            loggers.end(outcome)
        elif isinstance(outcome, BaseException):
            trial.status, trial.error = ERROR, f"{type(outcome).__name__}: {outcome}"
            trial.num_failures += 1
            self.errors[trial.trial_id] = outcome
            self._keep_error(trial, outcome)
            self.scheduler.on_trial_error(self, trial)
            self.searcher.on_trial_complete(trial.trial_id, result=trial.last_result or None, error=True)
            self.progress.event(f"{trial.trial_name} ERROR: {root_cause_summary(outcome)}")
            self.callbacks.trial_event("on_trial_error", self.trials, trial)
            loggers.end(outcome)
            if self.fail_fast and not self._stopping_all:
                self.progress.event(f"FailureConfig(fail_fast={self.fail_fast!r}): {trial.trial_name} failed; "
                                    "stopping the experiment")
                if isinstance(self.fail_fast, str):
                    self.failed_fast = trial.trial_id
                self._stop_everything()
        elif trial.ending_as == PAUSED:
            trial.status = PAUSED
            self._paused_loggers[trial.trial_id] = (loggers, outcome)  # open until it runs again or ends
        else:
            trial.status = TERMINATED
            self.scheduler.on_trial_complete(self, trial, trial.last_result or None)
            self.searcher.on_trial_complete(trial.trial_id, result=trial.last_result or None)
            self._tell_as(trial, RUNNING, "on_trial_complete")
            loggers.end(outcome)
        trial.ending_as = None

    def _end_paused_loggers(self, trial: Trial) -> None:
        """Close the loggers a paused trial's last run left open: as paused where it runs again (or the
        experiment ends with it paused), as completed where it was ended (TensorBoard's hparams)."""
        loggers, outcome = self._paused_loggers.pop(trial.trial_id, (None, None))
        if loggers is not None:
            loggers.end(outcome)

    def _end_loggers_after_interrupt(self) -> None:
        """The loop stopped (Ctrl-C, an error of the search): the runs it stopped still log what they
        reported and close their loggers, as their ends are not handled."""
        while (event := self._next_event()) is not None:
            if isinstance(event, TrialResult) and event.run is event.trial.run:
                event.run.loggers.log(trial_result(event.row))
            elif isinstance(event, TrialEnded):
                event.run.loggers.end(event.outcome)
        for trial in self.trials:
            if trial.run is not None:
                trial.run.loggers.end(None)

    def _keep_error(self, trial: Trial, error: BaseException) -> None:
        """The error in the trial's folder (``error.txt``, ``error.pkl``, as Ray keeps them), so a restored
        ResultGrid's ``result.error`` is still an instance of what the trainable raised."""
        try:
            write_error(self._trial_storage(trial), error, trial.num_failures)
        except Exception as exc:  # noqa: BLE001 - an error that does not pickle: its text is kept anyway
            _log.debug("muster: could not keep %s's error as %s: %s", trial.trial_name, ERROR_FILE, exc)

    def _stop(self, trial: Trial, ending_as: str) -> None:
        if trial.run is not None and trial.ending_as is None:
            trial.ending_as = ending_as
            if trial is not self._deciding:  # that one's worker waits for the decision: it saves and ends
                trial.run.stop()

    def _stop_everything(self) -> None:
        """Stop the experiment (a stopper's ``stop_all``, ``time_budget_s``, ``fail_fast``) as Ray's controller
        does: each unfinished trial (running, pausing, paused, pending) is TERMINATED at once, and neither the
        callbacks, the scheduler nor the searcher get an ``on_trial_complete`` for it (its result: not done)."""
        self._stopping_all = self._search_done = self._dirty = True
        for trial in self.trials:
            if trial.is_finished() or trial.ending_as == TERMINATED:
                continue  # (one its stopper or scheduler stopped completes as such)
            trial.status, trial.experiment_stopped = TERMINATED, True
            if trial.run is not None:
                if trial.ending_as is None and trial is not self._deciding:  # (that one saves and ends)
                    trial.run.stop()
                trial.ending_as = TERMINATED
            self._end_paused_loggers(trial)

    def _wait_for_runs(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for trial in self.trials:
            if trial.run is not None:
                trial.run.thread.join(max(deadline - time.monotonic(), 0.0))

    # -- state on disk ------------------------------------------------------------------------
    def _save(self, force: bool = False) -> None:
        if not (force or (self._dirty and time.monotonic() - self._last_save > _SAVE_EVERY_S)):
            return
        state = {
            "name": self.experiment.name,
            "metric": self.metric,
            "mode": self.mode,
            "trainable": self.trainable_name,
            "id_prefix": self.id_prefix,
            "search_done": self._search_done,
            "trials": [t.to_json() for t in self.trials],
            "updated_at": time.time(),
        }
        save_state(self.experiment, state, self.searcher, self.callbacks)
        self._dirty, self._last_save = False, time.monotonic()


def _sum(many: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in many:
        for k, v in r.items():
            out[k] = out.get(k, 0.0) + v
    return out


def _short(config: dict[str, Any]) -> str:
    text = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in flatten_config(config).items())
    return "{" + (text if len(text) < 120 else text[:117] + "...") + "}"


def _config_pending(trial: Trial) -> PendingConfig | None:
    """The restart config the trial's scheduler still works out (the trial waits for it), else None."""
    first = trial.restart_plan[0] if trial.restart_plan else None
    return first if isinstance(first, PendingConfig) else None


def _start_config(trial: Trial) -> dict[str, Any]:
    """The config a trial (re)starts with: its restart plan's (settled: see ``_next_trial``), else its own."""
    if not trial.restart_plan:
        return trial.config
    config = trial.restart_plan[0]
    assert not isinstance(config, PendingConfig), "a trial starts only once its PendingConfig is settled"
    return config
