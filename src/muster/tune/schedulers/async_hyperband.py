"""Asynchronous successive halving (ASHA; Li et al., 2018).

Rungs sit at ``grace_period * reduction_factor**k`` (in ``time_attr`` units)
below ``max_t``.  When a trial reaches a rung, its metric is compared with
those recorded there by earlier trials: below the top ``1/reduction_factor``
quantile, it stops.  No trial ever waits for another (that is the
"asynchronous"), so stragglers cannot hold the search up.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from muster.exceptions import InvalidArgumentError
from muster.tune.schedulers.trial_scheduler import TrialScheduler

if TYPE_CHECKING:
    from muster.tune.trial import Trial


class _AshaBracket:
    def __init__(self, min_t: float, max_t: float, rf: float, s: int):
        self.rf = rf
        count = int(math.log(max_t / min_t) / math.log(rf) - s + 1) if max_t > min_t else 0
        milestones = [min_t * rf ** (k + s) for k in reversed(range(max(count, 0)))]
        self.rungs: list[tuple[float, dict[str, float]]] = [(m, {}) for m in milestones if m < max_t]

    def cutoff(self, recorded: dict[str, float]) -> float | None:
        if not recorded:
            return None
        return float(np.nanpercentile(list(recorded.values()), (1 - 1 / self.rf) * 100))

    def on_result(self, trial_id: str, t: float, score: float | None) -> bool:
        """Record the trial at the highest rung it just passed; True if it should stop there."""
        for milestone, recorded in self.rungs:  # highest first
            if t < milestone:
                continue
            if trial_id in recorded:
                return False  # this rung (and so every lower one) already judged it
            cutoff = self.cutoff(recorded)
            recorded[trial_id] = score if score is not None else -math.inf
            return cutoff is not None and (score is None or score < cutoff)
        return False


class AsyncHyperBandScheduler(TrialScheduler):
    """ASHA.

    Args:
        time_attr: the result field that measures progress (monotonic).
        metric / mode: what to optimise (or set them on TuneConfig).
        max_t: a trial stops once ``time_attr`` reaches this.
        grace_period: no trial stops before this much ``time_attr``.
        reduction_factor: at each rung keep the top ``1/reduction_factor``.
        brackets: number of brackets (each with a different first rung).
        stop_last_trials: stop trials at ``max_t`` (else let them run on).
    """

    def __init__(
        self,
        time_attr: str = "training_iteration",
        metric: str | None = None,
        mode: str | None = None,
        max_t: float = 100,
        grace_period: float = 1,
        reduction_factor: float = 4,
        brackets: int = 1,
        stop_last_trials: bool = True,
    ):
        super().__init__(metric, mode)
        if not grace_period > 0:
            raise InvalidArgumentError(f"{type(self).__name__}(grace_period={grace_period!r}): use a number > 0.")
        if not max_t >= grace_period:
            raise InvalidArgumentError(
                f"{type(self).__name__}(max_t={max_t!r}, grace_period={grace_period!r}): max_t must be >= grace_period."
            )
        if not reduction_factor > 1:
            raise InvalidArgumentError(
                f"{type(self).__name__}(reduction_factor={reduction_factor!r}): use a number > 1.")
        if isinstance(brackets, bool) or not isinstance(brackets, int) or brackets < 1:
            raise InvalidArgumentError(f"{type(self).__name__}(brackets={brackets!r}): use an integer >= 1.")
        self.time_attr, self.max_t, self.grace_period = time_attr, max_t, grace_period
        self.reduction_factor, self.stop_last_trials = reduction_factor, stop_last_trials
        self._brackets = [_AshaBracket(grace_period, max_t, reduction_factor, s) for s in range(brackets)]
        self._bracket_of: dict[str, _AshaBracket] = {}
        self.num_stopped = 0

    def on_trial_add(self, controller: Any, trial: Trial) -> None:
        # spread trials over brackets, the most aggressive bracket getting the most
        weights = [self.reduction_factor ** -s for s in range(len(self._brackets))]
        counts = [sum(1 for b in self._bracket_of.values() if b is br) for br in self._brackets]
        deficit = [w / sum(weights) * (len(self._bracket_of) + 1) - c for w, c in zip(weights, counts)]
        self._bracket_of[trial.trial_id] = self._brackets[deficit.index(max(deficit))]

    def on_trial_result(self, controller: Any, trial: Trial, result: dict[str, Any]) -> str:
        self._require_metric()
        t = result.get(self.time_attr)
        if not isinstance(t, (int, float)) or self.metric not in result:
            return self.CONTINUE
        if t >= self.max_t and self.stop_last_trials:
            return self.STOP
        bracket = self._bracket_of.get(trial.trial_id)
        if bracket is None:
            self.on_trial_add(controller, trial)
            bracket = self._bracket_of[trial.trial_id]
        if bracket.on_result(trial.trial_id, t, self._score(result)):
            self.num_stopped += 1
            return self.STOP
        return self.CONTINUE

    def debug_string(self) -> str:
        rungs = ", ".join(f"{m:g}: {len(r)}" for m, r in self._brackets[0].rungs)
        return f"ASHA: {self.num_stopped} stopped early; trials per rung {{{rungs}}}"


ASHAScheduler = AsyncHyperBandScheduler
