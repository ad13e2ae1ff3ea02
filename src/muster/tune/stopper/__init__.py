"""Stopping conditions for ``RunConfig(stop=...)``: Ray's ``Stopper`` interface and its ready-made
stoppers (``MaximumIterationStopper``, ``TrialPlateauStopper``, ``ExperimentPlateauStopper``,
``TimeoutStopper``, ``CombinedStopper``, ``FunctionStopper``, ``NoopStopper``)."""

from __future__ import annotations

import datetime
import math
import statistics
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from muster.exceptions import InvalidArgumentError
from muster.tune.result_grid import lookup


class Stopper:
    """Decides, after each result, whether a trial (or the whole experiment) stops."""

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        """True to stop this trial now."""
        return False

    def stop_all(self) -> bool:
        """True to stop every trial and start no more."""
        return False


class MaximumIterationStopper(Stopper):
    """Stops each trial after ``max_iter`` results."""

    def __init__(self, max_iter: int):
        if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
            raise InvalidArgumentError(f"MaximumIterationStopper(max_iter={max_iter!r}): use an integer >= 1.")
        self.max_iter = max_iter

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return int(result.get("training_iteration", 0)) >= self.max_iter


class NoopStopper(Stopper):
    """Never stops anything."""


class FunctionStopper(Stopper):
    """Stops a trial when ``function(trial_id, result)`` is true."""

    def __init__(self, function: Callable[[str, dict[str, Any]], bool]):
        if not callable(function):
            raise InvalidArgumentError(f"FunctionStopper({function!r}): pass a function (trial_id, result) -> bool.")
        self.fn = function

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return bool(self.fn(trial_id, result))


class CombinedStopper(Stopper):
    """Stops a trial when any of ``stoppers`` does; the experiment, when any of them stops it all."""

    def __init__(self, *stoppers: Stopper):
        bad = [s for s in stoppers if not isinstance(s, Stopper)]
        if bad:
            raise InvalidArgumentError(f"CombinedStopper({bad[0]!r}): every argument must be a muster.tune.Stopper.")
        self.stoppers = stoppers

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return any([s(trial_id, result) for s in self.stoppers])  # a list: every stopper sees every result

    def stop_all(self) -> bool:
        return any(s.stop_all() for s in self.stoppers)


class TimeoutStopper(Stopper):
    """Stops the whole experiment ``timeout`` (seconds, or a ``datetime.timedelta``) after it is made."""

    def __init__(self, timeout: float | datetime.timedelta):
        seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else timeout
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
            raise InvalidArgumentError(
                f"TimeoutStopper(timeout={timeout!r}): use a number of seconds > 0 or a datetime.timedelta."
            )
        self.timeout_s = float(seconds)
        self._started = time.monotonic()

    def stop_all(self) -> bool:
        return time.monotonic() - self._started >= self.timeout_s


def _check_mode(where: str, mode: str | None, required: bool) -> None:
    if mode not in ("min", "max") and (required or mode is not None):
        raise InvalidArgumentError(f"{where}: mode={mode!r}; use 'min' or 'max'.")


