"""What a trial's run hands the Tune controller, on its events queue: a result, a class
trainable's step to decide on, a function trainable's wait for the decision on its result, a
notice for the callbacks, the run's end; and ``ReportForward``, the run's callback that turns
rank 0's reports into results."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

from muster.train._internal.checkpoint_manager import round_of
from muster.train.checkpoint import Checkpoint

if TYPE_CHECKING:
    from muster.tune.trial import Trial, TrialRun


@dataclass(frozen=True)
class TrialResult:
    """A trial reported (its rank 0's row, Tune fields added)."""

    trial: Trial
    run: TrialRun
    row: dict[str, Any]


@dataclass(frozen=True)
class TrialEnded:
    """A trial's run ended: its ``Result``, or the exception that ended it."""

    trial: Trial
    run: TrialRun
    outcome: Any


@dataclass(frozen=True)
class TrialStep:
    """A class trainable's step result, before it is reported; ``reply`` gets the decision."""

    trial: Trial
    run: TrialRun
    row: dict[str, Any]
    fields: dict[str, Any]  # the Tune fields the worker reports with the result
    reply: Future


@dataclass(frozen=True)
class TrialAwaits:
    """A function trainable's worker waits after a report: ``reply`` gets the decision on its results so
    far (queued after them), once the controller handled them."""

    trial: Trial
    run: TrialRun
    reply: Future


@dataclass(frozen=True)
class TrialNotice:
    """Something a Tune callback hears of and nothing else acts on: the ``hook`` to call, with
    ``kwargs`` (a checkpoint committed, a restart after a failure, a restore); ``error``: the failed
    attempt's, for a restart (kept in the trial's folder, not handed to the hook, as in Ray)."""

    trial: Trial
    run: TrialRun
    hook: str
    kwargs: dict[str, Any]
    error: BaseException | None = None


TrialEvent = Union[TrialResult, TrialEnded, TrialStep, TrialAwaits, TrialNotice]


class ReportForward:
    """The RunConfig callback that hands rank 0's reports to the Tune controller, and each committed
    checkpoint's notices after the result it came with (Ray's order: ``on_trial_result``, then
    ``on_checkpoint`` and ``on_trial_save``), though a round commits before rank 0's report is handed on."""

    def __init__(self, run: TrialRun):
        self.run = run
        self.reported_round = -1  # the round of rank 0's latest report (this attempt's)
        self._held: list[TrialNotice] = []  # a checkpoint's notices, until its round's result is handed on

    def on_report(self, row: dict[str, Any]) -> None:
        if row.get("_rank") != 0:
            return
        self.reported_round = round_of(row)
        if self.reported_round == self.run.decided_round:
            self.run.decided_round = None  # a class trainable's result, acted on before it was reported
        else:
            self.run.events.put(TrialResult(self.run.trial, self.run, row))
        self.flush()

    def on_checkpoint(self, checkpoint: Checkpoint, metrics: dict[str, Any]) -> None:
        """A checkpoint was committed: Ray's ``on_checkpoint`` with it, then ``on_trial_save``."""
        trial, run = self.run.trial, self.run
        self._held += [TrialNotice(trial, run, "on_checkpoint", {"checkpoint": checkpoint}),
                       TrialNotice(trial, run, "on_trial_save", {})]
        if round_of(metrics) <= self.reported_round:  # its result was handed on already (rank 0 reported first)
            self.flush()

    def flush(self) -> None:
        """Hand on the notices held (also as the run ends or an attempt fails)."""
        for notice in self._held:
            self.run.events.put(notice)
        self._held.clear()
