"""Custom sources (Ray's ``ray.data.Datasource`` and ``ReadTask``), and how muster reads one.

A user subclasses :class:`Datasource` and returns :class:`ReadTask` s from ``get_read_tasks``;
``muster.data.read_datasource`` asks for them once, when the dataset is made, and turns each into
one of muster's own read tasks (``plan.ReadTask``): they run lazily, in parallel, streaming, as the
file readers' tasks do. Blocks a read task yields (pyarrow Tables or pandas DataFrames) become Arrow
tables here; anything else fails naming the datasource, what it yielded and what to yield.
"""

from __future__ import annotations

import inspect
import os
import warnings
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional

import pyarrow as pa

from muster.data import block as blk
from muster.data import plan
from muster.data.block import Block, BlockMetadata
from muster.data.exceptions import DataError, DataTypeError, UserFunctionError
from muster.exceptions import InvalidArgumentError, InvalidTypeError

if TYPE_CHECKING:
    from muster.data.context import DataContext

#: Ray's ``read_op_min_num_blocks`` and ``target_min_block_size`` defaults: how many read tasks to ask
#: a datasource for when the caller does not say (as Ray decides it)
_MIN_NUM_BLOCKS = 200
_MIN_BLOCK_BYTES = 1024 * 1024


class Datasource:
    """A custom source of data (Ray's ``ray.data.Datasource``): subclass it and pass an instance to
    ``muster.data.read_datasource``.

    Contract: ``get_read_tasks(parallelism)`` returns a list of :class:`ReadTask` (about ``parallelism``
    of them; each reads its share, independently, possibly in another thread or process, so what it
    closes over must be picklable); ``estimate_inmemory_data_size()`` returns the bytes the data takes
    in memory, or None (muster only uses it to pick a default ``parallelism``, and needs no override).
    ``get_name()`` names the read (``Read<name>``) in stats and errors.
    """

    def __init__(self) -> None:
        pass

    def get_name(self) -> str:
        """The class name without a ``Datasource`` suffix (Ray's default)."""
        return type(self).__name__.removesuffix("Datasource")

    def estimate_inmemory_data_size(self) -> Optional[int]:
        """The data's in-memory size in bytes, or None if unknown."""
        raise NotImplementedError

    def get_read_tasks(self, parallelism: int, per_task_row_limit: Optional[int] = None,
                       data_context: Optional["DataContext"] = None) -> list["ReadTask"]:
        """The read tasks: about ``parallelism`` of them, which together read all the data.

        Args:
            parallelism: how many tasks the caller asks for (``override_num_blocks``, or a default
                from the data's size and this machine's CPUs).
            per_task_row_limit: at most this many rows per task (Ray's limit push-down; muster passes None).
            data_context: the current ``DataContext``.
        """
        raise NotImplementedError

    def create_reader(self, **read_args: Any) -> "Reader":
        """Deprecated in Ray (2.9): implement :meth:`get_read_tasks` instead. Still read when it is
        all a datasource has, with ``read_datasource``'s extra keyword arguments."""
        raise NotImplementedError

    def prepare_read(self, parallelism: int, **read_args: Any) -> list["ReadTask"]:
        """Deprecated in Ray (2.9): implement :meth:`get_read_tasks` instead. Still read when it is
        all a datasource has, with ``read_datasource``'s extra keyword arguments."""
        raise NotImplementedError

    @property
    def supports_distributed_reads(self) -> bool:
        """Ray's: whether reads may run off the driver's node (all of muster's run on this machine)."""
        return True


class Reader:
    """Ray's deprecated (2.9) bound read: what a legacy ``Datasource.create_reader(**read_args)``
    returns. Implement ``Datasource.get_read_tasks`` instead."""

    def estimate_inmemory_data_size(self) -> Optional[int]:
        raise NotImplementedError

    def get_read_tasks(self, parallelism: int) -> list["ReadTask"]:
        raise NotImplementedError


