"""``Dataset``: a lazy plan of reads and transforms; consuming it runs the plan, streaming.

Transforms return a new ``Dataset`` and run nothing; ``iter_*``, ``take*``,
``count``, ``write_*``, ``materialize`` execute it (see ``execution``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pyarrow as pa

from muster.core import context as core_context
from muster.data import _ray_plan, alltoall, combine, execution, mix, plan, projection, strategies, writers
from muster.data import filter_pushdown, task_context
from muster.data import block as blk
from muster.data import expr as expr_parser
from muster.data.columns import ColumnOps, _names
from muster.data.context import DataContext
from muster.data.datasource import RandomSeedConfig
from muster.data.datasource import datasink as sinks
from muster.data.grouped import GroupedData
from muster.data.iterator import DataIterator, Passes
from muster.data.plan import AllToAll, Limit, Node, RayCall, Read, Transform, Union
from muster.data.schema import Schema
from muster.data import splits
from muster.data.splits import Splits, _positive
from muster.exceptions import InvalidArgumentError, InvalidTypeError


def _ray_seed(seed: Any) -> Any:
    """``seed=`` for the Ray engine: a RandomSeedConfig as Ray's own."""
    return seed.to_ray() if isinstance(seed, RandomSeedConfig) else seed


def _unseeded(seed: Any) -> bool:
    """No seed given (a new random order every pass, so a filter may move below the shuffle)."""
    return (seed.seed if isinstance(seed, RandomSeedConfig) else seed) is None


def _ref(value: Any) -> Any:
    """A ref to a block made here, for ``to_*_refs`` (as ``muster.put`` would: in a worker, stored
    with the driver)."""
    from muster.tasks import objects  # the tasks layer, only when refs are asked for

    return objects.put(value) if core_context.in_worker() else objects.store(value)


#: map_batches' own parameters (what a misspelt keyword is compared with)
_MAP_BATCHES_PARAMS = ("fn", "batch_size", "batch_format", "fn_args", "fn_kwargs", "fn_constructor_args",
                       "fn_constructor_kwargs", "concurrency", "num_cpus", "num_gpus", "zero_copy_batch", "compute")


