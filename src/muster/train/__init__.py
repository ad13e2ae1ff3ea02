"""muster.train: Ray Train's API (``ray.train`` -> ``muster.train``).

In the driver: ``TorchTrainer(...)`` with ``ScalingConfig``, ``RunConfig``,
``CheckpointConfig``, ``FailureConfig``; ``fit()`` returns a ``Result``.
Inside ``train_loop_per_worker``: ``report``, ``get_checkpoint``,
``get_context``.
"""

from __future__ import annotations

import warnings
from typing import Any

from muster.exceptions import InvalidArgumentError, InvalidTypeError, TrainingFailedError
from muster.train._internal import session as _session
from muster.train.callback import TrainRunContext, UserCallback
from muster.train.checkpoint import Checkpoint
from muster.train.config import (
    CheckpointConfig,
    CheckpointConsistencyMode,
    CheckpointUploadMode,
    FailureConfig,
    RunConfig,
    ScalingConfig,
)
from muster.train.context import TrainContext
from muster.train.result import Result
from muster.train.reported import (
    PreemptionInfo,
    ReportedCheckpoint,
    ReportedCheckpointStatus,
    get_all_reported_checkpoints,
    get_preemption_info,
    note_report,
)
from muster.train.run_state import RunAlreadyFinishedError
from muster.train.validation import REPORT_KEY, ValidationConfig, ValidationFn, ValidationTaskConfig, report_spec

# Ray Train V2's failure classes: muster raises one, TrainingFailedError, whose attempts
# name each root cause (a rank's exception or a dead worker); these names catch it.
WorkerGroupError = TrainingFailedError
ControllerError = TrainingFailedError
PreemptionError = TrainingFailedError


def report(
    metrics: dict[str, Any],
    checkpoint: Checkpoint | None = None,
    *,
    checkpoint_upload_mode: str | CheckpointUploadMode = "sync",
    **_compat: Any,
) -> None:
    """Record metrics (and, optionally, this rank's checkpoint files) for the current round.

    It never waits for other ranks.  The i-th call on each rank belongs to
    round i; the files every rank passed in a round are merged into one
    checkpoint folder, committed atomically once every rank that reports has
    reported that round (never partially).  Once ``report`` has returned on
    every rank that reports in a round, that checkpoint survives any later
    worker failure.  Call it on every rank (files from one, metrics from all)
    for exact resume of every rank's RNG; the ``if rank == 0: report(...)``
    pattern works too (see docs/fault-tolerance.md for what it costs).

    Args:
        metrics: a dict of any picklable values, as in Ray: ``Result.metrics`` and Tune's
            schedulers, searchers and stoppers get them as reported (one-element tensors and
            numpy scalars become numbers; other tensors are sent detached, on the CPU).
            ``result.json`` holds what JSON can: arrays as lists, sets as lists, dates as
            ISO text, other objects as their ``str()``.
        checkpoint: ``Checkpoint.from_directory(folder)``; the files are copied
            to storage before ``report`` returns, so the folder may be deleted after.
        checkpoint_upload_mode: ``"sync"`` (default) or ``"async"`` (or
            ``CheckpointUploadMode.SYNC``/``ASYNC``): return at
            once and upload in the background (files are snapshotted by hard
            link first, so write each checkpoint into a new folder and do not
            rewrite its files in place). Async reports commit in order; when
            another rank fails, queued uploads still finish (up to
            ``RunConfig(upload_drain_s)``) and their rounds commit.
        validation: Ray's asynchronous validation: ``True`` or a ``ValidationTaskConfig``
            (its ``fn_kwargs`` and ``timeout_s``) to have the trainer's ``ValidationConfig.fn``
            validate this checkpoint in a task once it is committed; its metrics join the
            checkpoint's. Needs ``checkpoint=`` and the trainer's ``validation_config``.
        checkpoint_upload_fn: Ray's ``fn(checkpoint, checkpoint_dir_name) -> Checkpoint``: called
            before muster copies the checkpoint (in the background thread under ``"async"``, where the
            folder is then not snapshotted: the function may finish writing it, e.g. wait for a
            ``torch.distributed.checkpoint.async_save``); muster copies the checkpoint it returns into
            the run's storage (Ray keeps the returned one where it is).
        delete_local_checkpoint_after_upload: Ray's: ``True`` removes the checkpoint's folder once
            its files are copied (under ``"async"``, once snapshotted, before ``report`` returns).
            Not given, it is kept, in both modes (Ray's default under ``"async"`` removes it).

    Besides your files, each checkpoint stores every rank's resume state (the
    position of each prepared data loader and the RNG states), so a resumed
    attempt continues mid-epoch exactly where this report was made.

    Raises:
        TypeError: ``metrics`` is not a dict, or a keyword is misspelt.
        RuntimeError: called outside a training worker.
    """
    unknown = sorted(set(_compat) - _RAY_REPORT_KEYWORDS)
    if unknown:
        raise InvalidTypeError(
            f"report() got unexpected keyword argument(s) {unknown}; it takes metrics, checkpoint, "
            f"checkpoint_upload_mode and Ray's {sorted(_RAY_REPORT_KEYWORDS)} (accepted for "
            "compatibility). Check the spelling."
        )
    if _compat.get("checkpoint_dir_name") is not None and not _said_dir_name:
        _said_dir_name.append(True)
        warnings.warn(f"report(checkpoint_dir_name={_compat['checkpoint_dir_name']!r}) is not used: muster names each "
                      "checkpoint folder checkpoint_<round> (its commit and resume find them by that name).",
                      stacklevel=2)
    spec = report_spec(_compat.get("validation"), checkpoint is not None)
    if spec is not None:
        metrics = {**metrics, REPORT_KEY: spec} if isinstance(metrics, dict) else metrics
    mode = checkpoint_upload_mode
    if isinstance(mode, CheckpointUploadMode):
        if mode is CheckpointUploadMode.NO_UPLOAD:
            raise InvalidArgumentError("report(checkpoint_upload_mode=CheckpointUploadMode.NO_UPLOAD) is not "
                                       "supported: muster copies every reported checkpoint; use SYNC or ASYNC.")
        mode = mode.value.lower()
    _session.get_session("report").report(metrics, checkpoint, mode, _compat.get("checkpoint_upload_fn"),
                                          bool(_compat.get("delete_local_checkpoint_after_upload")))
    note_report(checkpoint)


