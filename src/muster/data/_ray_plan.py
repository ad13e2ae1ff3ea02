"""On the Ray engine: a muster logical plan as the ``ray.data`` calls that build the same dataset.

Every read, transform and all-to-all operator records its ``ray.data`` call
(``plan.RayCall``) when it is made; ``to_ray`` replays them bottom-up, so
``read_parquet(...).map(f).filter(g)`` becomes ``ray.data.read_parquet(...)
.map(f).filter(g)`` and Ray's streaming executor runs it on the cluster.
An operator with no ``ray.data`` equivalent carries a sentence instead, and
translating it raises ``InvalidArgumentError`` naming the operator and the fix.

``RayDataIterator`` is muster's ``DataIterator`` fed by a Ray one (a
``streaming_split`` shard, or a whole ``ray.data.Dataset``): Ray produces the
blocks, muster batches them, shuffles them locally, converts them to tensors
and meters the wait, exactly as on the embedded engine.  Ray restarts an
epoch's stream after a failure, so a restored position keeps the epoch and
starts it from its first row (Ray Train's behaviour).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

import pyarrow as pa

from muster.data import _ray_guard
from muster.data._ray_join import arrow_blocks, join_dataset
from muster.data.iterator import DataIterator
from muster.data.plan import AllToAll, Join, Limit, Node, RayCall, Read, Transform, Union, Zip
from muster.exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from muster.data.dataset import Dataset

_NO_EQUIVALENT = "it has no ray.data equivalent; build it from ray.data's operators, or run on the embedded engine"
#: Ray's ``concurrency=`` argument is deprecated (2.51), and ``with_columns`` has none: these calls get ``compute=``.
_COMPUTE_OPS = ("map", "map_batches", "flat_map", "filter", "with_columns")


def on_ray_engine() -> bool:
    """Whether datasets run on Ray: the driver's engine is Ray, or this is a worker of the Ray engine."""
    import sys

    from muster.core import api, context

    if api.is_initialized():
        return api.get_runtime().name == "ray"
    ray = sys.modules.get("ray")
    return context.in_worker() and ray is not None and bool(ray.is_initialized())


def to_ray(dataset: "Dataset", plan_only: bool = False) -> Any:
    """The ``ray.data.Dataset`` for ``dataset``'s plan, named as ``dataset`` is (``set_name``: Ray's stats,
    dashboard and metrics know it by that name). Nothing runs to build it: a join is a read whose task joins
    the inputs' blocks in a Ray worker (``_ray_join``), or with ``plan_only`` (``explain``), Ray's own ``join``.

    Raises:
        InvalidArgumentError: an operator of the plan has no ``ray.data`` equivalent (named, with the fix).
    """
    ds = _to_ray(dataset._node, plan_only)
    if dataset.name is not None:
        ds.set_name(dataset.name)
    return ds


def _to_ray(node: Node, plan_only: bool = False) -> Any:
    """The ``ray.data.Dataset`` for the plan ending at ``node`` (``plan_only``: see :func:`to_ray`)."""
    import ray.data

    op = node.op
    if isinstance(op, Read):
        name, args, kwargs = _steps(op)[0]
        kwargs = _clean(kwargs)
        shuffle = kwargs.get("shuffle")
        if shuffle is not None and shuffle != "files":  # muster's FileShuffleConfig as Ray's
            kwargs["shuffle"] = ray.data.FileShuffleConfig(seed=shuffle.seed)
        if name == "read_datasource":  # a muster Datasource, as Ray's
            from muster.data.datasource._on_ray import ray_datasource

            args = (ray_datasource(args[0]),)
        ds = getattr(ray.data, name)(*args, **kwargs)
        return _apply(ds, _steps(op)[1:], op.name)
    inputs = [_to_ray(n, plan_only) for n in node.inputs]
    if isinstance(op, Union) and op.weights is not None:
        stop = ray.data.MixStoppingCondition.STOP_ON_SHORTEST if op.stop_on_shortest else \
            ray.data.MixStoppingCondition.STOP_ON_LONGEST_DROP
        return inputs[0].mix(*inputs[1:], weights=list(op.weights), stopping_condition=stop)
    if isinstance(op, Union):
        return inputs[0].union(*inputs[1:]) if len(inputs) > 1 else inputs[0]
    if isinstance(op, Limit):
        return inputs[0].limit(op.n)
    if isinstance(op, Zip):
        return inputs[0].zip(*inputs[1:]) if len(inputs) > 1 else inputs[0]
    if isinstance(op, Join) and plan_only:  # Ray's join, planned: it is never run (it needs polars)
        name, args, kwargs = _steps(op)[0]
        return getattr(inputs[0], name)(inputs[1], *args, **_clean(kwargs))
    if isinstance(op, Join):  # muster's join of the inputs' blocks, in a Ray worker when it runs (see _ray_join)
        return join_dataset(op, inputs[0], inputs[1], node.known_schema())
    return _apply(inputs[0], _steps(op), op.name)


