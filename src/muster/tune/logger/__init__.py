"""``tune.logger``: Ray's base class for per-trial loggers, and its ready-made ones.

Subclass ``LoggerCallback`` and override ``log_trial_start``, ``log_trial_result``,
``log_trial_save``, ``log_trial_restore`` and ``log_trial_end``; pass an instance in ``RunConfig(callbacks=[...])``.
``CSVLoggerCallback``, ``JsonLoggerCallback`` and ``TBXLoggerCallback`` are
``muster.observe.loggers``' (each trial writes into its own folder).
"""

from __future__ import annotations

from typing import Any

from muster.observe.loggers import CSVLoggerCallback, JsonLoggerCallback, TBXLoggerCallback
from muster.tune.callback import Callback


class LoggerCallback(Callback):
    """A Tune callback that logs each trial's start, results and end."""

    def log_trial_start(self, trial: Any) -> None:
        """A trial started."""

    def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
        """A trial reported ``result``."""

    def log_trial_save(self, trial: Any) -> None:
        """A trial committed a checkpoint."""

    def log_trial_restore(self, trial: Any) -> None:
        """A trial's workers start from a checkpoint."""

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        """A trial ended; ``failed`` when it failed for good."""

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.log_trial_start(trial)

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                        **info: Any) -> None:
        self.log_trial_result(iteration, trial, result)

    def on_trial_save(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.log_trial_save(trial)

    def on_trial_restore(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.log_trial_restore(trial)

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.log_trial_end(trial, failed=False)

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.log_trial_end(trial, failed=True)


__all__ = ["CSVLoggerCallback", "JsonLoggerCallback", "LoggerCallback", "TBXLoggerCallback"]
