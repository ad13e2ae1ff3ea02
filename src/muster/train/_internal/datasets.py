"""``TorchTrainer(datasets=...)``: each worker builds its shard iterators before the loop runs.

The training function is wrapped in ``DatasetLoop``; on each worker it makes
one ``muster.data.DataIterator`` per dataset (rank r of n for the datasets
``DataConfig`` splits, all rows for the others), registers it with the
resume book so its position is saved with every checkpoint (as a prepared
DataLoader's is), and then calls the user's function.

On the Ray engine the controller calls ``for_gang(n)`` on the driver before
each attempt: every split dataset becomes a ``ray.data`` dataset split with
Ray's ``streaming_split(n, equal=True)`` (as Ray Train's ``DataConfig``
does), and rank r iterates shard r; an unsplit dataset is translated on each
worker and read whole.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.train._internal import resume

_shards: dict[str, Any] = {}


class DatasetLoop:
    """The user's loop with the trainer's datasets attached (pickled to every worker)."""

    def __init__(self, fn: Callable[..., Any], datasets: dict[str, Any], data_config: Any, seed: int):
        self.fn, self.datasets, self.data_config = fn, datasets, data_config
        self.seed = seed  # seeds local shuffle buffers: the same on every rank and attempt
        self.ray_splits: dict[str, list[Any]] | None = None  # on the Ray engine: name -> a shard per rank
        self.custom: list[dict[str, Any]] | None = None  # a user's DataConfig.configure: rank -> name -> shard

    def for_gang(self, world: int) -> "DatasetLoop":
        """The loop one attempt of ``world`` workers runs: the shards of a user's ``DataConfig.configure``
        if it has one; on the Ray engine, with fresh streaming splits."""
        from muster.data import DataConfig, _ray_plan

        if type(self.data_config).configure is not DataConfig.configure:
            loop = copy.copy(self)
            loop.custom = _configured(self.data_config, self.datasets, world)
            return loop
        if not _ray_plan.on_ray_engine():
            return self
        loop = copy.copy(self)
        loop.ray_splits = {
            name: _ray_plan.to_ray(ds).streaming_split(world, equal=True)
            for name, ds in self.datasets.items() if self.data_config.splits(name) and world > 1
        }
        # Ray counts the driver's handles on each split's coordinator actor, not the pickled copies the
        # workers hold: keep this attempt's alive here until the next attempt replaces them.
        self._live_splits = loop.ray_splits
        return loop

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_live_splits", None)
        return state

    def _iterator(self, name: str, rank: int, world: int) -> Any:
        from muster.data import DataIterator, Dataset
        from muster.data import _ray_plan

        ds = self.datasets[name]
        if self.custom is not None:
            shard = self.custom[rank][name]
            return shard.iterator() if isinstance(shard, Dataset) else shard
        if self.ray_splits is None:
            split = self.data_config.splits(name) and world > 1
            return DataIterator(ds, rank if split else 0, world if split else 1, seed=self.seed)
        if name in self.ray_splits:
            return _ray_plan.RayDataIterator(ds, self.ray_splits[name][rank], rank, world, seed=self.seed)
        return _ray_plan.RayDataIterator(ds, _ray_plan.to_ray(ds), seed=self.seed)

    def __call__(self, config: dict[str, Any] | None = None) -> Any:
        from muster.data.context import DataContext
        from muster.data.iterator import DataIterator
        from muster.observe.sampler import note_data_wait
        from muster.train._internal.worker import _takes_config
        from muster.train import get_context

        ctx = get_context()
        rank, world = ctx.get_world_rank(), ctx.get_world_size()
        options = self.data_config.execution_options
        if isinstance(options, DataContext):  # one for every dataset: this worker's
            DataContext._current = options
        _shards.clear()
        for name in sorted(self.custom[rank] if self.custom is not None else self.datasets):
            it = self._iterator(name, rank, world)
            if isinstance(options, dict) and isinstance(it, DataIterator) and it._context is None:
                it._context = options.get(name)  # this dataset's own, as Ray's per-dataset options
            it._on_pass_start = resume.book().before_iteration
            it._on_wait = note_data_wait  # the live view's data-wait figure, as for prepared loaders
            resume.book().register(it)
            _shards[name] = it
        try:
            return self.fn(config if config is not None else {}) if _takes_config(self.fn) else self.fn()
        finally:
            _shards.clear()


def _outline(value: Any) -> str:
    """``value`` on one line, for an error: a dict's values by type (a Dataset prints on several lines), a
    list's items so."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: <{type(v).__name__}>" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_outline(v) for v in value) + "]"
    return f"<{type(value).__name__}>" if "\n" in repr(value) else repr(value)