class ReadTask:
    """One unit of a custom read (Ray's ``ray.data.ReadTask``): ``read_fn()`` returns (or yields)
    blocks, pyarrow Tables or pandas DataFrames; ``metadata`` says beforehand what it will read (its
    ``num_rows``, ``size_bytes`` and ``input_files``, each None when unknown). Calling the task yields
    its blocks (at most ``per_task_row_limit`` rows in all, when given)."""

    def __init__(self, read_fn: Callable[[], Iterable[Block]], metadata: BlockMetadata,
                 schema: Any = None, per_task_row_limit: Optional[int] = None):
        if not callable(read_fn):
            raise InvalidTypeError(f"ReadTask(read_fn={read_fn!r}): pass a function of no arguments that "
                                   "returns (or yields) the task's blocks.")
        if not isinstance(metadata, BlockMetadata):
            raise InvalidTypeError(
                f"ReadTask(metadata={metadata!r}): pass a muster.data.block.BlockMetadata(num_rows=, size_bytes=, "
                "exec_stats=None, input_files=) (None where unknown).")
        self._read_fn, self._metadata = read_fn, metadata
        self._schema, self._per_task_row_limit = schema, per_task_row_limit

    @property
    def metadata(self) -> BlockMetadata:
        return self._metadata

    @property
    def schema(self) -> Any:
        return self._schema

    @property
    def read_fn(self) -> Callable[[], Iterable[Block]]:
        return self._read_fn

    @property
    def per_task_row_limit(self) -> Optional[int]:
        return self._per_task_row_limit

    def __call__(self) -> Iterable[Block]:
        return self._blocks(f"a ReadTask's read_fn ({plan.fn_name(self._read_fn)})")

    def _blocks(self, where: str) -> Iterator[Block]:
        """The blocks ``read_fn`` gives, cut at ``per_task_row_limit``; ``where`` names the task in errors."""
        result = self._read_fn()
        if isinstance(result, (pa.Table, pa.RecordBatch)) or _is_dataframe(result):
            raise DataTypeError(f"{where} returned one {type(result).__name__}; it must return a list of blocks "
                                "or yield them: return [block] (or yield block).")
        left = self._per_task_row_limit
        for block in result:
            if left is None:
                yield block
                continue
            if left <= 0:
                return
            table = as_block(block, where)
            yield table.slice(0, left)
            left -= min(left, table.num_rows)


def _is_dataframe(value: Any) -> bool:
    return type(value).__name__ == "DataFrame" and hasattr(value, "to_records")


def as_block(value: Any, where: str) -> pa.Table:
    """A block a read task yielded, as an Arrow table.

    Raises:
        DataTypeError: it is no block (names ``where``, its type and what to yield).
    """
    if isinstance(value, pa.Table):
        return value
    if isinstance(value, pa.RecordBatch):
        return pa.Table.from_batches([value])
    if _is_dataframe(value):
        return blk.from_batch(value, where)
    raise DataTypeError(
        f"{where} yielded a {type(value).__name__} ({blk._short(value)}); a read task yields blocks: pyarrow "
        "Tables or pandas DataFrames, e.g. yield pa.table({'x': [1, 2]}) (wrap plain values in a column)."
    )


class _Run:
    """One public read task as one of muster's own: runs it and returns its blocks as Arrow tables."""

    def __init__(self, task: ReadTask, where: str):
        self.task, self.where = task, where

    def __call__(self) -> list[pa.Table]:
        try:
            return [as_block(b, self.where) for b in self.task._blocks(self.where)]
        except DataError:
            raise
        except Exception as exc:
            raise UserFunctionError(f"{self.where} failed: {type(exc).__name__}: {exc}") from exc


def default_parallelism(datasource: Datasource) -> int:
    """How many read tasks to ask for when the caller does not say, as Ray decides it: 200, fewer when
    blocks would be under 1 MiB, more when they would pass ``target_max_block_size``, and at least
    two per CPU."""
    from muster.data.context import DataContext

    try:
        size = datasource.estimate_inmemory_data_size()
    except NotImplementedError:
        size = None
    most, least = _MIN_NUM_BLOCKS, 1
    max_block = DataContext.get_current().target_max_block_size
    if isinstance(size, (int, float)) and size == size:  # a number, not NaN
        most = max(1, int(size / _MIN_BLOCK_BYTES))
        least = max(1, int(size / max_block)) if max_block else 1
    return max(min(_MIN_NUM_BLOCKS, most), least, 2 * (os.cpu_count() or 1))


