"""``tune.logger``: Ray's base class for per-trial loggers, and its ready-made ones.

Subclass ``LoggerCallback`` and override ``log_trial_start``, ``log_trial_result``,
``log_trial_save``, ``log_trial_restore`` and ``log_trial_end``; pass an instance in ``RunConfig(callbacks=[...])``.
``CSVLoggerCallback``, ``JsonLoggerCallback`` and ``TBXLoggerCallback`` are
``muster.observe.loggers``' (each trial writes into its own folder). ``pretty_print`` shows a result as YAML.
"""

from __future__ import annotations

import json
import numbers
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


def pretty_print(result: dict[str, Any], exclude: set[str] | None = None) -> str:
    """A result dict as indented YAML, to print (Ray's ``tune.logger.pretty_print``).

    Args:
        result: a reported result (``Result.metrics`` or a result dict); it is not changed.
        exclude: keys to leave out, besides ``config`` and ``hist_stats`` (always left out) and keys whose value
            is ``None``.

    Returns:
        The YAML text; numpy/torch values become numbers or lists, anything else YAML cannot hold its ``str()``.

    Raises:
        ImportError: PyYAML is not installed (it comes with ``pip install "muster[serve]"``).
    """
    try:
        import yaml
    except ImportError as exc:  # pragma: no cover - pyyaml ships with the serve extra
        raise ImportError('pretty_print needs PyYAML: pip install pyyaml (or "muster[serve]")') from exc
    left_out = {"config", "hist_stats", *(exclude or ())}
    shown = {key: value for key, value in result.items() if value is not None and key not in left_out}
    plain = json.loads(json.dumps(shown, default=_plain_value))
    return str(yaml.safe_dump(plain, default_flow_style=False))


def _plain_value(value: Any) -> Any:
    if hasattr(value, "tolist"):  # numpy arrays and scalars, torch tensors
        return value.tolist()
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return str(value)


__all__ = ["CSVLoggerCallback", "JsonLoggerCallback", "LoggerCallback", "TBXLoggerCallback", "pretty_print"]
