"""What a trial's run hands the Tune controller, on its events queue: a result, a class
trainable's step to decide on, a notice for the callbacks, the run's end; and ``ReportForward``,
the run's callback that turns rank 0's reports into results."""

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
class TrialNotice:
    """Something a Tune callback hears of and nothing else acts on: the ``hook`` to call, with
    ``kwargs`` (a checkpoint committed, a restart after a failure, a restore)."""

    trial: Trial
    run: TrialRun
    hook: str
    kwargs: dict[str, Any]


TrialEvent = Union[TrialResult, TrialEnded, TrialStep, TrialNotice]


class ReportForward:
    """The RunConfig callback that hands rank 0's reports to the Tune controller."""

    def __init__(self, run: TrialRun):
        self.run = run

    def on_report(self, row: dict[str, Any]) -> None:
        if row.get("_rank") != 0:
            return
        if round_of(row) == self.run.decided_round:
            self.run.decided_round = None
            return  # a class trainable's result the controller acted on before it was reported
        self.run.events.put(TrialResult(self.run.trial, self.run, row))

    def on_checkpoint(self, checkpoint: Checkpoint, metrics: dict[str, Any]) -> None:
        """A checkpoint was committed: Ray's ``on_trial_save``, then ``on_checkpoint`` with it."""
        self.run.events.put(TrialNotice(self.run.trial, self.run, "on_trial_save", {}))
        self.run.events.put(TrialNotice(self.run.trial, self.run, "on_checkpoint", {"checkpoint": checkpoint}))