def _steps(op: Read | Transform | AllToAll | Join) -> tuple[tuple[str, tuple, dict], ...]:
    ray = op.ray
    if not isinstance(ray, RayCall):
        raise InvalidArgumentError(f"{op.name} cannot run on the Ray engine: {ray or _NO_EQUIVALENT}.")
    return ray.steps


def _apply(ds: Any, steps: tuple[tuple[str, tuple, dict], ...], where: str) -> Any:
    for name, args, kwargs in steps:
        kwargs = _clean(kwargs)
        if name in _COMPUTE_OPS and "concurrency" in kwargs:
            kwargs["compute"] = _compute(args[0], kwargs.pop("concurrency"), where)
        if name in _ray_guard.GUARDED and args:  # user code fails with muster's errors, as on its own engine
            args = (_ray_guard.guard(name, args[0]), *args[1:])
        if name == "aggregate":  # muster.data.aggregate objects as ray.data.aggregate's
            args = tuple(a.to_ray() for a in args)
        if name in ("with_column", "with_columns", "filter"):  # muster.data.expressions as ray.data.expressions'
            from muster.data._ray_exprs import to_ray

            args, kwargs = tuple(to_ray(a) for a in args), {k: to_ray(v) for k, v in kwargs.items()}
        ds = getattr(ds, name)(*args, **kwargs)
    return ds


def _clean(kwargs: dict) -> dict:
    """Keyword arguments with the ``None``s (and empty ``fn_*`` arguments) left out: Ray's defaults apply
    (as muster's do), and Ray rejects constructor arguments for a plain function even when empty."""
    return {k: v for k, v in kwargs.items() if v is not None and not (k.startswith("fn_") and v in ((), {}))}


def _compute(fn: Any, concurrency: Any, where: str) -> Any:
    """``concurrency=`` as Ray's compute strategy: an actor pool for a callable class, else a task pool."""
    import ray.data

    if isinstance(fn, type):
        if isinstance(concurrency, tuple):
            return ray.data.ActorPoolStrategy(min_size=concurrency[0], max_size=concurrency[1])
        return ray.data.ActorPoolStrategy(size=concurrency)
    if isinstance(concurrency, tuple):  # Ray takes (min, max) only for classes: a function gets the max
        return ray.data.TaskPoolStrategy(size=concurrency[1])
    if isinstance(concurrency, int):
        return ray.data.TaskPoolStrategy(size=concurrency)
    raise InvalidArgumentError(f"{where}: concurrency={concurrency!r}: use a positive int or a (min, max) tuple.")


def blocks(dataset: "Dataset") -> Iterator[pa.Table]:
    """The dataset's output, executed by ``ray.data``, as Arrow blocks on this process (the ``ray.data``
    dataset kept on ``dataset``: its ``stats()`` are Ray's)."""
    ray_dataset = to_ray(dataset)
    dataset._ray_ran = ray_dataset
    yield from arrow_blocks(ray_dataset)