class Dataset(ColumnOps, writers.FileWrites, Splits):
    """A distributed-style dataset of Arrow blocks (Ray Data's ``Dataset``, on one machine)."""

    def __init__(self, node: Node, name: str | None = None, executions: task_context.Executions | None = None,
                 parent_stats: execution.Stats | None = None):
        self._node = node
        self._dataset_name = name
        # how many times this lineage ran (Ray's execution index: a source's own, shared with what derives from it)
        self._executions = executions if executions is not None else task_context.Executions()
        self._stats: execution.Stats | None = None  # the last execution's, on muster's engine
        self._parent_stats = parent_stats  # a materialize()'s, whose blocks this dataset's source holds
        self._ray_ran: Any = None  # on the Ray engine: the ray.data Dataset (or iterator) that ran last
        self._iterator: DataIterator | None = None
        self._seen: tuple[int, pa.Schema | None] | None = None  # rows and schema of a whole pass, as Ray caches
        self._fetched: pa.Schema | None = None  # the schema a schema() call ran the plan for, as Ray caches

    def __repr__(self) -> str:
        """As Ray prints an unexecuted dataset, running nothing (see ``dataset_repr``)."""
        from muster.data.dataset_repr import lazy_repr

        seen = self._seen if self._seen is not None or self._fetched is None else (None, self._fetched)
        return lazy_repr(self._node, name=self._dataset_name, seen=seen)

    def set_name(self, name: str | None) -> None:
        """Name this dataset (``None`` clears it): kept by its transforms and ``materialize()``, shown by ``repr``."""
        self._dataset_name = name

    @property
    def name(self) -> str | None:
        """The name given by ``set_name`` (None when unnamed)."""
        return self._dataset_name

    def __getstate__(self) -> dict[str, Any]:
        return {"_node": self._node, "_name": self._dataset_name}  # stats and iterators stay here

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        from muster._unsupported import raise_unsupported

        raise_unsupported("muster.data.Dataset", name)

    def __setstate__(self, state: dict[str, Any]) -> None:
        Dataset.__init__(self, state["_node"], state.get("_name"))

    def _then(self, op: plan.Operator) -> "Dataset":
        return Dataset(self._node.then(op), self._dataset_name, self._executions, self._parent_stats)

    def _execute(self, epoch: int | None = None) -> Iterator[pa.Table]:
        """One execution of the plan: the lineage's next (``epoch``: that numbered one, for an iterator)."""
        if _ray_plan.on_ray_engine():  # ray.data runs the plan (its own order per epoch)
            self._stats = None
            return _ray_plan.blocks(self)
        epoch = self._executions.take() if epoch is None else epoch
        self._stats, self._ray_ran = execution.Stats(parent=self._parent_stats), None
        # a pass that runs to its end leaves its rows and schema for count(), schema() and repr, as Ray's cache
        return execution.observed(execution.execute(self._node, epoch, self._stats),
                                  lambda rows, schema: setattr(self, "_seen", (rows, schema)))

    # -- transforms ---------------------------------------------------------------
    def map(self, fn: Callable[[dict[str, Any]], dict[str, Any]], *, fn_args: tuple = (),
            fn_kwargs: dict | None = None, **options: Any) -> "Dataset":
        """Apply ``fn`` to each row (a dict); it must return a dict.

        ``fn`` may be a callable class, built with ``fn_constructor_args/kwargs`` and run as
        :meth:`map_batches` runs one (``concurrency=``, ``num_cpus=``, ``num_gpus=``, ``compute=``).
        """
        return self._rows("map", "Map", plan.map_rows, fn, fn_args, fn_kwargs, options)

    def _rows(self, kind: str, label: str, by_function: Callable[..., Any], fn: Any, fn_args: tuple,
              fn_kwargs: dict | None, options: dict[str, Any]) -> "Dataset":
        """``map``, ``flat_map`` or ``filter``: a function runs inline; a callable class as ``map_batches`` runs one."""
        if not callable(fn):
            raise InvalidTypeError(f"{kind}(fn={fn!r}): pass a function or a callable class.")
        strategies.check_remote_args(kind, options, named=("fn", "fn_args", "fn_kwargs"))
        if isinstance(fn, type) or options.get("num_gpus") or options.get("num_cpus"):  # held as map_batches' are
            return self.map_batches(fn, batch_size=None, fn_args=fn_args, fn_kwargs=fn_kwargs, _rows=kind, **options)
        for name in ("fn_constructor_args", "fn_constructor_kwargs"):
            if options.pop(name, None):
                raise InvalidArgumentError(f"{kind}({name}=...) applies only when fn is a callable class.")
        concurrency = strategies.concurrency_of(options.pop("compute", None), options.get("concurrency"), kind)
        strategies.check_range_is_for_a_class(fn, concurrency, kind)
        ray = RayCall.of(kind, fn, fn_args=fn_args, fn_kwargs=fn_kwargs, **_given(options, concurrency=concurrency))
        return self._then(Transform(f"{label}({plan.fn_name(fn)})", by_function(fn, fn_args, fn_kwargs or {}), ray,
                                    keeps_columns=kind == "filter"))

    def map_batches(self, fn: Any, *, batch_size: int | None | str = "default", batch_format: str | None = "numpy",
                    fn_args: tuple = (), fn_kwargs: dict | None = None, fn_constructor_args: tuple = (),
                    fn_constructor_kwargs: dict | None = None, concurrency: int | tuple[int, int] | None = None,
                    num_cpus: float | None = None, num_gpus: float | None = None, zero_copy_batch: bool = True,
                    compute: Any = None, _rows: str | None = None, **_ray_options: Any) -> "Dataset":
        """Apply ``fn`` to batches of rows.

        Args:
            fn: a function ``batch -> batch``, or a callable class (built with ``fn_constructor_args/kwargs``
                once per actor of a pool when ``concurrency`` is given, else once per executing thread).
            batch_size: rows per batch (``None``: whole blocks; by default, or Ray's ``"auto"``: 1024). Given as
                a number, blocks smaller than it are combined, as Ray bundles them, so that batches span them.
            batch_format: ``"numpy"`` (dict of arrays), ``"pandas"`` or ``"pyarrow"``; ``None``, as Ray's, the
                blocks' own format (pyarrow).
            concurrency: for a callable class, the actor pool's size (``n``), or ``(min, max)`` to scale
                with the queue of blocks; for a function, at most this many of its tasks at once. On the
                Ray engine this becomes Ray's ``compute=`` (an actor pool for a class, a task pool for a
                function).
            zero_copy_batch: True (Ray's default): numpy batches may be read-only views of the blocks; False:
                ``fn`` gets writable copies, to change in place.
            compute: Ray's older spelling of ``concurrency``: ``ActorPoolStrategy(size=n)`` or
                ``(min_size=, max_size=)``, ``TaskPoolStrategy(size=n)``.
            num_cpus / num_gpus: what each actor (or pooled task) holds of the engine's resources. If the
                machine can never give them, execution fails at once naming both; if they are busy (a
                training gang holds them), the class runs in the consumer's threads and a log line says so.
        """
        where = _rows or "map_batches"
        strategies.check_remote_args(where, _ray_options, named=_MAP_BATCHES_PARAMS)
        concurrency = strategies.task_options(where, compute, concurrency, num_cpus, num_gpus,
                                              _ray_options.get("memory"))
        bundle_rows = batch_size if isinstance(batch_size, int) and not isinstance(batch_size, bool) else None
        if batch_size in ("default", "auto"):
            batch_size = 1024
        if not (batch_size is None or isinstance(batch_size, int)):
            raise InvalidArgumentError(f"map_batches(batch_size={batch_size!r}): use a positive integer, None (whole "
                                       "blocks) or \"auto\".")
        _positive(batch_size, "batch_size", "map_batches")
        fmt = blk.check_batch_format(batch_format, "map_batches")
        if not callable(fn):
            raise InvalidTypeError(f"{where}(fn={fn!r}): pass a function or a callable class.")
        strategies.check_range_is_for_a_class(fn, concurrency, where)
        if fn_constructor_args or fn_constructor_kwargs:
            if not isinstance(fn, type):
                raise InvalidArgumentError(f"{where}(fn_constructor_args/kwargs=...) apply only when fn is a "
                                           "callable class.")
        op = plan.MapBatches(fn, batch_size, fmt, tuple(fn_args), dict(fn_kwargs or {}), tuple(fn_constructor_args),
                             dict(fn_constructor_kwargs or {}), zero_copy_batch, concurrency=concurrency,
                             num_cpus=num_cpus, num_gpus=num_gpus, rows=_rows, bundle_rows=bundle_rows)
        label = {"map": "Map", "flat_map": "FlatMap", "filter": "Filter"}.get(where, "MapBatches")
        if _rows is None:
            ray = RayCall.of("map_batches", fn, batch_size=batch_size, batch_format=fmt, fn_args=tuple(fn_args),
                             fn_kwargs=fn_kwargs, fn_constructor_args=tuple(fn_constructor_args),
                             fn_constructor_kwargs=fn_constructor_kwargs, concurrency=concurrency, num_cpus=num_cpus,
                             num_gpus=num_gpus, zero_copy_batch=zero_copy_batch, **_ray_options)
        else:
            ray = RayCall.of(_rows, fn, fn_args=tuple(fn_args), fn_kwargs=fn_kwargs, **_given(
                {"fn_constructor_args": tuple(fn_constructor_args), "fn_constructor_kwargs": fn_constructor_kwargs,
                 "num_cpus": num_cpus, "num_gpus": num_gpus, **_ray_options}, concurrency=concurrency))
        return self._then(Transform(f"{label}({plan.fn_name(fn)})", op, ray, keeps_columns=_rows == "filter"))

    def flat_map(self, fn: Callable[[dict[str, Any]], list[dict[str, Any]]], *, fn_args: tuple = (),
                 fn_kwargs: dict | None = None, **options: Any) -> "Dataset":
        """Apply ``fn`` to each row; it returns a list of output rows (``fn`` may be a callable class,
        as for :meth:`map`)."""
        return self._rows("flat_map", "FlatMap", plan.flat_map_rows, fn, fn_args, fn_kwargs, options)

    def filter(self, fn: Callable[[dict[str, Any]], bool] | None = None, *, fn_args: tuple = (),
               fn_kwargs: dict | None = None, expr: Any = None, **options: Any) -> "Dataset":
        """Keep the rows for which ``fn(row)`` is true, or ``expr`` holds: Ray's string expression
        (``"x > 5 and label == 'a'"``, see ``muster.data.expr``), an expression of ``muster.data.expressions``
        (``col("x") > 5``) or a pyarrow compute expression; ``fn`` may be a callable class."""
        if expr is not None:  # right after read_parquet, pushed into its scan
            if isinstance(expr, str):  # on Ray: as Ray's own expression (Ray deprecates string ones)
                parsed = expr_parser.parse(expr)
                op = Transform(f"Filter({projection.text(parsed)})", lambda b: [b.filter(parsed)],
                               RayCall.of("filter", expr=expr_parser.parse_expr(expr)), keeps_columns=True)
            else:
                parsed, op = expr, projection.filter_op(expr)
            pushed = filter_pushdown.pushed(self._node, op, parsed)
            return (Dataset(pushed, self._dataset_name, self._executions, self._parent_stats) if pushed is not None
                    else self._then(op))
        if fn is None:
            raise InvalidTypeError("filter(): pass a function row -> bool, or expr=pyarrow.compute expression.")
        return self._rows("filter", "Filter", plan.filter_rows, fn, fn_args, fn_kwargs, options)

    def limit(self, limit: int, *, _call: str = "limit") -> "Dataset":
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise InvalidArgumentError(f"{_call}({limit!r}): use an integer >= 0.")
        return self._then(Limit(f"limit={limit}", limit))

    def union(self, *others: "Dataset") -> "Dataset":
        for o in others:
            if not isinstance(o, Dataset):
                raise InvalidTypeError(f"union({o!r}): pass muster.data Datasets.")
        return Dataset(Node(Union("Union"), (self._node, *(o._node for o in others))), None, self._executions)

    def mix(self, *others: "Dataset", weights: list[float] | None = None,
            stopping_condition: Any = "stop_on_longest_drop") -> "Dataset":
        """This dataset's blocks and ``others``' interleaved as they stream, each next block from the one
        furthest behind its share of the rows (Ray's ``mix``; see ``muster.data.mix``). ``weights``: one per
        dataset, this one first (None: equal), normalized; ``stopping_condition``: a ``MixStoppingCondition``."""
        for o in others:
            if not isinstance(o, Dataset):
                raise InvalidTypeError(f"mix({o!r}): pass muster.data Datasets.")
        shares, shortest = mix.check(weights, 1 + len(others), stopping_condition)
        return Dataset(Node(Union(f"Mix(weights={[round(w, 2) for w in shares]})", shares, shortest),
                            (self._node, *(o._node for o in others))), None, self._executions)

    def random_shuffle(self, *, seed: "int | RandomSeedConfig | None" = None, **_ignored: Any) -> "Dataset":
        """Shuffle all rows. Each pass (epoch) gets a new order, deterministic from (seed, epoch);
        ``seed=RandomSeedConfig(seed, reseed_after_execution=False)`` repeats one order every pass
        (what Ray does for an integer seed)."""
        s, per_epoch = RandomSeedConfig.of(seed, "random_shuffle").plan()
        rows = DataContext.get_current().target_block_rows
        ray = RayCall.of("random_shuffle", seed=_ray_seed(seed), **_ignored)
        # unseeded, a filter moves below it (random order either way); a seed's order is drawn over the rows
        # the shuffle gets, so a filter below it would change that order: it stays above (filter_pushdown)
        return self._then(AllToAll("RandomShuffle", alltoall.random_shuffle(s, rows, per_epoch), ray=ray,
                                   keeps_rows=True, passes_filters=_unseeded(seed)))

    def randomize_block_order(self, *, seed: "int | RandomSeedConfig | None" = None) -> "Dataset":
        """Shuffle the order of blocks (files, for a read: no data is gathered); ``seed`` as in
        :meth:`random_shuffle`."""
        s, per_epoch = RandomSeedConfig.of(seed, "randomize_block_order").plan()
        return self._then(AllToAll("RandomizeBlockOrder", alltoall.randomize_block_order(s, per_epoch),
                                   alltoall.randomize_reads(s, per_epoch),
                                   ray=RayCall.of("randomize_block_order", seed=_ray_seed(seed)), keeps_rows=True,
                                   passes_filters=_unseeded(seed)))  # as random_shuffle's

    def repartition(self, num_blocks: int | None = None, target_num_rows_per_block: int | None = None, *,
                    shuffle: bool = False, keys: list[str] | None = None, sort: bool = False,
                    **ray_only: Any) -> "Dataset":
        """``num_blocks`` blocks of near-equal size (shuffled first with ``shuffle``; with ``keys``, each key's
        rows in one block, sorted with ``sort``), or of ``target_num_rows_per_block`` rows, the last the rest."""
        strategies.check_remote_args("repartition", ray_only, named=("num_blocks", "target_num_rows_per_block",
                                                                     "shuffle", "keys", "sort"), only=("strict",))
        _positive(num_blocks, "num_blocks", "repartition")
        _positive(target_num_rows_per_block, "target_num_rows_per_block", "repartition")
        if (num_blocks is None) == (target_num_rows_per_block is None) or (target_num_rows_per_block and shuffle):
            raise InvalidArgumentError(
                f"repartition(num_blocks={num_blocks!r}, target_num_rows_per_block={target_num_rows_per_block!r}, "
                f"shuffle={shuffle}): give num_blocks (optionally with shuffle=True) or target_num_rows_per_block, "
                "not both.")
        if target_num_rows_per_block is not None:
            rows = target_num_rows_per_block
            ray = RayCall.of("repartition", target_num_rows_per_block=rows, **ray_only)
            name = f"StreamingRepartition[num_rows_per_block={rows},strict=False]"  # Ray's name for it
            return self._then(AllToAll(name, alltoall.blocks_of(rows), ray=ray, keeps_rows=True, passes_filters=True))
        assert num_blocks is not None
        keys = [keys] if isinstance(keys, str) else list(keys or [])
        options = {"keys": keys, "sort": sort} if keys else {"shuffle": True} if shuffle else {}
        ray = RayCall.of("repartition", num_blocks, **options, **ray_only)
        fn = alltoall.repartition_by(keys, num_blocks, sort) if keys else alltoall.repartition(num_blocks)
        if shuffle and not keys:  # one operator, as Ray's: the rows shuffled, then cut
            (seed, per_epoch), rows = RandomSeedConfig().plan(), DataContext.get_current().target_block_rows
            fn = alltoall.then(alltoall.random_shuffle(seed, rows, per_epoch), fn)
        return self._then(AllToAll("Repartition", fn, ray=ray, keeps_rows=True,
                                   passes_filters=not shuffle and not keys))  # the same rows in the same order

    def sort(self, key: str | list[str], descending: bool | list[bool] = False, boundaries: list[Any] | None = None
             ) -> "Dataset":
        """Rows ordered by ``key``. ``boundaries`` (values of the first key) cut the result into
        ``len(boundaries) + 1`` blocks, one per range between them (empty ones kept), as Ray's range
        partitions do; the rows and their order are the same either way."""
        keys = [key] if isinstance(key, str) else list(key)
        desc = [descending] * len(keys) if isinstance(descending, bool) else list(descending)
        if boundaries is not None and not isinstance(boundaries, (list, tuple)):
            raise InvalidTypeError(f"sort(boundaries={boundaries!r}): pass a list of values of {keys[0]!r}, or None.")
        bounds = None if boundaries is None else list(boundaries)
        ray = RayCall.of("sort", keys, descending=desc, **({} if bounds is None else {"boundaries": bounds}))
        return self._then(AllToAll("Sort", alltoall.sort(keys, desc, bounds), ray=ray,
                                   keeps_rows=True, passes_filters=True))  # a stable sort

    def groupby(self, key: str | list[str] | None, **_ray_only: Any) -> GroupedData:
        """Group by one or more key columns; ``None`` puts every row in one group (Ray's ``num_partitions``
        changes nothing here)."""
        strategies.check_remote_args("groupby", _ray_only, named=("key",), only=("num_partitions",))
        keys = [] if key is None else [key] if isinstance(key, str) else list(key)
        if not all(isinstance(k, str) for k in keys):
            raise InvalidTypeError(f"groupby({key!r}): pass a column name, a list of them, or None.")
        return GroupedData(self, keys, key)

    def _whole(self, method: str, on: str | list[str] | None, **options: Any) -> Any:
        """An aggregation over the whole dataset, as Ray returns it: a value when there is one
        (one column, given or the only one), else a dict of ``"method(column)"`` to value."""
        row = self.groupby(None)._agg(method, on, options).take(1)[0]
        return next(iter(row.values())) if len(row) == 1 else row

    def aggregate(self, *aggs: Any) -> dict[str, Any]:
        """The aggregations (``muster.data.aggregate``'s ``Count()``, ``Mean("x")``, an ``AggregateFn``...)
        over the whole dataset, as a dict of their names to their values."""
        row: dict[str, Any] = self.groupby(None).aggregate(*aggs).take(1)[0]
        return row

    def sum(self, on: str | list[str] | None = None, ignore_nulls: bool = True) -> Any:
        """The sum of column ``on`` (a list, or None for every column: a dict ``{"sum(col)": value}``)."""
        return self._whole("sum", on, ignore_nulls=ignore_nulls)

    def mean(self, on: str | list[str] | None = None, ignore_nulls: bool = True) -> Any:
        return self._whole("mean", on, ignore_nulls=ignore_nulls)

    def min(self, on: str | list[str] | None = None, ignore_nulls: bool = True) -> Any:
        return self._whole("min", on, ignore_nulls=ignore_nulls)

    def max(self, on: str | list[str] | None = None, ignore_nulls: bool = True) -> Any:
        return self._whole("max", on, ignore_nulls=ignore_nulls)

    def std(self, on: str | list[str] | None = None, ddof: int = 1, ignore_nulls: bool = True) -> Any:
        """The standard deviation of ``on`` (the sample one, ``ddof=1``, as Ray's)."""
        return self._whole("std", on, ddof=ddof, ignore_nulls=ignore_nulls)

    def summary(self, columns: list[str] | None = None,
                override_dtype_agg_mapping: dict[Any, Callable[[str], list[Any]]] | None = None) -> Any:
        """Per-column statistics, by column type, in one streaming pass (Ray's ``summary``): a
        ``muster.data.stats.DatasetSummary`` (``to_pandas()``, ``get_column_stats(col)``).
        ``override_dtype_agg_mapping`` maps a type (a ``DataType`` or a pyarrow type) to a function of a column
        name returning ``muster.data.aggregate`` objects, used for columns of that type instead."""
        from muster.data.summary import summarize

        return summarize(self, columns, override_dtype_agg_mapping)

    def zip(self, *others: "Dataset") -> "Dataset":
        """Columns of datasets with the same number of rows side by side; a repeated name gets ``_1``, ``_2``...
        Lazy, as Ray's: the inputs run, each gathered, when this dataset does (then differing row counts fail)."""
        for o in others:
            if not isinstance(o, Dataset):
                raise InvalidTypeError(f"zip({o!r}): pass muster.data Datasets.")
        return Dataset(combine.zip_node([self._node, *(o._node for o in others)]), None, self._executions)

    def join(self, ds: "Dataset", join_type: str, num_partitions: int, on: tuple[str, ...] | list[str] | str = ("id",),
             right_on: tuple[str, ...] | list[str] | str | None = None, left_suffix: str | None = None,
             right_suffix: str | None = None, **_ray_options: Any) -> "Dataset":
        """Rows of this dataset joined with ``ds``'s on key columns (Ray's ``join``): ``join_type`` one of
        ``inner``, ``left_outer``, ``right_outer``, ``full_outer``, ``left_semi``, ``right_semi``,
        ``left_anti``, ``right_anti``; ``on`` this side's keys, ``right_on`` the other's (default: the
        same). A right column other than its keys named like a left column (a left key too) needs
        ``left_suffix``/``right_suffix``, as in Ray (one side's would be lost). Lazy: when it runs, both sides
        are gathered and joined with pyarrow, in ``num_partitions`` blocks (on the Ray engine, in a Ray
        worker's task that holds one side and streams the other through); the row order is not defined (nor
        is Ray's). Ray's shuffle options change nothing.
        """
        keys = _names(on, "join(on=)")
        right_keys = _names(right_on, "join(right_on=)") if right_on is not None else keys
        combine.check_join(join_type, keys, right_keys, _ray_options)
        if not isinstance(ds, Dataset):
            raise InvalidTypeError(f"join({ds!r}): pass a muster.data Dataset.")
        _positive(num_partitions, "num_partitions", "join")
        return Dataset(combine.join_node(self._node, ds._node, join_type, keys, right_keys, num_partitions,
                                         left_suffix, right_suffix), None, self._executions)

    def random_sample(self, fraction: float, *, seed: "int | RandomSeedConfig | None" = None) -> "Dataset":
        """Each row kept with probability ``fraction`` (about that share of the rows; not an exact count).

        Lazy, as Ray's: it draws when the dataset runs. An integer seed gives the same rows every pass (and every
        run), as in Ray; ``RandomSeedConfig(seed)`` other rows each pass; no seed, fresh rows each pass."""
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
            raise InvalidArgumentError(f"random_sample(fraction={fraction!r}): use a number in [0, 1].")
        return self._then(splits.random_sample_op(float(fraction), seed))

    def input_files(self) -> list[str]:
        """The files this dataset reads (its file readers' paths, each once, in order); ``[]`` for
        in-memory sources. Nothing is read to answer."""
        return self._node.files_read()

    def num_blocks(self) -> int:
        """How many blocks running the plan gives (it runs it)."""
        return sum(1 for _ in self._execute())

    def size_bytes(self) -> int:
        """The in-memory size of the dataset's Arrow data (it runs the plan)."""
        return sum(blk.nbytes(b) for b in self._execute())

    def unique(self, column: str, ignore_nulls: bool = False) -> list[Any]:
        """The distinct values of ``column`` (a null among them unless ``ignore_nulls``); of a list column,
        the distinct lists, as Ray's."""
        from muster.data.aggregate import unique_values

        return unique_values(self.select_columns([column]).to_arrow().column(column), column, ignore_nulls)

    def iterator(self) -> DataIterator:
        """The iterator behind ``iter_*``; each pass over it is one execution of this dataset (an epoch)."""
        on_ray = _ray_plan.on_ray_engine()
        if self._iterator is None or isinstance(self._iterator, _ray_plan.RayDataIterator) != on_ray:
            self._iterator = (_ray_plan.RayDataIterator(self, _ray_plan.to_ray(self)) if on_ray
                              else DataIterator(self, executions=self._executions))
        return self._iterator

    # -- consumption --------------------------------------------------------------
    def iter_batches(self, **kwargs: Any) -> Passes:
        """See ``DataIterator.iter_batches`` (each ``for`` over the result is a new pass, as in Ray)."""
        return self.iterator().iter_batches(**kwargs)

    def iter_torch_batches(self, **kwargs: Any) -> Passes:
        """See ``DataIterator.iter_torch_batches``."""
        return self.iterator().iter_torch_batches(**kwargs)

    def iter_rows(self) -> Passes:
        """Rows as dicts; each ``for`` over the result runs the plan again."""
        return Passes(lambda: (row for block in self._execute() for row in blk.iter_rows(block)))

    def take(self, limit: int = 20) -> list[dict[str, Any]]:
        return list(blk.iter_rows(self.limit(limit, _call="take").to_arrow()))

    def take_all(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Every row; with ``limit``, an error if there are more (a guard against gathering a huge dataset)."""
        return list(blk.iter_rows(self._within(limit, "take_all")))

    def take_batch(self, batch_size: int = 20, *, batch_format: str | None = "numpy") -> Any:
        """Up to ``batch_size`` rows as one batch; an empty dataset is an error, as in Ray (and, unlike Ray's
        "dataset is empty" there, a ``batch_size`` < 1 is named as the bad value)."""
        _positive(batch_size, "batch_size", "take_batch", optional=False)
        fmt = blk.check_batch_format(batch_format, "take_batch")
        table = self.limit(batch_size).to_arrow()
        if not table.num_rows:
            raise InvalidArgumentError("take_batch(): the dataset is empty; check it with count(), or use take() "
                                       "(which gives an empty list).")
        return blk.to_batch(table, fmt)

    def show(self, limit: int = 20) -> None:
        for row in blk.iter_rows(self.limit(limit, _call="show").to_arrow()):
            print(row)

    def count(self) -> int:
        """The rows (a read whose tasks know theirs, from ``BlockMetadata`` or the Parquet files' footers,
        adds them up reading no data, as Ray; so does a dataset that has run a whole pass)."""
        if _ray_plan.on_ray_engine():
            return _ray_plan.count(self)
        known = self._node.known_rows(from_metadata=True)
        known = known if known is not None or self._seen is None else self._seen[0]
        return known if known is not None else sum(b.num_rows for b in self._execute())

    def schema(self, fetch_if_missing: bool = True) -> Schema | None:
        """Ray's ``Schema`` (``names``, ``types``, ``base_schema``; prints as its Column/Type table): known unread for
        a source that knows it (``range``, in-memory data, ``read_parquet``'s footers) under shuffle, sort,
        repartition or ``limit``, or after a whole pass; else the first block's (the plan runs until one is made),
        or, with ``fetch_if_missing=False``, None (nothing runs), as Ray's."""
        known = self._node.known_schema() or (self._seen[1] if self._seen is not None else self._fetched)
        if known is not None and len(known.names):
            return Schema(known)
        if not fetch_if_missing:
            return None
        for block in self._execute():
            if block.num_columns:
                self._fetched = block.schema  # kept: a second call and repr run nothing, as Ray's cached schema
                return Schema(block.schema)
        return Schema(pa.schema([]))

    def columns(self, fetch_if_missing: bool = True) -> list[str] | None:
        """The column names, as :meth:`schema` finds them (None where it gives None)."""
        schema = self.schema(fetch_if_missing)
        return None if schema is None else list(schema.names)

    def to_arrow(self) -> pa.Table:
        return blk.concat(list(self._execute()))

    def to_pandas(self, limit: int | None = None) -> Any:
        """The whole dataset as one DataFrame; with ``limit``, an error if it has more rows. No rows: an empty
        DataFrame with no columns, as Ray's (its blocks' columns are not kept)."""
        table = self._within(limit, "to_pandas")
        return blk.to_pandas(table if table.num_rows else pa.table({}))

    def _within(self, limit: int | None, where: str) -> pa.Table:
        """All rows as one table, refusing (as Ray does) when there are more than ``limit``."""
        if limit is None:
            return self.to_arrow()
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise InvalidArgumentError(f"{where}(limit={limit!r}): use a number of rows >= 0, or None.")
        table = self.limit(limit + 1).to_arrow()
        if table.num_rows > limit:
            raise InvalidArgumentError(
                f"{where}(limit={limit}): the dataset has more than {limit} rows; raise the limit, or take the "
                f"first rows with take({limit}) / limit({limit})."
            )
        return table

    def to_numpy_refs(self, *, column: str | None = None) -> list[Any]:
        """One ``ObjectRef`` per block, to a dict of numpy arrays, or to ``column``'s array
        (``muster.get(refs)`` for the values)."""
        ds = self.select_columns([column]) if column is not None else self
        return [_ref(blk.to_numpy(b)[column] if column is not None else blk.to_numpy(b)) for b in ds._execute()]

    def to_arrow_refs(self) -> list[Any]:
        """One ``ObjectRef`` per block, to a ``pyarrow.Table``."""
        return [_ref(b) for b in self._execute()]

    def to_pandas_refs(self) -> list[Any]:
        """One ``ObjectRef`` per block, to a pandas ``DataFrame``."""
        return [_ref(blk.to_pandas(b)) for b in self._execute()]

    def materialize(self) -> "MaterializedDataset":
        """Run the plan once and keep its blocks in memory."""
        ds = from_blocks(list(self._execute()))
        ds._parent_stats, ds._ray_ran, ds._dataset_name = self._stats, self._ray_ran, self._dataset_name
        return ds

    def stats(self) -> str:
        """The last execution's statistics, as Ray 2.60 prints them; running nothing.

        One block per operator (a read with the transforms fused into its tasks, ``Operator 1
        ReadRange->Map(<lambda>): 5 tasks executed, 5 blocks produced in 0.06s``), numbered in the order they
        ran, a ``materialize()``'s before those run since, each with Ray's ``* Remote wall time``, ``* Remote
        cpu time``, ``* Output num rows per block``, ``* Output size bytes per block``, ``* Output rows per
        task``, ``* Tasks per node`` and ``* Operator throughput`` lines; then ``Dataset throughput``; then
        muster's own figures under ``Execution (muster):`` (wall time, peak bytes in flight, each operator on its
        own, fused ones too, the actors of a pool, the time blocked on backpressure). See ``stats_text``.

        Returns:
            That text; "" when nothing has run yet (as Ray), or, for a dataset derived from a materialized one
            that has not run, the ``materialize()``'s. On the Ray engine: Ray's own ``stats()`` of the
            ``ray.data`` dataset (or iterator) that ran last.
        """
        if self._stats is not None:
            return self._stats.summary()
        if self._ray_ran is not None:
            return str(self._ray_ran.stats())
        return self._parent_stats.summary() if self._parent_stats is not None else ""

    def explain(self) -> None:
        """Print the plan: its logical operators, then the stages that run them (which transforms fuse into
        which tasks; see ``muster.data.explain``). On the Ray engine, Ray's ``explain`` of the same plan."""
        if _ray_plan.on_ray_engine():
            _ray_plan.to_ray(self, plan_only=True).explain()  # runs nothing (a join's inputs neither)
            return
        from muster.data.explain import explain_text

        print(explain_text(self._node))

    def write_datasink(self, datasink: Any, *, ray_remote_args: dict[str, Any] | None = None,
                       concurrency: int | None = None) -> None:
        """To a custom ``Datasink``, ``concurrency`` writes at once (see ``datasource.datasink.write``)."""
        if _ray_plan.on_ray_engine():
            return _ray_plan.write_datasink(self, datasink, ray_remote_args, concurrency)
        sinks.write(self._execute(), datasink, concurrency, DataContext.get_current().max_threads)


def _given(options: dict[str, Any], **more: Any) -> dict[str, Any]:
    """The options a caller set (not None, not empty): what a ``ray.data`` call is passed."""
    return {k: v for k, v in {**options, **more}.items() if v is not None and v != () and v != {}}


class MaterializedDataset(Dataset):
    """A dataset whose blocks are in memory (Ray's name): what ``materialize()`` and the in-memory
    sources (``from_items``, ``from_pandas``...) return; its transforms are plain ``Dataset`` s."""

    def __repr__(self) -> str:
        """As Ray 2.60 shows one: its column/type table holding its first 5 and last 5 rows (all, up to 10)."""
        from muster.data.dataset_repr import materialized_repr

        blocks = [b for task in self._node.op.tasks for b in task.read()] if isinstance(self._node.op, Read) else []
        return materialized_repr(blocks, self._dataset_name)


def from_blocks(blocks: list[pa.Table], name: str = "FromArrow") -> MaterializedDataset:
    from muster.data import memory_sources

    blocks = [b for b in blocks if b.num_rows] or blocks[:1] or [pa.table({})]
    return MaterializedDataset(Node(Read(name, memory_sources.block_tasks(blocks, name),
                                         RayCall.of("from_arrow", blocks))))
