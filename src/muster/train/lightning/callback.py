"""``MusterTrainReportCallback``: report Lightning's metrics and a checkpoint every epoch."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import lightning.pytorch as pl

import muster.train as train
from muster.train.checkpoint import Checkpoint


class MusterTrainReportCallback(pl.Callback):
    """At the end of every training epoch, on every rank: ``muster.train.report``
    ``trainer.callback_metrics`` (plus ``epoch`` and ``step``) with the
    checkpoint ``trainer.save_checkpoint`` writes (Ray's ``RayTrainReportCallback``).

    The checkpoint folder holds ``checkpoint.ckpt`` (``CHECKPOINT_NAME``): a
    file from rank 0 under DDP or a full-state FSDP strategy, a folder of every
    rank's shards under ``state_dict_type="sharded"`` — each rank reports the
    files it wrote, and muster merges them. Resume with::

        ckpt = muster.train.get_checkpoint()
        if ckpt:
            with ckpt.as_directory() as folder:
                trainer.fit(model, datamodule=dm, ckpt_path=os.path.join(folder, "checkpoint.ckpt"))

    Args:
        checkpoint_upload_mode: passed to every ``report`` (Ray 2.60's argument): None or
            ``"sync"`` waits for the upload, ``CheckpointUploadMode.ASYNC`` uploads in the background.
        validation: passed to the report that carries the checkpoint: ``True`` or a
            ``ValidationTaskConfig`` validates it with the trainer's ``ValidationConfig.fn``.
    """

    CHECKPOINT_NAME = "checkpoint.ckpt"

    def __init__(self, checkpoint_upload_mode: Any = None, validation: Any = False) -> None:
        super().__init__()
        self.checkpoint_upload_mode = checkpoint_upload_mode
        self.validation = validation

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        metrics = {key: _number(value) for key, value in trainer.callback_metrics.items()}
        metrics["epoch"] = trainer.current_epoch
        metrics["step"] = trainer.global_step
        with tempfile.TemporaryDirectory(prefix="muster-lightning-") as folder:
            trainer.save_checkpoint(os.path.join(folder, self.CHECKPOINT_NAME), weights_only=False)
            wrote = bool(os.listdir(folder))  # under DDP only rank 0 writes
            train.report(metrics, checkpoint=Checkpoint.from_directory(folder) if wrote else None,
                         checkpoint_upload_mode=self.checkpoint_upload_mode or "sync",
                         validation=self.validation if wrote else False)


def _number(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value
