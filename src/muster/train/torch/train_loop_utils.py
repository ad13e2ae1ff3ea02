"""Helpers called inside ``train_loop_per_worker``: devices, DDP, sharded loaders."""

from __future__ import annotations

import os
import random
import time
import warnings
from typing import Any, Iterator, Sized, cast

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, RandomSampler, SequentialSampler

from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.observe.sampler import note_data_wait
from muster.train._internal import resume

_END = object()

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
    """Move ``model`` to this worker's device and make it data parallel.

    With one worker the model is returned unwrapped (as Ray Train does). With
    more, ``"ddp"`` wraps it in DistributedDataParallel (its ``.module`` is the
    original model) and ``"fsdp"`` shards it in place with FSDP2
    ``fully_shard`` (see ``muster.train.torch.fsdp``; save it with
    ``save_sharded``). After ``accelerate(amp=True)`` its forward pass runs
    under autocast and returns float32 outputs.

    Args:
        move_to_device: move the model to ``get_device()`` (or to the device given).
        parallel_strategy: ``"ddp"``, ``"fsdp"`` or ``None`` (no wrapping).
        parallel_strategy_kwargs: passed to ``DistributedDataParallel``, or for
            ``"fsdp"`` to ``fully_shard`` (``mesh``, ``reshard_after_forward``,
            ``mp_policy``, ``offload_policy``) plus ``shard_modules``: the
            module classes that become FSDP units of their own.
    """
    from muster.train.torch import amp, fsdp

    if parallel_strategy not in ("ddp", "fsdp", None):
        raise InvalidArgumentError(f"prepare_model(parallel_strategy={parallel_strategy!r}): "
                                   "use 'ddp', 'fsdp' or None.")
    device = move_to_device if isinstance(move_to_device, torch.device) else get_device()
    if move_to_device is not False:
        model = model.to(device)
    if amp.amp_enabled():
        amp.wrap_forward(model, device)
    _, world_size = _world()
    if parallel_strategy is None or world_size < 2:
        return model
    kwargs = dict(parallel_strategy_kwargs or {})
    if parallel_strategy == "fsdp":
        return fsdp.shard_model(model, device, kwargs)
    if device.type == "cuda":
        kwargs.setdefault("device_ids", [device])
        kwargs.setdefault("output_device", device)
    return torch.nn.parallel.DistributedDataParallel(model, **kwargs)


