"""Stopping conditions for ``RunConfig(stop=...)``: Ray's ``Stopper`` interface."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from muster.exceptions import InvalidArgumentError


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


class _DictStopper(Stopper):
    """``{"metric": threshold, ...}``: stop a trial once any metric reaches its threshold.

    A boolean threshold (``{"done": True}``) stops once the result's value is
    that boolean; a callable one (``{"loss": lambda v: v < 0.1}``) once it returns True.
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
            if key not in result:
                continue
            value = result[key]
            if isinstance(threshold, bool):
                if bool(value) == threshold:
                    return True
            elif callable(threshold):
                if threshold(value):
                    return True
            elif isinstance(value, (int, float)) and not isinstance(value, bool) and value >= threshold:
                return True
        return False


class _FunctionStopper(Stopper):
    def __init__(self, fn: Callable[[str, dict[str, Any]], bool]):
        self.fn = fn

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return bool(self.fn(trial_id, result))


def as_stopper(stop: Any) -> Stopper:
    """What ``RunConfig.stop`` holds, as a ``Stopper``."""
    if stop is None:
        return Stopper()
    if isinstance(stop, Stopper):
        return stop
    if isinstance(stop, dict):
        return _DictStopper(stop)
    if callable(stop):
        return _FunctionStopper(stop)
    raise InvalidArgumentError(
        f"RunConfig(stop={stop!r}): pass a dict such as {{'training_iteration': 10}}, a function "
        "(trial_id, result) -> bool, or a muster.tune.Stopper."
    )
