"""Median stopping (Golovin et al., 2017: Google Vizier).

A trial stops once its best result so far is worse than the median, over the
other trials, of their running mean at the same point in time.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from muster.exceptions import InvalidArgumentError
from muster.tune.schedulers.trial_scheduler import TrialScheduler

if TYPE_CHECKING:
    from muster.tune.trial import Trial


class MedianStoppingRule(TrialScheduler):
    """Args:
        time_attr: the result field that measures progress.
        metric / mode: what to optimise (or set them on TuneConfig).
        grace_period: judge no trial before this much ``time_attr``.
        min_samples_required: judge only against at least this many other trials.
        min_time_slice: (kept for Ray compatibility; trials are never paused for fairness here).
        hard_stop: stop a losing trial (True) or pause it (False).
    """

    def __init__(
        self,
        time_attr: str = "time_total_s",
        metric: str | None = None,
        mode: str | None = None,
        grace_period: float = 60.0,
        min_samples_required: int = 3,
        min_time_slice: float = 0,
        hard_stop: bool = True,
    ):
        super().__init__(metric, mode)
        n = min_samples_required
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InvalidArgumentError(
                f"MedianStoppingRule(min_samples_required={min_samples_required!r}): use an integer >= 1.")
        if grace_period < 0:
            raise InvalidArgumentError(f"MedianStoppingRule(grace_period={grace_period!r}): use a number >= 0.")
        self.time_attr, self.grace_period = time_attr, grace_period
        self.min_samples_required, self.min_time_slice, self.hard_stop = min_samples_required, min_time_slice, hard_stop
        self._history: dict[str, list[tuple[float, float]]] = {}  # trial -> [(t, score)]
        self.num_stopped = 0
        self._paused: set[str] = set()  # trials paused once (hard_stop=False): from then on they run to their end

    def on_trial_result(self, controller: Any, trial: Trial, result: dict[str, Any]) -> str:
        self._require_metric()
        if trial.trial_id in self._paused:  # as Ray's: a trial is paused once, so it is never paused again and again
            return self.CONTINUE
        t, score = result.get(self.time_attr), self._score(result)
        if not isinstance(t, (int, float)) or score is None:
            return self.CONTINUE
        mine = self._history.setdefault(trial.trial_id, [])
        mine.append((float(t), score))
        if t < self.grace_period:
            return self.CONTINUE
        others = [h for tid, h in self._history.items() if tid != trial.trial_id and h and h[-1][0] >= t]
        if len(others) < self.min_samples_required:
            return self.CONTINUE
        median = statistics.median(_running_mean(h, t) for h in others)
        if max(s for _, s in mine) < median:
            self.num_stopped += 1
            if self.hard_stop:
                return self.STOP
            self._paused.add(trial.trial_id)
            return self.PAUSE
        return self.CONTINUE

    def debug_string(self) -> str:
        return f"MedianStoppingRule: {self.num_stopped} stopped early"


def _running_mean(history: list[tuple[float, float]], t: float) -> float:
    scores = [s for ti, s in history if ti <= t]
    return sum(scores) / len(scores)
