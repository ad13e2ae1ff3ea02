"""Lightning callbacks that report a trial's metrics to Tune (Ray's ``ray.tune.integration.pytorch_lightning``).

Use them inside a function trainable that builds and fits a Lightning
``Trainer`` itself::

    trainer = pl.Trainer(callbacks=[TuneReportCallback({"loss": "val_loss"}, on="validation_end")])
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from muster.exceptions import InvalidArgumentError
from muster.train.lightning._compat import pl
from muster.train.checkpoint import Checkpoint

_HOOKS = {
    "train_epoch_end": "on_train_epoch_end",
    "validation_end": "on_validation_end",
    "train_end": "on_train_end",
    "test_end": "on_test_end",
    "fit_end": "on_fit_end",
    "train_batch_end": "on_train_batch_end",
}


class TuneReportCheckpointCallback(pl.Callback):
    """Report ``trainer.callback_metrics`` (and a checkpoint) to Tune on a Lightning hook.

    Args:
        metrics: which metrics: None (all), a name, a list of names, or a dict
            ``{reported name: Lightning metric name}``.
        filename: the checkpoint file's name inside the reported checkpoint.
        save_checkpoints: report a checkpoint with the metrics.
        on: the hook(s): ``"validation_end"`` (default), ``"train_epoch_end"``, ...
    """

    def __init__(self, metrics: str | list[str] | dict[str, str] | None = None, filename: str = "checkpoint",
                 save_checkpoints: bool = True, on: str | list[str] = "validation_end"):
        hooks = [on] if isinstance(on, str) else list(on)
        unknown = [h for h in hooks if h not in _HOOKS]
        if unknown:
            raise InvalidArgumentError(f"TuneReportCallback(on={on!r}): use one or more of {', '.join(_HOOKS)}.")
        self._metrics = [metrics] if isinstance(metrics, str) else metrics
        self._filename, self._save = filename, save_checkpoints
        for hook in hooks:
            setattr(self, _HOOKS[hook], self._report_hook)

    def _report_hook(self, trainer: Any, *args: Any, **kwargs: Any) -> None:
        if trainer.sanity_checking:
            return
        self._report(trainer)

    def _collect(self, trainer: Any) -> dict[str, Any]:
        found = {k: _number(v) for k, v in trainer.callback_metrics.items()}
        if self._metrics is None:
            return found
        pairs = self._metrics.items() if isinstance(self._metrics, dict) else [(m, m) for m in self._metrics]
        missing = [src for _, src in pairs if src not in found]
        if missing:
            raise KeyError(f"TuneReportCallback: Lightning logged no metric {missing[0]!r} (it has {sorted(found)}); "
                           "log it with self.log(...) or change metrics=.")
        return {name: found[src] for name, src in pairs}

    def _report(self, trainer: Any) -> None:
        from muster.tune.session import report

        metrics = self._collect(trainer)
        if not self._save:
            report(metrics)
            return
        with tempfile.TemporaryDirectory(prefix="muster-tune-lightning-") as folder:
            trainer.save_checkpoint(os.path.join(folder, self._filename))
            report(metrics, checkpoint=Checkpoint.from_directory(folder))


class TuneReportCallback(TuneReportCheckpointCallback):
    """Report ``trainer.callback_metrics`` to Tune on a Lightning hook (no checkpoint)."""

    def __init__(self, metrics: str | list[str] | dict[str, str] | None = None, on: str | list[str] = "validation_end"):
        super().__init__(metrics=metrics, save_checkpoints=False, on=on)


def _number(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


__all__ = ["TuneReportCallback", "TuneReportCheckpointCallback"]
