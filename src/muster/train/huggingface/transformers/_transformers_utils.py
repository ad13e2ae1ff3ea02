"""The report callback and ``prepare_trainer`` for ``transformers.Trainer``."""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from typing import Any

try:
    import transformers
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        'muster.train.huggingface.transformers needs Hugging Face Transformers: pip install "muster[transformers]"'
    ) from exc

import muster.train as train
from muster.exceptions import InvalidTypeError, TrainerSetupError
from muster.train.checkpoint import Checkpoint


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


class MusterTrainReportCallback(transformers.TrainerCallback):
    """On every checkpoint the Trainer saves: ``muster.train.report`` the metrics
    of its log history with that checkpoint (Ray's ``RayTrainReportCallback``).

    Every rank reports at the same step. The checkpoint folder holds
    ``checkpoint/`` (``CHECKPOINT_NAME``): a copy of ``<output_dir>/checkpoint-<step>``
    with the model, optimizer, scheduler, trainer state and every rank's RNG
    state. All ranks wait until every rank has written its part; then local rank
    0 of each node reports the folder (ranks on one node share ``output_dir``)
    and the other ranks report metrics only. Pass the folder to
    ``trainer.train(resume_from_checkpoint=...)`` to resume mid-epoch.
    """

    CHECKPOINT_NAME = "checkpoint"

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        metrics: dict[str, Any] = {}
        for entry in state.log_history:
            metrics.update(entry)
        metrics["step"] = state.global_step
        metrics["epoch"] = state.epoch
        source = os.path.join(args.output_dir,
                              f"{transformers.trainer_utils.PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        _barrier()  # every rank has written its files (rank > 0 writes its RNG state)
        if train.get_context().get_local_rank() != 0 or not os.path.isdir(source):
            train.report(metrics)
            return
        with tempfile.TemporaryDirectory(prefix="muster-hf-") as folder:
            shutil.copytree(source, os.path.join(folder, self.CHECKPOINT_NAME))
            train.report(metrics, checkpoint=Checkpoint.from_directory(folder))


RayTrainReportCallback = MusterTrainReportCallback


def prepare_trainer(trainer: transformers.Trainer) -> transformers.Trainer:
    """Check that ``trainer`` runs on this run's workers, and return it (Ray's ``prepare_trainer``).

    Call it inside ``train_loop_per_worker`` after building the Trainer.

    Raises:
        TypeError: ``trainer`` is not a ``transformers.Trainer``.
        TrainerSetupError: (a ``RuntimeError``) the Trainer sees a different world size than the run
            (it did not join muster's process group: each worker would train alone).
    """
    if not isinstance(trainer, transformers.Trainer):
        raise InvalidTypeError(f"prepare_trainer expects a transformers.Trainer, got {type(trainer).__name__}.")
    expected = train.get_context().get_world_size()
    if trainer.args.world_size != expected:
        raise TrainerSetupError(
            f"prepare_trainer: the Trainer sees a world size of {trainer.args.world_size} but this run has {expected} "
            "workers, so each worker would train alone. On CPU workers pass TrainingArguments(use_cpu=True) "
            "(Accelerate runs multi-CPU training only then), and build TrainingArguments inside "
            "train_loop_per_worker so Accelerate finds muster's process group."
        )
    if not any(isinstance(cb, MusterTrainReportCallback) for cb in trainer.callback_handler.callbacks):
        warnings.warn(
            "prepare_trainer: the Trainer has no MusterTrainReportCallback (RayTrainReportCallback), so muster "
            "sees no metrics or checkpoints and a restart begins from scratch; add trainer.add_callback("
            "RayTrainReportCallback()).",
            stacklevel=2,
        )
    return trainer