class _EpochSampler(DistributedSampler):
    """A DistributedSampler whose epoch moves on by itself at each new pass
    (unless the user called ``set_epoch`` since the last one), and that can
    resume a pass part-way, skipping the samples already consumed."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._passes = 0
        self._user_set = False
        self._skip: tuple[int, int] | None = None  # (epoch, samples) to skip on the next pass
        self._reshard: tuple[int, int] | None = None  # (epoch, samples consumed by the whole gang)
        self.offset = 0  # samples the whole gang consumed in this epoch before this pass began
        self.skipped = 0

    def set_epoch(self, epoch: int) -> None:
        self._user_set = True
        super().set_epoch(epoch)

    def __iter__(self) -> Iterator[int]:
        if self._passes and not self._user_set:
            self.epoch += 1
        self._user_set = False
        self._passes += 1
        self.skipped, self.offset = 0, 0
        if self._reshard is not None:
            epoch, consumed = self._reshard
            self._reshard = None
            if epoch == self.epoch:  # the world size changed mid-epoch: share out what is left
                self.offset = consumed
                return iter(self._rest_of_epoch(consumed))
        indices = list(super().__iter__())
        if self._skip is not None:
            epoch, samples = self._skip
            self._skip = None
            if epoch == self.epoch:
                self.skipped = min(samples, len(indices))
                indices = indices[self.skipped :]
        return iter(indices)


    def _rest_of_epoch(self, consumed: int) -> list[int]:
        """This rank's share of the epoch's samples the gang has not consumed yet.

        A DistributedSampler deals the epoch's order out round-robin, so the
        samples a gang of any size consumed are a prefix of that order: the
        rest is dealt out again over the current world size (padded by
        repeating its own first samples so every rank gets as many)."""
        n = len(cast(Sized, self.dataset))
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(n, generator=g).tolist()
        else:
            order = list(range(n))
        rest = order[consumed:]
        world = self.num_replicas
        if self.drop_last:
            rest = rest[: len(rest) - len(rest) % world]
        elif rest and len(rest) % world:
            pad = world - len(rest) % world
            rest += (rest * (pad // len(rest) + 1))[:pad]
        return rest[self.rank :: world]


class PreparedDataLoader(DataLoader):
    """The loader ``prepare_data_loader`` returns: iterates the sharded loader,
    moves each batch to the worker's device, and remembers its position so a
    checkpoint can resume it mid-epoch. Other attributes pass through to the
    wrapped loader; it is a ``DataLoader`` for ``isinstance`` checks (as Ray's is),
    but never runs ``DataLoader.__init__`` itself."""

    def __init__(self, loader: DataLoader, device: torch.device | None):
        # does not call DataLoader.__init__ (see above)
        self._loader, self._device = loader, device
        sampler = loader.sampler
        self._sampler = sampler if isinstance(sampler, _EpochSampler) and loader.batch_size else None
        self._position = 0  # batches of the current pass consumed (skipped ones included)
        self._exhausted = False
        resume.book().register(self)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        resume.book().before_iteration()
        if self._sampler is not None and self._sampler._skip is not None:
            rng = torch.get_rng_state()  # the uninterrupted run drew this pass's seed before the checkpoint
            it = iter(self._loader)
            torch.set_rng_state(rng)
        else:
            it = iter(self._loader)
        self._position, self._exhausted, first = 0, False, True
        while True:
            waited = time.perf_counter()  # the time to the next batch on the device is data wait
            batch = next(it, _END)
            if batch is _END:
                break
            if first and self._sampler is not None:
                self._position = self._sampler.skipped // (self._loader.batch_size or 1)
            first = False
            self._position += 1
            if self._device is not None:
                batch = _to_device(batch, self._device)
            note_data_wait(time.perf_counter() - waited)
            yield batch
        self._exhausted = True

    def __len__(self) -> int:
        return len(self._loader)

    def __getattr__(self, name: str) -> Any:
        if name == "_loader":  # not set yet (copy/pickle make the object without __init__)
            raise AttributeError(name)
        return getattr(self._loader, name)

    # -- exact resume ------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        if self._sampler is None:
            return {"resumable": False}
        return {
            "resumable": True,
            "epoch": self._sampler.epoch,
            "passes": self._sampler._passes,
            "position": self._position,
            "exhausted": self._exhausted,
            "batch_size": self._loader.batch_size,
            "world_size": self._sampler.num_replicas,
            "offset": self._sampler.offset,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not state.get("resumable") or self._sampler is None:
            warnings.warn(
                "prepare_data_loader: this loader's position was not saved with the checkpoint (it does not use "
                "a sampler muster can resume: IterableDataset or a custom batch_sampler); it starts its pass "
                "from the beginning.",
                stacklevel=3,
            )
            return
        sampler = self._sampler
        sampler.epoch, sampler._passes = state["epoch"], state["passes"]
        if state["exhausted"]:
            sampler._user_set = False  # the next pass is a new epoch, as it would have been
        else:
            sampler._user_set = True  # the next pass finishes the interrupted epoch
            world, offset = state.get("world_size", sampler.num_replicas), state.get("offset", 0)
            if world == sampler.num_replicas and not offset:  # same gang shape: skip by index, as before
                sampler._skip = (state["epoch"], state["position"] * state["batch_size"])
            else:  # elastic resize: the whole gang's progress, re-dealt over the new world size
                sampler._reshard = (state["epoch"], offset + state["position"] * state["batch_size"] * world)


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
    ``loader.sampler.set_epoch(e)`` still takes precedence.  Its position is
    saved with every checkpoint: after a restart it yields only the batches of
    the interrupted epoch not yet consumed (skipped by index, not loaded).

    Args:
        add_dist_sampler: shard with muster's sampler (False: keep yours and shard yourself).
        move_to_device: move each batch to ``get_device()`` (a no-op on CPU).
        auto_transfer: accepted for Ray compatibility; moving batches is
            governed by ``move_to_device``.
    """
    if not isinstance(data_loader, DataLoader):
        raise InvalidTypeError(
            f"prepare_data_loader expects a torch.utils.data.DataLoader, got {type(data_loader).__name__}."
        )
    rank, world_size = _world()
    loader = data_loader
    if add_dist_sampler and not isinstance(data_loader.sampler, _EpochSampler):
        loader = _with_sampler(data_loader, rank, world_size)
    device = get_device() if move_to_device and get_device().type != "cpu" else None
    return PreparedDataLoader(loader, device)


def _with_sampler(loader: DataLoader, rank: int, world_size: int) -> DataLoader:
    if isinstance(loader.dataset, IterableDataset):
        if world_size > 1:
            warnings.warn(
                "prepare_data_loader: an IterableDataset cannot be split by a sampler; every worker will read "
                "all of it. Shard inside the dataset using muster.train.get_context().get_world_rank().",
                stacklevel=3,
            )
        return loader
    if loader.batch_size is None:
        if world_size == 1:
            return loader
        raise InvalidArgumentError(
            "prepare_data_loader: this DataLoader uses a custom batch_sampler, which muster cannot shard. "
            "Build it with batch_size=... (and shuffle=...) instead, or pass add_dist_sampler=False and "
            "shard it yourself."
        )
    original = loader.sampler
    seed, drop_last = 0, False
    if isinstance(original, DistributedSampler):
        shuffle, seed, drop_last = original.shuffle, original.seed, original.drop_last
    elif isinstance(original, (RandomSampler, SequentialSampler)):
        shuffle = isinstance(original, RandomSampler)
    else:
        warnings.warn(
            f"prepare_data_loader: replacing the loader's {type(original).__name__} with a sharding sampler "
            "(shuffle=False). Pass add_dist_sampler=False to keep your sampler and shard the data yourself.",
            stacklevel=3,
        )
        shuffle = False
    sampler = _EpochSampler(
        loader.dataset, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last
    )
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