_said_dir_name: list[bool] = []  # the checkpoint_dir_name warning is given once per process

#: Ray Train's other ``report()`` keywords: accepted so Ray scripts run unchanged.
_RAY_REPORT_KEYWORDS = frozenset(
    {"checkpoint_dir_name", "delete_local_checkpoint_after_upload", "checkpoint_upload_fn", "validation"}
)


def get_checkpoint() -> Checkpoint | None:
    """The checkpoint to resume from, as Ray's: the one this rank last reported (its folder in the run's
    storage, complete once every rank has reported that round), else the one the attempt started from (the
    run's latest committed one after a failure or restore, or ``resume_from_checkpoint``), else None.

    A report without a checkpoint leaves it as it was; under ``checkpoint_upload_mode="async"`` it changes
    once the upload is done.
    """
    return _session.get_session("get_checkpoint").checkpoint


def get_context() -> TrainContext:
    """This worker's ranks, world size, run name and run folder."""
    return _session.get_session("get_context").context


def get_dataset_shard(dataset_name: str | None = None) -> Any:
    """This worker's iterator over ``datasets[dataset_name]`` of the trainer (``TorchTrainer(datasets=...)``);
    without a name, its only dataset.

    A dataset that ``DataConfig.datasets_to_split`` names (all, by default) gives
    rank r of n every n-th row, the same number of rows on every rank; others give
    every rank all rows. Each pass is one epoch (``random_shuffle`` reorders per
    epoch), and its position is saved with each checkpoint for exact resume.
    On the Ray engine the split is Ray's ``streaming_split(n, equal=True)``
    and a resumed run restarts the interrupted epoch (see docs/data.md).

    Returns:
        A ``muster.data.DataIterator`` (``iter_batches``, ``iter_torch_batches``, ``iter_rows``).

    Raises:
        KeyError: the trainer has no dataset of that name.
        RuntimeError: called outside a training worker.
    """
    from muster.train._internal.datasets import get_dataset_shard as _get

    return _get(dataset_name)


#: The name of the dataset ``DataConfig`` splits by default (Ray's constant)
TRAIN_DATASET_KEY = "train"


def __getattr__(name: str) -> Any:
    if name == "DataConfig":  # lazily: muster.data imports pyarrow
        from muster.data import DataConfig

        return DataConfig
    if name in ("torch", "lightning", "huggingface", "v2", "examples", "collective"):
        import importlib

        return importlib.import_module(f"muster.train.{name}")
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.train", name)


__all__ = [
    "TRAIN_DATASET_KEY",
    "Checkpoint",
    "CheckpointConfig",
    "CheckpointConsistencyMode",
    "CheckpointUploadMode",
    "ControllerError",
    "PreemptionError",
    "PreemptionInfo",
    "ReportedCheckpoint",
    "ReportedCheckpointStatus",
    "WorkerGroupError",
    "get_all_reported_checkpoints",
    "get_preemption_info",
    "FailureConfig",
    "Result",
    "RunAlreadyFinishedError",
    "RunConfig",
    "ScalingConfig",
    "TrainContext",
    "TrainRunContext",
    "TrainingFailedError",
    "UserCallback",
    "ValidationConfig",
    "ValidationFn",
    "ValidationTaskConfig",
    "DataConfig",
    "get_checkpoint",
    "get_context",
    "get_dataset_shard",
    "report",
]
