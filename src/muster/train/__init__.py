"""muster.train: Ray Train's API (``ray.train`` -> ``muster.train``).

In the driver: ``TorchTrainer(...)`` with ``ScalingConfig``, ``RunConfig``,
``CheckpointConfig``, ``FailureConfig``; ``fit()`` returns a ``Result``.
Inside ``train_loop_per_worker``: ``report``, ``get_checkpoint``,
``get_context``.
"""

from __future__ import annotations

from typing import Any

from muster.exceptions import TrainingFailedError
from muster.train._internal import session as _session
from muster.train.checkpoint import Checkpoint
from muster.train.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from muster.train.context import TrainContext
from muster.train.result import Result
from muster.train.run_state import RunAlreadyFinishedError


def report(
    metrics: dict[str, Any],
    checkpoint: Checkpoint | None = None,
    *,
    checkpoint_upload_mode: str = "sync",
    **_compat: Any,
) -> None:
    """Record metrics (and, optionally, this rank's checkpoint files) for the current round.

    Any subset of ranks may call it, and it never waits for other ranks: the
    ``if rank == 0: report(...)`` pattern is fine.  The i-th call on each rank
    belongs to round i; the files every rank passed in a round are merged into
    one checkpoint folder, committed atomically.  Once ``report`` has returned
    on every rank that reports in a round, that checkpoint survives any later
    worker failure.

    Args:
        metrics: numbers, strings, or lists/dicts of them (one-element tensors are converted).
        checkpoint: ``Checkpoint.from_directory(folder)``; the files are copied
            to storage before ``report`` returns, so the folder may be deleted after.
        checkpoint_upload_mode: ``"sync"`` (default) or ``"async"``: return at
            once and upload in the background (files are snapshotted by hard
            link first, so write each checkpoint into a new folder and do not
            rewrite its files in place). Async reports commit in order; they
            are durable once committed, not when ``report`` returns.

    Besides your files, each checkpoint stores every rank's resume state (the
    position of each prepared data loader and the RNG states), so a resumed
    attempt continues mid-epoch exactly where this report was made.

    Raises:
        TypeError: a metric value cannot be recorded.
        RuntimeError: called outside a training worker.
    """
    _session.get_session("report").report(metrics, checkpoint, checkpoint_upload_mode)


def get_checkpoint() -> Checkpoint | None:
    """The checkpoint to resume from: the run's latest committed one, or None on a fresh start."""
    return _session.get_session("get_checkpoint").checkpoint


def get_context() -> TrainContext:
    """This worker's ranks, world size, run name and run folder."""
    return _session.get_session("get_context").context


def get_dataset_shard(name: str) -> Any:
    """This worker's iterator over ``datasets[name]`` of the trainer (``TorchTrainer(datasets=...)``).

    A dataset that ``DataConfig.datasets_to_split`` names (all, by default) gives
    rank r of n every n-th row, the same number of rows on every rank; others give
    every rank all rows. Each pass is one epoch (``random_shuffle`` reorders per
    epoch), and its position is saved with each checkpoint for exact resume.

    Returns:
        A ``muster.data.DataIterator`` (``iter_batches``, ``iter_torch_batches``, ``iter_rows``).

    Raises:
        KeyError: the trainer has no dataset of that name.
        RuntimeError: called outside a training worker.
    """
    from muster.train._internal.datasets import get_dataset_shard as _get

    return _get(name)


def __getattr__(name: str) -> Any:
    if name == "DataConfig":  # lazily: muster.data imports pyarrow
        from muster.data import DataConfig

        return DataConfig
    raise AttributeError(f"module 'muster.train' has no attribute {name!r}")


__all__ = [
    "Checkpoint",
    "CheckpointConfig",
    "FailureConfig",
    "Result",
    "RunAlreadyFinishedError",
    "RunConfig",
    "ScalingConfig",
    "TrainContext",
    "TrainingFailedError",
    "DataConfig",
    "get_checkpoint",
    "get_context",
    "get_dataset_shard",
    "report",
]