class TrialPlateauStopper(Stopper):
    """Stops a trial once ``metric`` has flattened out: the standard deviation of its last
    ``num_results`` values is below ``std``, after at least ``grace_period`` results. With
    ``metric_threshold``, only once the value is also better than it (below for ``mode="min"``,
    above for ``"max"``)."""

    def __init__(self, metric: str, std: float = 0.01, num_results: int = 4, grace_period: int = 4,
                 metric_threshold: float | None = None, mode: str | None = None):
        where = f"TrialPlateauStopper({metric!r})"
        if not isinstance(num_results, int) or num_results < 1 or not isinstance(grace_period, int) or grace_period < 0:
            raise InvalidArgumentError(f"{where}: num_results={num_results!r} must be >= 1 and "
                                       f"grace_period={grace_period!r} >= 0 (integers).")
        _check_mode(where, mode, required=metric_threshold is not None)
        self.metric, self.std, self.num_results, self.grace_period = metric, std, num_results, grace_period
        self.metric_threshold, self.mode = metric_threshold, mode
        self._windows: dict[str, deque[float]] = {}
        self._seen: dict[str, int] = {}

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        value = result.get(self.metric)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return False
        window = self._windows.setdefault(trial_id, deque(maxlen=self.num_results))
        window.append(float(value))
        self._seen[trial_id] = self._seen.get(trial_id, 0) + 1
        if self._seen[trial_id] < self.grace_period or len(window) < self.num_results:
            return False
        if self.metric_threshold is not None:
            better = value < self.metric_threshold if self.mode == "min" else value > self.metric_threshold
            if not better:
                return False
        return (statistics.pstdev(window) if len(window) > 1 else 0.0) < self.std


class ExperimentPlateauStopper(Stopper):
    """Stops the whole experiment once the ``top`` best values of ``metric`` reported so far (by
    ``mode``) vary by no more than ``std`` (their standard deviation), and have for ``patience``
    results in a row."""

    def __init__(self, metric: str, std: float = 0.001, top: int = 10, mode: str = "min", patience: int = 0):
        where = f"ExperimentPlateauStopper({metric!r})"
        _check_mode(where, mode, required=True)
        if not isinstance(top, int) or top < 2 or not isinstance(patience, int) or patience < 0:
            raise InvalidArgumentError(f"{where}: top={top!r} must be >= 2 and patience={patience!r} >= 0 (integers).")
        self.metric, self.std, self.top, self.mode, self.patience = metric, std, top, mode, patience
        self._best: list[float] = []
        self._flat_for = 0

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        value = result.get(self.metric)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value):
            self._best = sorted([*self._best, float(value)], reverse=self.mode == "max")[: self.top]
            self._flat_for = self._flat_for + 1 if self._plateaued() else 0
        return self.stop_all()

    def _plateaued(self) -> bool:
        return len(self._best) == self.top and statistics.pstdev(self._best) <= self.std

    def stop_all(self) -> bool:
        return self._plateaued() and self._flat_for >= self.patience


class _DictStopper(Stopper):
    """``{"metric": threshold, ...}``: stop a trial once any metric reaches its threshold.

    A key ``"a/b"`` names a nested value (``{"a": {"b": ...}}``), as in Ray. A boolean threshold
    (``{"done": True}``) stops once the result's value is that boolean; a callable one
    (``{"loss": lambda v: v < 0.1}``) once it returns True.
    """

    def __init__(self, criteria: dict[str, Any]):
        for key, value in criteria.items():
            if not isinstance(value, (int, float)) and not callable(value):
                raise InvalidArgumentError(
                    f"RunConfig(stop={criteria!r}): the threshold for {key!r} must be a number, a bool or a "
                    "function of the value, e.g. {'training_iteration': 10, 'accuracy': 0.95, 'done': True}."
                )
        self.criteria = criteria

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        for key, threshold in self.criteria.items():
            value = lookup(result, key)
            if value is None:
                continue
            if isinstance(threshold, bool):
                if bool(value) == threshold:
                    return True
            elif callable(threshold):
                if threshold(value):
                    return True
            elif isinstance(value, (int, float)) and not isinstance(value, bool) and value >= threshold:
                return True
        return False


def as_stopper(stop: Any) -> Stopper:
    """What ``RunConfig.stop`` holds, as a ``Stopper``."""
    if stop is None:
        return Stopper()
    if isinstance(stop, Stopper):
        return stop
    if isinstance(stop, dict):
        return _DictStopper(stop)
    if callable(stop):
        return FunctionStopper(stop)
    raise InvalidArgumentError(
        f"RunConfig(stop={stop!r}): pass a dict such as {{'training_iteration': 10}}, a function "
        "(trial_id, result) -> bool, or a muster.tune.Stopper."
    )
