"""The logical plan: a tree of nodes, each holding one operator.

* ``Read``      -- a list of read tasks (each returns blocks), made by ``sources``;
* ``Transform`` -- a per-block function (map, map_batches, filter, column ops);
                   consecutive transforms fuse into the task that made the block;
* ``AllToAll``  -- needs every upstream block first (shuffle, sort, repartition);
* ``Limit``, ``Union``;
* ``Join``      -- its two inputs' rows joined on key columns, once both are gathered;
* ``Zip``       -- its inputs' columns side by side, once every input is gathered.

Nothing runs until a dataset is consumed; ``execution`` walks this tree.
Reads, transforms and all-to-all operators also carry ``ray``: the same
operator as ``ray.data`` calls (a ``RayCall``), or a sentence saying why it
has none; ``_ray_plan`` builds a ``ray.data.Dataset`` from them on the Ray engine.
"""

from __future__ import annotations

import inspect
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import pyarrow as pa

from muster.data import block as blk
from muster.data.context import DataContext
from muster.data.exceptions import DataError, DataTypeError, UserFunctionError
from muster.exceptions import InvalidArgumentError, InvalidTypeError, MusterError

BlockFn = Callable[[pa.Table], list[pa.Table]]


@dataclass(frozen=True)
class RayCall:
    """An operator as ``ray.data`` spells it: ``steps`` applied in turn, each ``(name, args, kwargs)``.

    A source's first step names a ``ray.data`` function (``read_parquet``); every other step
    is a method of what the previous one returned (``groupby`` then ``sum``)."""

    steps: tuple[tuple[str, tuple, dict], ...]

    @staticmethod
    def of(name: str, *args: Any, **kwargs: Any) -> "RayCall":
        return RayCall(((name, args, kwargs),))

    def then(self, name: str, *args: Any, **kwargs: Any) -> "RayCall":
        return RayCall((*self.steps, (name, args, kwargs)))

    def adding(self, **kwargs: Any) -> "RayCall":
        """The same call with ``kwargs`` added to its last step's keywords."""
        name, args, given = self.steps[-1]
        return RayCall((*self.steps[:-1], (name, args, {**given, **kwargs})))


#: What ``ray`` holds on an operator: its ``ray.data`` call, or why it has none (and what to do).
RayEquivalent = RayCall | str | None


@dataclass(frozen=True)
class ReadTask:
    """One unit of reading: ``read()`` returns blocks; ``label`` names what it reads (a file)."""

    read: Callable[[], list[pa.Table]]
    label: str
    size: int = 0
    files: tuple[str, ...] = ()  # the files it reads (``Dataset.input_files``)
    rows: int | None = None  # the rows it makes, when known before reading (``count()`` adds them up)
    schema: pa.Schema | None = None  # its blocks' schema, when known before reading (``repr``, ``schema()``)
    count_rows: Callable[[], int] | None = None  # counts its rows from metadata, reading no data (``count()``)


@dataclass(frozen=True)
class Read:
    name: str
    tasks: tuple[ReadTask, ...]
    ray: RayEquivalent = field(default=None, compare=False)
    #: for a source that can filter its scan (``read_parquet``): the same read with a ``pyarrow.compute``
    #: filter added to its scan, or None when the filter does not fit the read's columns and types
    push_filter: Callable[[Any], "Read | None"] | None = field(default=None, compare=False)
    filters: tuple[str, ...] = ()  # the filter operators pushed into its scan (``Filter(col('a') > 3)``)

    def known_schema(self) -> pa.Schema | None:
        """The blocks' schema, when every task knows the same one before reading (a Parquet read: its footer's);
        else None. ``repr`` and ``Dataset.schema()`` answer from it."""
        first = self.tasks[0].schema if self.tasks else None  # compared, not hashed: tensor types are unhashable
        return first if first is not None and all(t.schema is not None and t.schema.equals(first)
                                                  for t in self.tasks) else None