def read_tasks(datasource: Datasource, parallelism: int | None, read_args: dict[str, Any],
               public: list[ReadTask] | None = None) -> tuple[plan.ReadTask, ...]:
    """``datasource``'s read tasks for ``parallelism`` (None: Ray's default; or ``public``, those it
    returned), as muster's own (one each, in order).

    Raises:
        InvalidTypeError: it is no Datasource, implements no way to read, or returns no list of ReadTasks.
        InvalidArgumentError: ``parallelism`` is not a positive integer.
    """
    _name(datasource)
    parallelism = default_parallelism(datasource) if parallelism is None else _check_parallelism(parallelism)
    if public is None:
        public = public_tasks(datasource, parallelism, read_args)
    where = f"Read{datasource.get_name()}"
    return tuple(plan.ReadTask(_Run(t, f"{where} (read task {i}, {plan.fn_name(t.read_fn)})"), f"{where}[{i}]",
                               t.metadata.size_bytes or 0, t.metadata.input_files or (), t.metadata.num_rows,
                               t.schema if isinstance(t.schema, pa.Schema) else None)
                 for i, t in enumerate(public))


def public_tasks(datasource: Datasource, parallelism: int, read_args: dict[str, Any]) -> list[ReadTask]:
    """What ``datasource`` returns for ``parallelism`` read tasks (from a legacy reader, too)."""
    from muster.data.context import DataContext

    name = _name(datasource)
    kind = type(datasource)
    if kind.get_read_tasks is not Datasource.get_read_tasks:
        tasks = datasource.get_read_tasks(parallelism, **_accepted(datasource.get_read_tasks, {
            "per_task_row_limit": None, "data_context": DataContext.get_current()}))
    elif kind.create_reader is not Datasource.create_reader or kind.prepare_read is not Datasource.prepare_read:
        warnings.warn(f"{name}: create_reader and prepare_read are deprecated (as in Ray since 2.9); implement "
                      "get_read_tasks(parallelism, per_task_row_limit=None, data_context=None) instead.",
                      DeprecationWarning, stacklevel=3)
        tasks = (datasource.create_reader(**read_args).get_read_tasks(parallelism)
                 if kind.create_reader is not Datasource.create_reader
                 else datasource.prepare_read(parallelism, **read_args))
    else:
        raise InvalidTypeError(f"read_datasource({name}): it implements no get_read_tasks; define get_read_tasks"
                               "(self, parallelism, per_task_row_limit=None, data_context=None) returning a list "
                               "of muster.data.ReadTask.")
    if not isinstance(tasks, (list, tuple)) or not all(isinstance(t, ReadTask) for t in tasks):
        raise InvalidTypeError(f"{name}.get_read_tasks({parallelism}) returned a {type(tasks).__name__}; return a list "
                               "of muster.data.ReadTask(read_fn, BlockMetadata(...)).")
    return list(tasks)


def _accepted(fn: Callable[..., Any], options: dict[str, Any]) -> dict[str, Any]:
    """The ``options`` that ``fn`` takes (an older ``get_read_tasks(self, parallelism)`` takes none)."""
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return options
    return {k: v for k, v in options.items() if k in params}


def _name(datasource: Any) -> str:
    if not isinstance(datasource, Datasource):
        raise InvalidTypeError(f"read_datasource({datasource!r}): pass an instance of a muster.data.Datasource "
                               "subclass (class MySource(muster.data.Datasource)), as with ray.data.Datasource.")
    return type(datasource).__name__


def _check_parallelism(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"read_datasource(override_num_blocks={value!r}): pass a positive number of "
                                   "read tasks, or leave it out for a default from the data's size and the CPUs.")
    return value
