"""Operators that need all of their input first: shuffle, block order, repartition, sort, groupby.

Randomness is seeded from (seed, epoch): each pass over a training shard gets
a new order, and every rank computes the same one (so the split stays exact).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future
from typing import Any, Callable, Iterator, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from muster.data import block as blk
from muster.data.plan import ReadTask
from muster.exceptions import InvalidArgumentError, MusterError


def _rng(seed: int, epoch: int) -> np.random.Generator:
    return np.random.default_rng([seed, epoch])


class _Plan:
    """One epoch's shuffle, drawn in two levels (Rao-Sandelius): every row goes to one of
    ``piles`` piles uniformly at random, keeping its order within the pile; then each pile is
    permuted on its own.  The result is a uniform random permutation of all rows, but the
    draw is a radix sort of one byte a row instead of a full permutation.  Plain numeric
    columns are scattered into their piles in one sequential read (each pile a write stream,
    about 2x faster than gathering a pile at a time with strided reads, measured); each pile
    is then permuted within cache, pile by pile, as it is consumed."""

    def __init__(self, seed: int, epoch: int, n: int, rows_per_pile: int):
        piles = 1 << max(0, min(16, (-(-n // max(1, rows_per_pile)) - 1).bit_length()))  # a power of two
        self.rows_per_block = max(1, rows_per_pile)
        self._order: np.ndarray | None = None
        self.rank: np.ndarray | None = None
        if piles == 1:
            self._order, self.bounds = np.arange(n, dtype=np.int64), np.array([0, n])
            self.within = _rng(seed, epoch).permutation(n)
            return
        dtype = np.uint8 if piles <= 256 else np.uint16
        pile = np.frombuffer(_rng(seed, epoch).bytes(n * dtype().itemsize), dtype=dtype) & dtype(piles - 1)
        counts = np.bincount(pile, minlength=piles)
        self.bounds = np.concatenate([[0], np.cumsum(counts)])
        self.rank = _slots(pile, self.bounds[:-1].astype(np.int64), np.int32 if n < 2**31 else np.int64)
        rng = _rng(seed, epoch + (1 << 32))  # each pile's own order, drawn here, off the consumer's path
        self.within = np.empty(n, dtype=np.int32)
        for a, b in zip(self.bounds[:-1], self.bounds[1:]):
            self.within[a:b] = rng.permutation(int(b - a))

    @property
    def order(self) -> np.ndarray:
        """Row indices grouped by pile (the inverse of ``rank``), for the general gather."""
        if self._order is None:
            assert self.rank is not None
            self._order = np.empty_like(self.rank)
            self._order[self.rank] = np.arange(len(self.rank), dtype=self.rank.dtype)
        return self._order

    def gather(self, table: pa.Table) -> Iterator[pa.Table]:
        """``table``'s rows in this plan's order, one block a pile: numeric columns are first
        scattered into their piles (straight from their chunks), other columns taken pile by
        pile; each pile is then permuted within itself (while it is in cache)."""
        found = [_numpy_chunks(c) for c in table.columns]
        numeric = all(c is not None for c in found)
        if not numeric:
            table = table.combine_chunks()  # a take from many chunks would combine them on every call
        elif self.rank is not None:
            columns = _scatter([c for c in found if c is not None], self.rank)
        else:  # one pile: permuted whole
            columns = [c[0] if len(c) == 1 else np.concatenate(c) for c in found if c is not None]
        for i in range(len(self.bounds) - 1):
            a, b = self.bounds[i], self.bounds[i + 1]
            if a == b:
                continue
            within = self.within[a:b]
            if numeric:  # numpy's take is the fastest gather for plain numbers
                pile = pa.Table.from_arrays([np.take(c[a:b], within) for c in columns], schema=table.schema)
            else:
                pile = table.take(pa.array(self.order[a:b])).take(pa.array(within))
            yield from _even_slices(pile, self.rows_per_block)


def _even_slices(table: pa.Table, most: int) -> Iterator[pa.Table]:
    """``table`` in the fewest zero-copy slices of at most ``most`` rows, of (nearly) equal sizes: a pile
    drawn a little over the target (piles vary around their mean) gives two half blocks, not one too big."""
    parts = -(-table.num_rows // most)
    cuts = [table.num_rows * i // parts for i in range(parts + 1)]
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        yield table.slice(lo, hi - lo)


#: Rows from which a scatter is split between two threads (below, a thread costs more than it saves).
_SCATTER_SPLIT_ROWS = 1 << 20


def _scatter(columns: list[list[np.ndarray]], rank: np.ndarray) -> list[np.ndarray]:
    """Each column (a list of chunks) with row ``i`` moved to slot ``rank[i]``, into memory from
    Arrow's pool (which keeps freed pages: the next epoch's scatter does not fault them in again,
    as numpy's own large allocations do).  A large scatter is split in two halves of the rows, one
    on a helper thread: numpy releases the GIL while it copies, so on two cores it takes about
    half the time (10M rows, measured)."""
    out = [np.frombuffer(pa.allocate_buffer(len(rank) * c[0].itemsize), dtype=c[0].dtype) for c in columns]

    def move(lo: int, hi: int) -> None:
        for chunks, o in zip(columns, out):
            start = 0
            for chunk in chunks:
                a, b = max(lo, start), min(hi, start + len(chunk))
                if a < b:
                    o[rank[a:b]] = chunk[a - start:b - start]
                start += len(chunk)

    n = len(rank)
    if n < _SCATTER_SPLIT_ROWS or (os.cpu_count() or 1) < 2:
        move(0, n)
        return out
    second_half = _on_a_thread(lambda: move(n // 2, n), "muster-data-scatter")
    move(0, n // 2)
    second_half.result()  # its error, if any, raised here
    return out


_T = TypeVar("_T")


def _on_a_thread(fn: Callable[[], _T], name: str) -> Future[_T]:
    """``fn()`` started on a new daemon thread; its result or error comes through the future."""
    future: Future[_T] = Future()

    def run() -> None:
        try:
            future.set_result(fn())
        except BaseException as exc:  # seen by whoever waits on the future
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


def _slots(pile: np.ndarray, starts: np.ndarray, dtype: Any, chunk: int = 1 << 16) -> np.ndarray:
    """Each row's slot when rows are grouped by pile in input order (``starts``: each pile's
    first slot).  Counted a cache-sized chunk at a time: about 2x faster than inverting one
    big stable argsort, whose scatter misses cache on every row (measured, 10M rows)."""
    piles = len(starts)
    slots = np.empty(len(pile), dtype=dtype)
    base = starts.copy()
    step = np.arange(chunk, dtype=np.int64)
    for s in range(0, len(pile), chunk):
        part = pile[s:s + chunk]
        counts = np.bincount(part, minlength=piles)
        first = np.cumsum(counts) - counts  # each pile's first position in this chunk's sorted order
        slots[s:s + len(part)][np.argsort(part, kind="stable")] = np.repeat(base - first, counts) + step[:len(part)]
        base += counts
    return slots


def _numpy_chunks(col: pa.ChunkedArray) -> list[np.ndarray] | None:
    """A column of plain numbers without nulls, as its chunks in numpy (no copy); otherwise None."""
    if col.num_chunks == 0 or col.null_count or not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
        return None
    return [chunk.to_numpy() for chunk in col.chunks]


class _Plans:
    """Seeded per-epoch plans; epoch e+1's is drawn on a background thread once epoch e's rows
    are all gathered (so the draw never competes with the epoch it follows)."""

    def __init__(self, seed: int):
        self.seed = seed
        self._next: tuple[int, int, Future[_Plan]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"seed": self.seed}

    def __setstate__(self, state: dict[str, Any]) -> None:
        _Plans.__init__(self, state["seed"])

    def get(self, epoch: int, n: int, rows: int) -> _Plan:
        ahead = self._next
        return ahead[2].result() if ahead is not None and ahead[:2] == (epoch, n) else _Plan(self.seed, epoch, n, rows)

    def draw_ahead(self, epoch: int, n: int, rows: int) -> None:
        plan = _on_a_thread(lambda: _Plan(self.seed, epoch, n, rows), "muster-data-next-shuffle")
        self._next = (epoch, n, plan)

    def keep(self, epoch: int, n: int, plan: _Plan) -> None:
        """Use ``plan`` again for the next pass (a shuffle whose order is the same every pass)."""
        done: Future[_Plan] = Future()
        done.set_result(plan)
        self._next = (epoch, n, done)


def _block_rows(table: pa.Table, most: int | None = None) -> int:
    """Rows per output block for ``table``: at most ``most`` (``DataContext.target_block_rows``), and fewer
    where those would pass ``target_max_block_size`` bytes (rows of images: a few thousand, not 65,536)."""
    from muster.data.context import DataContext
    from muster.data.memory_sources import rows_per_block

    most = DataContext.get_current().target_block_rows if most is None else most
    return min(most, rows_per_block(-(-blk.nbytes(table) // table.num_rows))) if table.num_rows else most


def random_shuffle(seed: int, rows_per_block: int, per_epoch: bool = True
                   ) -> Callable[[list[pa.Table], int], Iterator[pa.Table]]:
    """A full, uniform shuffle of all rows, seeded from (seed, epoch), or from seed alone (the same
    order every pass) when not ``per_epoch``; blocks (of at most ``rows_per_block`` rows and
    ``target_max_block_size`` bytes) are gathered lazily."""
    plans = _Plans(seed)

    def run(blocks: list[pa.Table], epoch: int) -> Iterator[pa.Table]:
        table = blk.concat(blocks)
        if table.num_rows == 0:
            yield table
            return
        rows = _block_rows(table, rows_per_block)
        e = epoch if per_epoch else 0
        plan = plans.get(e, table.num_rows, rows)
        yield from plan.gather(table)
        if per_epoch:
            plans.draw_ahead(e + 1, table.num_rows, rows)
        else:
            plans.keep(e, table.num_rows, plan)

    return run


def randomize_block_order(seed: int, per_epoch: bool = True) -> Callable[[list[pa.Table], int], list[pa.Table]]:
    def run(blocks: list[pa.Table], epoch: int) -> list[pa.Table]:
        return [blocks[i] for i in _rng(seed, epoch if per_epoch else 0).permutation(len(blocks))]

    return run


def randomize_reads(seed: int, per_epoch: bool = True
                    ) -> Callable[[tuple[ReadTask, ...], int], tuple[ReadTask, ...]]:
    def run(tasks: tuple[ReadTask, ...], epoch: int) -> tuple[ReadTask, ...]:
        return tuple(tasks[i] for i in _rng(seed, epoch if per_epoch else 0).permutation(len(tasks)))

    return run


def then(first: Callable[[list[pa.Table], int], Any], second: Callable[[list[pa.Table], int], Any]
         ) -> Callable[[list[pa.Table], int], Any]:
    """``second`` over the blocks ``first`` makes, in one operator."""
    return lambda blocks, epoch: second(list(first(blocks, epoch)), epoch)


def repartition(n: int) -> Callable[[list[pa.Table], int], list[pa.Table]]:
    def run(blocks: list[pa.Table], _epoch: int) -> list[pa.Table]:
        table = blk.concat(blocks)
        bounds = np.linspace(0, table.num_rows, n + 1).astype(int)
        return [table.slice(int(a), int(b - a)) for a, b in zip(bounds[:-1], bounds[1:])]

    return run


def repartition_by(keys: list[str], n: int, sort: bool) -> Callable[[list[pa.Table], int], list[pa.Table]]:
    """``n`` blocks, all rows of one key value in the same block (Ray's ``repartition(keys=)``): the
    distinct keys, in ascending order, are dealt round-robin to the blocks; each block keeps its rows'
    input order, or is sorted by the keys with ``sort``."""
    def run(blocks: list[pa.Table], _epoch: int) -> list[pa.Table]:
        table = blk.concat(blocks)
        missing = [k for k in keys if k not in table.column_names]
        if missing and table.num_rows:
            raise InvalidArgumentError(f"repartition(keys={keys!r}): no column {missing[0]!r}; the columns "
                                       f"are {table.column_names}.")
        if not table.num_rows:
            return [table]
        order = pc.sort_indices(table, [(k, "ascending") for k in keys]).to_numpy()
        change = np.zeros(len(order), dtype=bool)
        change[0] = True
        for k in keys:
            col = table.column(k).take(order).to_numpy(zero_copy_only=False)
            change[1:] |= col[1:] != col[:-1]
        block_of = np.empty(len(order), dtype=np.int64)
        block_of[order] = (np.cumsum(change) - 1) % n
        out = [table.take(np.flatnonzero(block_of == i)) for i in range(n)]
        return [b.sort_by([(k, "ascending") for k in keys]) for b in out] if sort else out

    return run


def blocks_of(rows: int) -> Callable[[list[pa.Table], int], list[pa.Table]]:
    """Blocks of ``rows`` rows each, in order (the last one holds the rest): small blocks are
    combined, big ones split."""
    def run(blocks: list[pa.Table], _epoch: int) -> list[pa.Table]:
        table = blk.concat(blocks)
        return blk.split_rows(table, rows) if table.num_rows else [table]

    return run


def sort(keys: list[str], descending: list[bool], boundaries: list[Any] | None = None
         ) -> Callable[[list[pa.Table], int], list[pa.Table]]:
    """Rows ordered by ``keys``; with ``boundaries`` (values of the first key), one block per range between
    them (as Ray's range partitions: ``len(boundaries) + 1`` blocks, empty ones kept), else blocks of the
    usual size."""
    order = [(k, "descending" if d else "ascending") for k, d in zip(keys, descending)]

    def run(blocks: list[pa.Table], _epoch: int) -> list[pa.Table]:
        table = blk.concat(blocks)
        for k in keys:
            if table.num_columns and k not in table.column_names:
                raise InvalidArgumentError(f"sort(key={k!r}): no such column; the dataset has {table.column_names}.")
        if not table.num_rows:
            return [table]
        ordered = table.sort_by(order)  # sliced into blocks (no copy), so what follows runs on several at once
        if boundaries is not None:
            return _at_boundaries(ordered, keys[0], descending[0], boundaries)
        return blk.split_rows(ordered, _block_rows(ordered))

    return run


def _at_boundaries(ordered: pa.Table, key: str, descending: bool, boundaries: list[Any]) -> list[pa.Table]:
    """``ordered`` (sorted by ``key``) cut where ``key`` crosses each boundary; descending, the highest range
    first. Nulls, sorted last, stay in the last block."""
    column = ordered.column(key)
    if descending:
        cuts = [pc.sum(pc.greater_equal(column, b)).as_py() or 0 for b in reversed(boundaries)]
    else:
        cuts = [pc.sum(pc.less(column, b)).as_py() or 0 for b in boundaries]
    edges = [0, *cuts, ordered.num_rows]
    return [ordered.slice(a, b - a) for a, b in zip(edges, edges[1:])]


#: Ray's aggregation names -> pyarrow's
_PA_AGG = {"count": "count", "sum": "sum", "mean": "mean", "min": "min", "max": "max", "std": "stddev",
           "unique": "distinct"}


def _pa_spec(agg: Any) -> tuple[Any, ...]:
    """``agg`` (a built-in of :mod:`muster.data.aggregate`) as a pyarrow grouped aggregation."""

    skip = bool(agg.options.get("ignore_nulls", True))
    if agg.method == "count" and agg.on is None:
        return ([], "count_all")
    if agg.method in ("count", "unique"):
        options: Any = pc.CountOptions(mode="only_valid" if skip else "all")
    elif agg.method == "std":
        options = pc.VarianceOptions(ddof=int(agg.options.get("ddof", 1)), skip_nulls=skip)
    else:  # an empty column (or an unskipped null) gives None, as in Ray
        options = pc.ScalarAggregateOptions(skip_nulls=skip)
    return (agg.on, _PA_AGG[agg.method], options)


def aggregate(keys: list[str], aggs: list[Any],
              every_column: bool = False) -> Callable[[list[pa.Table], int], list[pa.Table]]:
    """``aggs``: :mod:`muster.data.aggregate` objects, each giving column ``agg.name``; ``keys`` may be
    empty (the whole dataset). ``every_column``: ``aggs[0]`` applies to every column but the keys."""

    def run(blocks: list[pa.Table], _epoch: int) -> list[pa.Table]:
        table = blk.concat(blocks)
        todo = aggs
        if every_column:
            template = aggs[0]
            todo = [type(template)(c, **template.options) for c in table.column_names if c not in keys]
        for k in keys:
            if k not in table.column_names:
                raise InvalidArgumentError(f"groupby({k!r}): no column {k!r}; the dataset has {table.column_names}.")
        for a in todo:
            if a.on and a.on not in table.column_names:
                raise InvalidArgumentError(f"{a.name}: no column {a.on!r}; the dataset has {table.column_names}. "
                                           "Aggregate one of those (its `on`).")
        names = _distinct([a.name for a in todo])  # two aggregations of one name: "count(v)", "count(v)_2"
        if not keys:
            return [pa.table({n: [_whole(table, a)] for a, n in zip(todo, names)})]
        builtin = [(a, n) for a, n in zip(todo, names) if a.method != "custom"]
        stds = [(a, n) for a, n in builtin if a.method == "std"]  # each with its group's count of values
        valid = pc.CountOptions(mode="only_valid")
        specs = [_pa_spec(a) for a, _ in builtin] + [(a.on, "count", valid) for a, _ in stds]
        grouped = table.group_by(keys, use_threads=False).aggregate(specs)  # type: ignore[arg-type]
        counts = [f"__count_{i}" for i in range(len(stds))]
        results = [n for _, n in builtin] + counts  # by position: two specs of one column get one pyarrow name
        keys_first = grouped.column_names[:len(keys)] == keys
        grouped = grouped.rename_columns(keys + results if keys_first else results + keys)
        for (_, n), c in zip(stds, counts):  # too few values for ddof: NaN, as Ray's (None: no values at all)
            i = grouped.column_names.index(n)
            nan = pc.and_(pc.is_null(grouped[n]), pc.greater(grouped[c], 0))
            grouped = grouped.set_column(i, n, pc.if_else(nan, pa.scalar(float("nan")), grouped[n]))
        grouped = grouped.sort_by([(k, "ascending") for k in keys])
        custom = [(a, n) for a, n in zip(todo, names) if a.method == "custom"]
        if custom:
            groups = _groups(table, keys)
            for a, n in custom:
                grouped = grouped.append_column(n, pa.array([a.run(key, part) for key, part in groups]))
        from muster.data.aggregate import as_rays_python_path

        return [as_rays_python_path(grouped.select(keys + names), todo)]

    return run


def aggregate_schema(keys: list[str], aggs: list[Any], every_column: bool = False
                     ) -> Callable[[pa.Schema], pa.Schema | None] | None:
    """The schema :func:`aggregate` gives for an input of a known schema, as Ray's ``Aggregate.infer_schema``
    knows it unread: the keys and one column per aggregation, where every aggregation is one whose type Ray
    declares (``Count``, ``Sum``, ``Min``, ``Max``, ``Mean``, ``Std``; not ``AbsMax``, typed here by its values) and
    there are keys; else None.
    The types are those of the aggregation of an empty input, so they are the ones the run gives."""
    from muster.data import aggregate as agg

    declared = (agg.Count, agg.Sum, agg.Min, agg.Max, agg.Mean, agg.Std)
    if not keys or not all(type(a) in declared for a in aggs):
        return None
    run = aggregate(keys, aggs, every_column)

    def schema(input_schema: pa.Schema) -> pa.Schema | None:
        try:
            return run([input_schema.empty_table()], 0)[0].schema
        except (MusterError, pa.ArrowException):  # a key or column missing, a type it cannot aggregate
            return None

    return schema


def _distinct(names: list[str]) -> list[str]:
    """``names`` with the second of a name and after suffixed ``_2``, ``_3``... (Ray's rule)."""
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n}_{seen[n]}")
    return out


def _groups(table: pa.Table, keys: list[str]) -> list[tuple[Any, pa.Table]]:
    """The table's groups in ascending key order: (the key, or a tuple of keys, and the group's rows)."""
    if table.num_rows == 0:
        return []
    table = table.sort_by([(k, "ascending") for k in keys])
    key_cols = [table.column(k).to_numpy(zero_copy_only=False) for k in keys]
    change = np.zeros(table.num_rows, dtype=bool)
    change[0] = True
    for col in key_cols:
        change[1:] |= col[1:] != col[:-1]
    starts = list(np.flatnonzero(change)) + [table.num_rows]
    out = []
    for a, b in zip(starts[:-1], starts[1:]):
        key = tuple(col[a].item() if hasattr(col[a], "item") else col[a] for col in key_cols)
        out.append((key[0] if len(key) == 1 else key, table.slice(int(a), int(b - a))))
    return out


def _whole(table: pa.Table, agg: Any) -> Any:

    if agg.method == "custom":
        return agg.run(None, table)
    if agg.method == "count" and agg.on is None:
        return table.num_rows
    on, name, options = _pa_spec(agg)
    column = table.column(on)
    if agg.method == "unique":
        values = pc.unique(column)
        return [v for v in values.to_pylist() if v is not None or not agg.options.get("ignore_nulls", True)]
    if pa.types.is_null(column.type) and agg.method != "count":
        return None  # a column of nulls only: nothing to aggregate, as an empty one
    value = getattr(pc, name)(column, options=options).as_py()
    if value is None and agg.method == "std" and pc.count(column).as_py() > 0:
        return float("nan")  # too few values for ddof: NaN, as Ray's (None: no values at all)
    return value


def group_function(fn: Any, args: tuple, kwargs: dict[str, Any], ctor_args: tuple, ctor_kwargs: dict[str, Any]
                   ) -> Callable[[Any], Any]:
    """``batch -> fn(batch, *args, **kwargs)``; a callable class is built once, on first use."""
    built: list[Any] = []

    def call(batch: Any) -> Any:
        if isinstance(fn, type):
            if not built:
                built.append(fn(*ctor_args, **ctor_kwargs))
            return built[0](batch, *args, **kwargs)
        return fn(batch, *args, **kwargs)

    return call


def group_blocks(keys: list[str]) -> Callable[[list[pa.Table], int], list[pa.Table]]:
    """One block per group of ``keys`` (none: one block of every row), in ascending key order: what
    ``map_groups`` maps, as Ray's shuffle by the keys before its ``map_batches`` co-locates each group."""
    def run(blocks: list[pa.Table], _epoch: int) -> list[pa.Table]:
        return [part for _key, part in _groups(blk.concat(blocks), keys)]

    return run


def map_each_block(fn: Callable[[Any], Any], batch_format: str, named: Any = None
                   ) -> Callable[[list[pa.Table], int], list[pa.Table]]:
    """``fn`` over each block (a group, from ``group_blocks``) as a ``batch_format`` batch, in turn in this
    process: ``map_groups``' map."""
    from muster.data.plan import _guard, fn_name

    named = fn if named is None else named

    def run(blocks: list[pa.Table], _epoch: int) -> list[pa.Table]:
        out = []
        for part in blocks:
            batch = blk.to_batch(part, batch_format)
            result = _guard("MapGroups", named, part, lambda: fn(batch))
            out.append(blk.from_batch(result, f"map_groups({fn_name(named)})"))
        return out

    return run