@dataclass(frozen=True)
class Transform:
    name: str
    fn: BlockFn
    ray: RayEquivalent = field(default=None, compare=False)
    keeps_columns: bool = False  # its blocks have its input's columns (a filter), so a known schema stays known
    #: a projection that only selects or renames (``select_columns``, ``rename_columns``): for the columns a
    #: filter above it reads, each one's name below it, or None when the filter cannot move below it
    filter_names: Callable[[frozenset[str]], dict[str, str] | None] | None = field(default=None, compare=False)
    #: a projection that keeps every row (``select_columns``, ``rename_columns``, a ``with_column(s)`` of columns,
    #: literals and operators): its output's schema from its input's (None where it would fail), so a schema and
    #: row count known unread stay known, as Ray infers them
    schema_of: Callable[[pa.Schema], pa.Schema | None] | None = field(default=None, compare=False)

    @property
    def on_actors(self) -> bool:
        """A callable class with ``concurrency=``: it runs in an actor pool, a stage of its own."""
        return isinstance(self.fn, MapBatches) and self.fn.uses_actors


@dataclass(frozen=True)
class AllToAll:
    """``fn(blocks, epoch)`` -> blocks (a list, or an iterator that makes them as they are
    consumed); ``epoch`` seeds per-epoch randomness."""

    name: str
    fn: Callable[[list[pa.Table], int], list[pa.Table] | Iterator[pa.Table]]
    reorders_reads: Callable[[tuple[ReadTask, ...], int], tuple[ReadTask, ...]] | None = None
    ray: RayEquivalent = field(default=None, compare=False)
    keeps_rows: bool = False  # every input row comes out once, columns unchanged (shuffle, sort, repartition)
    passes_filters: bool = False  # a filter before it gives the same result (sort, repartition, unseeded shuffle)
    #: its output's schema from its input's, when known before running (a group-by's built-in aggregations)
    schema_of: Callable[[pa.Schema], pa.Schema | None] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Limit:
    name: str
    n: int


@dataclass(frozen=True)
class Union:
    """The inputs' blocks one after another; with ``weights``, interleaved by ``mix.mix_blocks`` (``Dataset.mix``)."""

    name: str
    weights: tuple[float, ...] | None = None
    stop_on_shortest: bool = False


@dataclass(frozen=True)
class Join:
    """``Dataset.join``: ``fn(left blocks, right blocks)`` -> the joined blocks, once both inputs are gathered.
    ``join_type`` is Ray's (``inner``, ``left_outer``, ...), ``keys``/``right_keys`` each input's key columns;
    ``ray``: Ray's ``join`` call with its arguments but the right input (``Dataset.explain`` on the Ray engine)."""

    name: str
    join_type: str
    keys: tuple[str, ...]
    right_keys: tuple[str, ...]
    fn: Callable[[list[pa.Table], list[pa.Table]], list[pa.Table]] = field(compare=False)
    ray: RayEquivalent = field(default=None, compare=False)

    def schema(self, left: pa.Schema | None, right: pa.Schema | None) -> pa.Schema | None:
        """The joined blocks' schema for inputs of these schemas (pyarrow's join of empty tables, as Ray infers
        it); None when either is unknown, or they would not join (a key missing, columns clashing)."""
        if left is None or right is None:
            return None
        try:
            return self.fn([left.empty_table()], [right.empty_table()])[0].schema
        except (MusterError, pa.ArrowException):
            return None


@dataclass(frozen=True)
class Zip:
    """``Dataset.zip``: ``fn(each input's blocks)`` -> the blocks holding every input's columns side by side, once
    every input is gathered (Ray's ``zip``, lazy as Ray's)."""

    name: str
    fn: Callable[[list[list[pa.Table]]], list[pa.Table]] = field(compare=False)

    def schema(self, inputs: list[pa.Schema | None]) -> pa.Schema | None:
        """The zipped blocks' schema for inputs of these schemas; None when one is unknown."""
        if any(s is None for s in inputs):
            return None
        try:
            return self.fn([[s.empty_table()] for s in inputs if s is not None])[0].schema
        except (MusterError, pa.ArrowException):
            return None


