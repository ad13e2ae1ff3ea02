"""Helpers called inside ``train_loop_per_worker``: devices, DDP, sharded loaders."""

from __future__ import annotations

import os
import random
import warnings
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, RandomSampler

_USE_GPU = False  # set by the torch backend on each worker


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def get_devices() -> list[torch.device]:
    """Every device this worker holds: its GPUs (as it sees them), or ``[cpu]``."""
    if _USE_GPU and torch.cuda.is_available():
        return [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    return [torch.device("cpu")]


def get_device() -> torch.device:
    """This worker's device: its first GPU when the run uses GPUs, else the CPU."""
    return get_devices()[0]


def prepare_model(
    model: torch.nn.Module,
    move_to_device: bool | torch.device = True,
    parallel_strategy: str | None = "ddp",
    parallel_strategy_kwargs: dict[str, Any] | None = None,
) -> torch.nn.Module:
    """Move ``model`` to this worker's device and wrap it in DistributedDataParallel.

    With one worker the model is returned unwrapped (as Ray Train does); with
    more, the DDP wrapper's ``.module`` is the original model.

    Args:
        move_to_device: move the model to ``get_device()`` (or to the device given).
        parallel_strategy: ``"ddp"`` or ``None`` (no wrapping).
        parallel_strategy_kwargs: passed to ``DistributedDataParallel``.
    """
    if parallel_strategy not in ("ddp", None):
        raise ValueError(
            f"prepare_model(parallel_strategy={parallel_strategy!r}): this version supports 'ddp' or None."
        )
    device = move_to_device if isinstance(move_to_device, torch.device) else get_device()
    if move_to_device is not False:
        model = model.to(device)
    _, world_size = _world()
    if parallel_strategy is None or world_size < 2:
        return model
    kwargs = dict(parallel_strategy_kwargs or {})
    if device.type == "cuda":
        kwargs.setdefault("device_ids", [device])
        kwargs.setdefault("output_device", device)
    return torch.nn.parallel.DistributedDataParallel(model, **kwargs)


class _EpochSampler(DistributedSampler):
    """A DistributedSampler whose epoch moves on by itself at each new pass,
    unless the user called ``set_epoch`` since the last one."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._passes = 0
        self._user_set = False

    def set_epoch(self, epoch: int) -> None:
        self._user_set = True
        super().set_epoch(epoch)

    def __iter__(self) -> Iterator[int]:
        if self._passes and not self._user_set:
            self.epoch += 1
        self._user_set = False
        self._passes += 1
        return super().__iter__()


class PreparedDataLoader:
    """The loader ``prepare_data_loader`` returns: iterates the sharded loader
    and moves each batch to the worker's device. Other attributes pass through."""

    def __init__(self, loader: DataLoader, device: torch.device | None):
        self._loader, self._device = loader, device

    def __iter__(self) -> Iterator[Any]:
        if self._device is None:
            yield from self._loader
            return
        for batch in self._loader:
            yield _to_device(batch, self._device)

    def __len__(self) -> int:
        return len(self._loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def _to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (list, tuple)):
        moved = [_to_device(b, device) for b in batch]
        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    return batch


def prepare_data_loader(
    data_loader: DataLoader, add_dist_sampler: bool = True, move_to_device: bool = True, auto_transfer: bool = True
) -> PreparedDataLoader:
    """Shard ``data_loader`` across workers and move its batches to the device.

    The loader is rebuilt with a DistributedSampler that keeps its shuffle
    setting; each new pass over it advances the sampler's epoch (so every
    epoch is shuffled differently), and an explicit
    ``loader.sampler.set_epoch(e)`` still takes precedence.
    """
    if not isinstance(data_loader, DataLoader):
        raise TypeError(
            f"prepare_data_loader expects a torch.utils.data.DataLoader, got {type(data_loader).__name__}."
        )
    rank, world_size = _world()
    loader = data_loader
    if add_dist_sampler and world_size > 1 and not isinstance(data_loader.sampler, DistributedSampler):
        loader = _with_sampler(data_loader, rank, world_size)
    device = get_device() if move_to_device and get_device().type != "cpu" else None
    return PreparedDataLoader(loader, device)


def _with_sampler(loader: DataLoader, rank: int, world_size: int) -> DataLoader:
    if isinstance(loader.dataset, IterableDataset):
        warnings.warn(
            "prepare_data_loader: an IterableDataset cannot be split by a sampler; every worker will read "
            "all of it. Shard inside the dataset using muster.train.get_context().get_world_rank().",
            stacklevel=3,
        )
        return loader
    if loader.batch_size is None:
        raise ValueError(
            "prepare_data_loader: this DataLoader uses a custom batch_sampler, which muster cannot shard. "
            "Build it with batch_size=... (and shuffle=...) instead, or pass add_dist_sampler=False and "
            "shard it yourself."
        )
    shuffle = isinstance(loader.sampler, RandomSampler)
    sampler = _EpochSampler(loader.dataset, num_replicas=world_size, rank=rank, shuffle=shuffle)
    kwargs: dict[str, Any] = dict(
        batch_size=loader.batch_size,
        sampler=sampler,
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        drop_last=loader.drop_last,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context,
        generator=loader.generator,
        persistent_workers=loader.persistent_workers,
    )
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
    return DataLoader(loader.dataset, **kwargs)


def enable_reproducibility(seed: int = 0) -> None:
    """Seed python, numpy and torch, and make torch pick deterministic kernels.

    Call it first thing in ``train_loop_per_worker``. Deterministic kernels can be slower.
    """
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