def count(dataset: "Dataset") -> int:
    """The dataset's row count by ``ray.data`` (a user function's failure raised as muster's error)."""
    try:
        return int(to_ray(dataset).count())
    except Exception as exc:
        _ray_guard.reraise(exc)
        raise


def write(dataset: "Dataset", kind: str, path: str, filesystem: Any, mode: Any = "append", **kwargs: Any) -> list[str]:
    """``write_parquet/csv/json`` by ``ray.data``: the files it wrote under ``path`` (as muster returns them).
    ``mode`` is muster's (a ``SaveMode`` or its value), given to Ray as Ray's; options left None are Ray's
    defaults."""
    from ray.data import SaveMode as RaySaveMode

    from muster.core.filesystem import as_fsspec, url_to_fs

    listing = as_fsspec(filesystem, f"write_{kind}(filesystem=)")  # Ray takes pyarrow's; the listing, fsspec
    fs, root = (listing, path) if listing is not None else url_to_fs(path)
    before = set(_files(fs, root))
    options = {k: v for k, v in kwargs.items() if v is not None}
    options["mode"] = RaySaveMode(str(getattr(mode, "value", mode)).lower())
    try:
        given_fs = {"filesystem": filesystem} if filesystem is not None else {}
        getattr(to_ray(dataset), f"write_{kind}")(path, **given_fs, **options)
    except Exception as exc:
        _ray_guard.reraise(exc)
        raise
    return sorted(set(_files(fs, root)) - before)


def write_datasink(dataset: "Dataset", sink: Any, ray_remote_args: dict[str, Any] | None,
                   concurrency: int | None) -> None:
    """``write_datasink`` by ``ray.data``: the muster ``Datasink`` as Ray's (its ``write`` runs in Ray's workers)."""
    from muster.data.datasource import Datasink
    from muster.data.datasource._on_ray import ray_datasink
    from muster.exceptions import InvalidTypeError

    if not isinstance(sink, Datasink):
        raise InvalidTypeError(f"write_datasink({sink!r}): pass an instance of a muster.data.Datasink subclass.")
    try:
        to_ray(dataset).write_datasink(ray_datasink(sink), ray_remote_args=ray_remote_args, concurrency=concurrency)
    except Exception as exc:
        _ray_guard.reraise(exc)
        raise


def _files(fs: Any, root: str) -> list[str]:
    try:
        return [str(p) for p in fs.find(root)]
    except FileNotFoundError:
        return []


class RayDataIterator(DataIterator):
    """muster's iterator API over a Ray source: a ``ray.data.DataIterator`` (one ``streaming_split``
    shard) or a ``ray.data.Dataset`` (all rows, e.g. an unsplit dataset on every rank)."""

    def __init__(self, dataset: "Dataset", source: Any, rank: int = 0, world: int = 1, seed: int | None = None):
        super().__init__(dataset, rank, world, True, seed)
        self._source = source

    def __repr__(self) -> str:
        return f"RayDataIterator(rank={self._rank}, world={self._world}, source={type(self._source).__name__})"

    def _blocks(self, epoch: int) -> Iterator[pa.Table]:
        if self._dataset._iterator is self:  # the dataset's own (not a split's shard): its stats are Ray's
            self._dataset._ray_ran, self._dataset._stats = self._source, None
        return arrow_blocks(self._source)

    def stats(self) -> str:
        return str(self._source.stats())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue at the saved epoch, from its first row: Ray's stream cannot skip to a position."""
        self._epoch, self._skip = int(state["epoch"]), 0


def streaming_split(dataset: "Dataset", n: int, equal: bool, locality_hints: Any = None) -> list[DataIterator]:
    """``n`` shards by Ray's ``streaming_split`` (one coordinator streams each epoch to all of them)."""
    splits = to_ray(dataset).streaming_split(n, equal=equal, locality_hints=locality_hints)
    return [RayDataIterator(dataset, it, i, n) for i, it in enumerate(splits)]