Operator = Read | Transform | AllToAll | Limit | Union | Join | Zip


@dataclass(frozen=True)
class Node:
    op: Operator
    inputs: tuple["Node", ...] = field(default=())

    def then(self, op: Operator) -> "Node":
        return Node(op, (self,))

    def files_read(self) -> list[str]:
        """The files the reads of this plan read, each once, in order (``Dataset.input_files``)."""
        found: dict[str, None] = {}
        todo: list[Node] = [self]
        while todo:
            node = todo.pop()
            if isinstance(node.op, Read):
                found.update(dict.fromkeys(f for task in node.op.tasks for f in task.files))
            todo.extend(reversed(node.inputs))
        return list(found)

    def known_rows(self, from_metadata: bool = False) -> int | None:
        """The rows this plan makes, when known before running it (as Ray infers them): a read whose tasks
        all know theirs, through operators that keep every row (shuffle, sort, repartition) and ``limit``;
        else None. ``from_metadata``: tasks that can count theirs from the files' metadata (Parquet footers)
        do so."""
        if isinstance(self.op, Read):
            counts = [t.count_rows() if t.rows is None and from_metadata and t.count_rows is not None else t.rows
                      for t in self.op.tasks]
            return None if any(n is None for n in counts) else sum(n or 0 for n in counts)
        if isinstance(self.op, (Limit, AllToAll)) and (not isinstance(self.op, AllToAll) or self.op.keeps_rows):
            rows = self.inputs[0].known_rows(from_metadata)
            return rows if rows is None or not isinstance(self.op, Limit) else min(rows, self.op.n)
        if isinstance(self.op, Transform) and self.op.schema_of is not None:
            return self.inputs[0].known_rows(from_metadata)
        return None

    def known_schema(self) -> pa.Schema | None:
        """The schema this plan's blocks have, when known before running it (as Ray infers it): a read's
        (``Read.known_schema``), through ``limit``, the operators that keep every row, a filter, a union
        of inputs of one schema, a join or zip of inputs of known schemas, and a group-by's built-in
        aggregations (``AllToAll.schema_of``); else None."""
        if isinstance(self.op, Read):
            return self.op.known_schema()
        if isinstance(self.op, Zip):
            return self.op.schema([n.known_schema() for n in self.inputs])
        if isinstance(self.op, (AllToAll, Transform)) and self.op.schema_of is not None:
            known = self.inputs[0].known_schema()
            return None if known is None else self.op.schema_of(known)
        if isinstance(self.op, Join):
            return self.op.schema(self.inputs[0].known_schema(), self.inputs[1].known_schema())
        if isinstance(self.op, Union):
            schemas = [n.known_schema() for n in self.inputs]
            return schemas[0] if schemas and all(s is not None and s.equals(schemas[0]) for s in schemas) else None
        if isinstance(self.op, Limit) or (isinstance(self.op, AllToAll) and self.op.keeps_rows) or \
                (isinstance(self.op, Transform) and self.op.keeps_columns):
            return self.inputs[0].known_schema()
        return None


def fn_name(fn: Any) -> str:
    """``fn``'s name as Ray's operator names show it: ``<lambda>``, ``my_fn``, ``Model.predict`` (without
    the ``outer.<locals>.`` of a function or class defined in a function)."""
    name = fn.__qualname__ if inspect.isclass(fn) else getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return name.rsplit("<locals>.", 1)[-1]


