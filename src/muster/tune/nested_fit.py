"""A trainer that a trial's function fits (``TorchTrainer(...).fit()`` inside a trial, Ray's
current style): the driver runs it as part of the trial, and its rank 0's reports are the
trial's results, as Ray's ``TuneReportCallback`` makes them."""

from __future__ import annotations

import dataclasses
import functools
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from muster.core.api import get_runtime
from muster.core.runtime import RuntimeActor
from muster.train._internal.checkpoint_manager import SHOWN_ITERATION, round_of
from muster.train._internal.events import FitReply, FitRequest
from muster.train._internal.result_base import Result
from muster.train.checkpoint import Checkpoint
from muster.train.controller import Controller, ControllerHooks
from muster.train.result import _public
from muster.tune.trial_events import ReportForward, TrialResult

if TYPE_CHECKING:
    from muster.tune.trial import TrialRun

NESTED_RUN = "trainer"  # the run folder, inside a trial's, of a trainer its function fit
CHECKPOINT_PATH = "checkpoint_path"  # Ray's key, in a trial's result, for its nested trainer's checkpoint

# What ``TrialRun._tune_fields`` adds to each report (``trial_id`` and ``_shown_iteration`` too)
_TUNE_FIELDS = frozenset({"time_this_iter_s", "time_total_s", "time_since_restore", "iterations_since_restore",
                          "date", "hostname", "node_ip", "pid", "config", "experiment_tag", "trial_id", "done"})


def fit_in_trial(run: TrialRun, handle: RuntimeActor, request: FitRequest) -> Future:
    """The trial's function called ``TorchTrainer(...).fit()``: run that trainer here, in the
    driver, as part of the trial. Its rank 0's reports become the trial's results; the future
    gets the trainer's ``Result`` (or its error) for the waiting function.

    The trainer's reports take the trial's next rounds, after those its function reported before
    (``request.after_round``), and the reply names the last one, so the function's own reports
    after ``fit()`` come after them: one sequence of trial results, as Ray's ``TuneReportCallback``
    hands the trainer's reports to the trial's own session."""
    trainer = request.trainer
    rc = trainer.run_config
    # Its run lives in the trial's folder, under a fixed name, so a restored trial resumes it.
    rc.storage_path = rc.storage_path or run.storage.uri
    rc.name = rc.name or NESTED_RUN
    if rc.storage_filesystem is None and rc.storage_path == run.storage.uri:
        rc.storage_filesystem = run.storage.fs
    rc.verbose = 0
    assert run.controller is not None  # the trial's own run made the request
    forward = NestedForward(run, run.controller, max(request.after_round, run.newest_round()))
    rc.callbacks = [*(rc.callbacks or []), forward]

    def recovering(error: BaseException) -> None:
        forward.release_all()  # the failed attempt's rounds are decided
        run.on_recover(error)

    source = object()  # this fit's attempts are told apart from the trial's own (a switch is no restart)
    hooks = ControllerHooks(on_metrics=functools.partial(run.add_tune_fields, source=source),
                            on_restore=run.on_restore, on_recover=recovering)
    inner = trainer.controller(hooks, allow_finished=True)
    run.inner = forward.inner = inner
    if run.stopping():
        inner.request_stop()
    out: Future = Future()

    def fit() -> None:
        try:
            with get_runtime().blocked(handle):  # the waiting trial worker lends its CPUs to the gang
                try:
                    result = inner.run()
                finally:
                    forward.release_all()
                out.set_result(FitReply(_as_trainers(result), forward.last_round))
        except BaseException as exc:  # noqa: BLE001 - raised in the trial's function
            out.set_exception(exc)

    threading.Thread(target=fit, name=f"muster-trial-{run.trial.trial_id}-fit", daemon=True).start()
    return out


def _as_trainers(result: Result) -> Result:
    """The ``Result`` a trainer's ``fit()`` returns to the trial's function: its reports carry Tune's
    fields (they are the trial's results too), which a training run's result does not show (Ray Train V2's)."""
    def reported(metrics: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in metrics.items() if k not in _TUNE_FIELDS}

    return dataclasses.replace(
        result, metrics=None if result.metrics is None else reported(result.metrics),
        best_checkpoints=[(c, reported(m)) for c, m in result.best_checkpoints],
        all_reports=[reported(r) for r in result.all_reports],
    )


class NestedForward(ReportForward):
    """For a trainer the trial's function fit: rank 0's reports are recorded as the trial's own
    (so its Result has the metrics), with Ray's ``TuneReportCallback`` key ``checkpoint_path``
    (the committed checkpoint's path) where the round reported a checkpoint. Such a report is
    handed on once its round commits (on Ray, once every worker reported), and the reports after
    it wait behind it, so the trial's results keep their order. Each is recorded in the trial's next
    round after ``after_round`` (the trainer's own rounds may repeat after a restart); ``last_round``
    is the last one used."""

    def __init__(self, run: TrialRun, into: Controller, after_round: int):
        super().__init__(run)
        self.into, self.last_round = into, after_round
        self.inner: Controller | None = None  # the trainer's run: set before it starts
        self._lock = threading.Lock()
        self._waiting: list[tuple[dict[str, Any], bool]] = []  # (rank 0's row, whether a checkpoint is due)
        self._paths: dict[int, str] = {}  # round -> its committed checkpoint's path

    def on_report(self, row: dict[str, Any]) -> None:
        if row.get("_rank") != 0:
            return
        due = self.inner is not None and self.inner.ledger.checkpoint_pending(round_of(row))
        with self._lock:
            self._waiting.append((row, due))
            self._release(everything=False)

    def on_checkpoint(self, checkpoint: Checkpoint, metrics: dict[str, Any]) -> None:
        with self._lock:
            super().on_checkpoint(checkpoint, metrics)  # (its notices: held until its round's report is)
            self._paths[round_of(metrics)] = checkpoint.path
            self._release(everything=False)

    def release_all(self) -> None:
        """The run's open rounds are decided (an attempt ended): hand on every report held."""
        with self._lock:
            self._release(everything=True)
            self.flush()

    def _release(self, everything: bool) -> None:
        while self._waiting:
            row, due = self._waiting[0]
            path = self._paths.pop(round_of(row), None)
            if due and path is None and not everything:
                return
            self._waiting.pop(0)
            metrics = {k: v for k, v in _public(row).items() if k != "training_iteration"}
            metrics[SHOWN_ITERATION] = row["training_iteration"]
            if path is not None:
                metrics[CHECKPOINT_PATH] = path
            self.last_round += 1
            recorded = self.into.record_report(self.last_round, metrics, row["timestamp"])
            self.run.events.put(TrialResult(self.run.trial, self.run, recorded))
            self.flush()  # the notices of a checkpoint, after the result it came with (as Ray's)