def _configured(config: Any, datasets: dict[str, Any], world: int) -> list[dict[str, Any]]:
    """A user's ``DataConfig.configure`` result, checked: one dict of name -> iterator per rank."""
    from muster.data import DataIterator, Dataset
    from muster.tasks.runtime_context import node_id

    shards = config.configure(dict(datasets), world, worker_handles=None, worker_node_ids=[node_id()] * world)
    what = f"{type(config).__name__}.configure(world_size={world})"
    if not isinstance(shards, (list, tuple)) or len(shards) != world or not all(isinstance(d, dict) for d in shards):
        raise InvalidTypeError(f"{what} returned {_outline(shards)}; return a list of {world} dicts (one per worker) "
                               "of dataset name -> DataIterator, e.g. [{'train': it} for it in ds.streaming_split(n)].")
    for rank, named in enumerate(shards):
        for name, shard in named.items():
            if not isinstance(shard, (DataIterator, Dataset)):
                raise InvalidTypeError(f"{what}: worker {rank}'s {name!r} is a {type(shard).__name__}; give a "
                                       "DataIterator (ds.streaming_split(n)[i], ds.iterator()) or a Dataset.")
    return list(shards)


def check_datasets(datasets: Any, data_config: Any, trainer: str) -> None:
    from muster.data import DataConfig, Dataset

    if not isinstance(datasets, dict):
        raise InvalidTypeError(f"{trainer}(datasets={datasets!r}): pass a dict name -> muster.data Dataset.")
    for name, ds in datasets.items():
        if not isinstance(ds, Dataset):
            raise InvalidTypeError(
                f"{trainer}(datasets={{{name!r}: {type(ds).__name__}}}): each value must be a muster.data Dataset "
                "(e.g. muster.data.read_parquet(...)); build other loaders inside train_loop_per_worker."
            )
    if data_config is not None and not isinstance(data_config, DataConfig):
        raise InvalidTypeError(f"{trainer}(dataset_config={data_config!r}): pass a muster.train.DataConfig.")
    if data_config is not None and data_config.datasets_to_split != "all":
        unknown = [n for n in data_config.datasets_to_split if n not in datasets]
        if unknown:
            raise InvalidArgumentError(f"DataConfig(datasets_to_split={data_config.datasets_to_split!r}): "
                                       f"no dataset named {unknown[0]!r}; the trainer has {sorted(datasets)}.")


def get_dataset_shard(name: str | None = None) -> Any:
    """This worker's ``DataIterator`` for ``datasets[name]`` (``None``: the trainer's only dataset)."""
    from muster.train._internal import session

    session.get_session("get_dataset_shard")
    if name is None:
        if len(_shards) != 1:
            raise KeyError(f"get_dataset_shard() without a name needs a trainer with exactly one dataset; it has "
                           f"{sorted(_shards) or 'none'}: pass one of them, e.g. get_dataset_shard('train').")
        (name,) = _shards
    if name not in _shards:
        raise KeyError(f"get_dataset_shard({name!r}): the trainer has no dataset named {name!r}; it has "
                       f"{sorted(_shards) or 'none'} (pass TorchTrainer(datasets={{{name!r}: ds}})).")
    return _shards[name]