def _guard(op: str, fn: Any, block: pa.Table | None, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except DataError:
        raise
    except Exception as exc:
        hint = (" The batch is a zero-copy, read-only view (Ray's default): pass zero_copy_batch=False to "
                "map_batches for a writable copy, or return new arrays." if op == "MapBatches" and
                isinstance(exc, ValueError) and "read-only" in str(exc) else "")
        raise UserFunctionError(
            f"{op} failed in {fn_name(fn)}: {type(exc).__name__}: {exc}.{hint} "
            f"The failing batch's first row: {blk.first_row(block)}"
        ) from exc


# -- row-wise -------------------------------------------------------------------
def _map_rows(block: pa.Table, fn: Callable[..., Any], args: tuple, kwargs: dict, named: Any) -> list[pa.Table]:
    rows = list(blk.iter_rows(block))
    out = _guard("Map", named, block, lambda: [fn(r, *args, **kwargs) for r in rows])
    return [blk.rows_to_block(out, f"map({fn_name(named)})")]


def _flat_map_rows(block: pa.Table, fn: Callable[..., Any], args: tuple, kwargs: dict, named: Any) -> list[pa.Table]:
    rows = list(blk.iter_rows(block))
    out = _guard("FlatMap", named, block, lambda: [x for r in rows for x in fn(r, *args, **kwargs)])
    return [blk.rows_to_block(out, f"flat_map({fn_name(named)})")]


def _filter_rows(block: pa.Table, fn: Callable[..., Any], args: tuple, kwargs: dict, named: Any) -> list[pa.Table]:
    rows = list(blk.iter_rows(block))
    keep = _guard("Filter", named, block, lambda: [bool(fn(r, *args, **kwargs)) for r in rows])
    return [block.filter(pa.array(keep, type=pa.bool_()))] if rows else [block]


#: ``map``, ``flat_map`` and ``filter``: the row-wise ops, by name (a callable class runs them through
#: :class:`MapBatches`, which builds its instances, in threads or an actor pool)
ROW_OPS: dict[str, Callable[[pa.Table, Callable[..., Any], tuple, dict, Any], list[pa.Table]]] = {
    "map": _map_rows, "flat_map": _flat_map_rows, "filter": _filter_rows,
}


def map_rows(fn: Callable[[dict], dict], args: tuple, kwargs: dict) -> BlockFn:
    return lambda block: _map_rows(block, fn, args, kwargs, fn)


def flat_map_rows(fn: Callable[[dict], list], args: tuple, kwargs: dict) -> BlockFn:
    return lambda block: _flat_map_rows(block, fn, args, kwargs, fn)


def filter_rows(fn: Callable[[dict], bool], args: tuple, kwargs: dict) -> BlockFn:
    return lambda block: _filter_rows(block, fn, args, kwargs, fn)


# -- batch-wise -----------------------------------------------------------------
class MapBatches:
    """``map_batches``: a function, or a callable class (built once per executing thread, or once
    per actor of a pool when ``concurrency`` is given: see ``actor_pool``)."""

    def __init__(self, fn: Any, batch_size: int | None, batch_format: str, fn_args: tuple, fn_kwargs: dict,
                 ctor_args: tuple, ctor_kwargs: dict, zero_copy: bool = False,
                 concurrency: int | tuple[int, int] | None = None, num_cpus: float | None = None,
                 num_gpus: float | None = None, rows: str | None = None, bundle_rows: int | None = None):
        self.fn, self.batch_size, self.batch_format = fn, batch_size, batch_format
        # a batch_size the caller gave: smaller blocks are combined until they hold it, as Ray bundles them
        # (muster's default of 1024, Ray's "whole blocks", combines none)
        self.bundle_rows = bundle_rows
        self.rows = rows  # "map", "flat_map" or "filter": a row-wise op of a callable class
        self.fn_args, self.fn_kwargs = fn_args, fn_kwargs
        self.ctor_args, self.ctor_kwargs = ctor_args, ctor_kwargs
        self.concurrency, self.num_cpus, self.num_gpus = concurrency, num_cpus, num_gpus
        self.zero_copy = zero_copy  # False: the function gets writable copies of read-only arrays
        self.is_class = inspect.isclass(fn)
        self._local: threading.local | None = None

    @property
    def uses_actors(self) -> bool:
        """A callable class with ``concurrency=``: it runs in a pool of actors."""
        return self.is_class and self.concurrency is not None

    @property
    def task_limit(self) -> int | None:
        """For a function with ``concurrency=``: at most that many of its tasks at once."""
        if self.is_class or self.concurrency is None:
            return None
        return self.concurrency if isinstance(self.concurrency, int) else self.concurrency[1]

    def options(self) -> list[str]:
        """Its task options as given: ``["concurrency=2", "num_cpus=1"]``."""
        parts = [f"concurrency={self.concurrency!r}"] if self.concurrency is not None else []
        return parts + [f"{k}={v:g}" for k, v in (("num_cpus", self.num_cpus), ("num_gpus", self.num_gpus))
                        if v is not None]

    def described(self) -> str:
        """How a request of this op is named in messages: ``map_batches(double, num_cpus=2)``."""
        return f"{self.rows or 'map_batches'}({', '.join([fn_name(self.fn), *self.options()])})"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_local"] = None  # instances stay in the process that built them
        return state

    def build(self) -> Any:
        """A new instance of the callable class (the function itself for a function)."""
        if not self.is_class:
            return self.fn
        return _guard("MapBatches (constructor)", self.fn, None, lambda: self.fn(*self.ctor_args, **self.ctor_kwargs))

    def _callable(self) -> Callable[..., Any]:
        if not self.is_class:
            return self.fn  # type: ignore[no-any-return]
        if self._local is None:
            self._local = threading.local()
        inst = getattr(self._local, "inst", None)
        if inst is None:
            inst = self._local.inst = self.build()
        return inst  # type: ignore[no-any-return]

    def __call__(self, block: pa.Table) -> list[pa.Table]:
        return self.apply(block, self._callable())

    def apply(self, block: pa.Table, fn: Callable[..., Any]) -> list[pa.Table]:
        """``fn`` (this op's function, or an instance of its class) over ``block``, batch by batch."""
        if self.rows is not None:
            return ROW_OPS[self.rows](block, fn, self.fn_args, self.fn_kwargs, self.fn)
        where = f"map_batches({fn_name(self.fn)})"
        out: list[pa.Table] = []
        for part in blk.split_rows(block, self.batch_size or 0):
            batch = blk.to_batch(part, self.batch_format)
            if not self.zero_copy:
                batch = blk.writable(batch)
            result = _guard("MapBatches", self.fn, part, lambda: fn(batch, *self.fn_args, **self.fn_kwargs))
            if inspect.isgenerator(result):
                out.extend(blk.from_batch(r, where) for r in _guard("MapBatches", self.fn, part, lambda: list(result)))
            else:
                out.append(blk.from_batch(result, where))
        return blk.gathered(out, DataContext.get_current().target_max_block_size)


class ColumnMap(MapBatches):
    """A column operation (``drop_columns(["a"], num_cpus=2)``...) given Ray's task options: its block function
    runs as ``map_batches`` runs a function, ``concurrency=`` bounding its tasks, ``num_cpus``/``num_gpus``
    what each holds."""

    def __init__(self, fn: BlockFn, call: str, arg: str, concurrency: int | tuple[int, int] | None,
                 num_cpus: float | None, num_gpus: float | None):
        super().__init__(fn, None, "pyarrow", (), {}, (), {}, True, concurrency=concurrency, num_cpus=num_cpus,
                         num_gpus=num_gpus)
        self.call, self.arg = call, arg  # ``drop_columns`` and its first argument's text, for messages

    def described(self) -> str:
        return f"{self.call}({', '.join([self.arg, *self.options()])})"

    def apply(self, block: pa.Table, fn: Callable[..., Any]) -> list[pa.Table]:
        out: list[pa.Table] = fn(block)
        return out


def add_column(col: str, fn: Callable[[Any], Any], batch_format: str) -> BlockFn:
    def apply(block: pa.Table) -> list[pa.Table]:
        batch = blk.to_batch(block, batch_format)
        values = _guard("AddColumn", fn, block, lambda: fn(batch))
        if hasattr(values, "columns") and hasattr(values, "iloc") and len(values.columns) == 1:
            values = values.iloc[:, 0]  # a one-column frame is its column, as pandas assigns it in Ray's
        if hasattr(values, "columns") or isinstance(values, (dict, pa.Table)):
            names = list(values.column_names if isinstance(values, pa.Table) else
                         values.columns if hasattr(values, "columns") else values)
            raise DataTypeError(
                f"add_column({col!r}, {fn_name(fn)}) returned a {type(values).__name__} (columns {names}); it must "
                "return the one new column: a pandas Series, a numpy array or a list, one value per row. Pick the "
                "column, e.g. return df['x'], or use map_batches to return several."
            )
        typed = _typed_pandas_column(values) if batch_format == "pandas" else None
        if typed is None and hasattr(values, "to_numpy") and not isinstance(values, (pa.Array, pa.ChunkedArray)):
            values = values.to_numpy()
        if getattr(values, "__len__", None) is None or len(values) != block.num_rows:
            raise DataTypeError(
                f"add_column({col!r}, {fn_name(fn)}) returned {blk._short(values)}; it must return one value per "
                f"row of the batch ({block.num_rows} rows)."
            )
        arr = typed if typed is not None else blk.array_from_values(values)
        if col in block.column_names:
            return [block.set_column(block.column_names.index(col), col, arr)]
        return [block.append_column(col, arr)]

    return apply


def _typed_pandas_column(values: Any) -> pa.Array | None:
    """What Ray 2.60 makes of a pandas ``add_column`` function's result: pandas' column for it (Ray assigns it,
    ``batch.loc[:, col] = values``; a list or 1-D array takes pandas' inferred dtype) as pyarrow converts a
    typed column, so pandas 3 text (``str``) is ``large_string`` and nullable ``Int64`` is ``int64`` with
    nulls. None for an ``object`` column (tensors, Python objects) or anything else: muster's conversion."""
    import numpy as np
    import pandas as pd

    if isinstance(values, list) or (isinstance(values, np.ndarray) and values.ndim == 1):
        try:
            values = pd.Series(values)
        except (TypeError, ValueError):  # values pandas cannot hold in one column: muster's conversion says why
            return None
    if not isinstance(values, pd.Series) or values.dtype == object:
        return None
    try:
        return pa.array(values, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):  # muster's conversion says why
        return None


def select_columns(cols: list[str]) -> BlockFn:
    def apply(block: pa.Table) -> list[pa.Table]:
        _check_columns(block, cols, "select_columns")
        return [block.select(cols)]

    return apply


def drop_columns(cols: list[str]) -> BlockFn:
    def apply(block: pa.Table) -> list[pa.Table]:
        _check_columns(block, cols, "drop_columns")
        return [block.drop_columns(cols)]

    return apply


def rename_columns(mapping: dict[str, str]) -> BlockFn:
    def apply(block: pa.Table) -> list[pa.Table]:
        _check_columns(block, list(mapping), "rename_columns")
        new = [mapping.get(n, n) for n in block.column_names]
        clash = next((n for n in new if new.count(n) > 1), None)
        if clash is not None:  # a new name that a column left as it is already has (two new ones: refused before)
            raise InvalidArgumentError(
                f"rename_columns({mapping!r}): the dataset already has a column {clash!r} (its columns: "
                f"{block.column_names}), so two would be named {clash!r}. Drop it first "
                f"(.drop_columns([{clash!r}])), or rename it too ({dict(mapping, **{clash: clash + '_old'})!r})."
            )
        return [block.rename_columns(new)]

    return apply


def rename_all_columns(names: list[str]) -> BlockFn:
    def apply(block: pa.Table) -> list[pa.Table]:
        if block.num_columns and len(names) != block.num_columns:
            raise InvalidArgumentError(
                f"rename_columns({names!r}): {len(names)} names for {block.num_columns} columns "
                f"{block.column_names}; give one name per column, or a dict old name -> new name."
            )
        return [block.rename_columns(names) if block.num_columns else block]

    return apply


def _check_columns(block: pa.Table, cols: list[str], where: str) -> None:
    missing = [c for c in cols if c not in block.column_names]
    if missing and block.num_columns:
        raise InvalidArgumentError(f"{where}: no column {missing[0]!r}; the dataset has {block.column_names}.")
