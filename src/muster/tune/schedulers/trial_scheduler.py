"""The scheduler interface (Ray's ``TrialScheduler``) and the default FIFO scheduler.

A scheduler sees every trial's results, in order, on the Tune controller's
thread, and answers each with a decision: go on, stop the trial, or pause it
(to be restarted later; population-based training restarts it from another
trial's checkpoint with a new config).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from muster.exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from muster.tune.trial import Trial


class TrialScheduler:
    """Base class. Subclasses override ``on_trial_result`` and friends."""

    CONTINUE = "CONTINUE"
    PAUSE = "PAUSE"
    STOP = "STOP"
    NOOP = "NOOP"

    def __init__(self, metric: str | None = None, mode: str | None = None):
        if mode not in (None, "min", "max"):
            raise InvalidArgumentError(f"{type(self).__name__}(mode={mode!r}): use 'min' or 'max'.")
        self.metric, self.mode = metric, mode

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        """Take the Tuner's metric and mode unless the scheduler has its own."""
        if self.metric and metric and self.metric != metric:
            return False
        self.metric = self.metric or metric
        self.mode = self.mode or mode
        return True

    def _require_metric(self) -> None:
        if not self.metric or self.mode not in ("min", "max"):
            raise InvalidArgumentError(
                f"{type(self).__name__} needs a metric and a mode (got metric={self.metric!r}, mode={self.mode!r}): "
                f"pass them to {type(self).__name__}(metric=..., mode=...) or to TuneConfig(metric=..., mode=...)."
            )

    def _score(self, result: dict[str, Any]) -> float | None:
        """The result's metric, signed so that larger is better."""
        value = result.get(self.metric) if self.metric else None
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
            return None
        return float(value) if self.mode == "max" else -float(value)

    def on_trial_add(self, controller: Any, trial: Trial) -> None:
        """A trial was created."""

    def on_trial_result(self, controller: Any, trial: Trial, result: dict[str, Any]) -> str:
        return self.CONTINUE

    def on_trial_complete(self, controller: Any, trial: Trial, result: dict[str, Any] | None) -> None:
        """A trial finished (its function returned, or it was stopped)."""

    def on_trial_error(self, controller: Any, trial: Trial) -> None:
        """A trial failed for good."""

    def on_trial_remove(self, controller: Any, trial: Trial) -> None:
        """A trial was stopped by something other than this scheduler."""

    def choose_trial_to_run(self, controller: Any, candidates: list[Trial]) -> Trial | None:
        """Which waiting trial to start next (default: the first)."""
        return candidates[0] if candidates else None

    def debug_string(self) -> str:
        return type(self).__name__


class PendingConfig:
    """A paused trial's restart config that a scheduler works out off the controller's thread (PB2's
    GP fit), so that the other trials' results are handled meanwhile.

    A scheduler puts it first in ``trial.restart_plan``; the controller restarts the trial once
    :meth:`done`, with :meth:`result`, which it calls once, on its own thread: ``finish`` turns what
    the future computed into the config there (and may record it, e.g. in policy logs).
    """

    def __init__(self, future: Future[Any], finish: Callable[[Any], dict[str, Any]]):
        self._future, self._finish = future, finish

    def done(self) -> bool:
        return self._future.done()

    def result(self) -> dict[str, Any]:
        """The config (raises what the computation raised)."""
        return self._finish(self._future.result())

    def then(self, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> PendingConfig:
        """This pending config with ``fn`` applied to the config once it is known (on the controller's thread)."""
        finish = self._finish
        return PendingConfig(self._future, lambda value: fn(finish(value)))


class FIFOScheduler(TrialScheduler):
    """Runs trials in the order they were made and never stops one early."""
