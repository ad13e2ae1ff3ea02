"""Custom sinks (Ray's ``ray.data.Datasink``, ``WriteResult`` and the ``TaskContext`` a write gets),
and how ``Dataset.write_datasink`` runs one.

The dataset's blocks stream from its plan; they are grouped into write tasks (one block each, or
enough blocks for the sink's ``min_rows_per_write`` / ``min_bytes_per_write``), and each task calls
``write(blocks, ctx)`` on a thread, a bounded number at once, on its own shallow copy of the sink (as
each of Ray's write tasks has its own copy: what a write sets on ``self`` is its own). ``on_write_start(schema)``
runs once, before the first write (not at all for a dataset with no blocks, as in Ray);
``on_write_complete(WriteResult)`` once after the last; ``on_write_failed(error)`` with the first
error, which then reaches the caller naming the sink.
"""

from __future__ import annotations

import collections
import copy
import itertools
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Iterable, Iterator, Optional, TypeVar

import pyarrow as pa

from muster.data import block as blk
from muster.data.block import Block
from muster.data.exceptions import DataError, UserFunctionError
from muster.exceptions import InvalidArgumentError, InvalidTypeError

#: What one ``Datasink.write`` returns (Ray's name)
WriteReturnType = TypeVar("WriteReturnType")


@dataclass
class WriteResult(Generic[WriteReturnType]):
    """What ``on_write_complete`` gets: the rows and in-memory bytes written in all, and each write
    task's return value, in task order."""

    num_rows: int
    size_bytes: int
    write_returns: list[WriteReturnType]

    @classmethod
    def combine(cls, *results: "WriteResult") -> "WriteResult":
        return WriteResult(sum(r.num_rows for r in results), sum(r.size_bytes for r in results),
                           list(itertools.chain.from_iterable(r.write_returns for r in results)))


@dataclass
class TaskContext:
    """What a write task's ``ctx`` holds (Ray's ``TaskContext``): ``task_idx``, the task's index
    (0, 1, ... in order: a unique part of a file name, say); ``op_name`` (``"Write"``); ``kwargs``."""

    task_idx: int
    op_name: str = "Write"
    kwargs: dict[str, Any] = field(default_factory=dict)


class Datasink(Generic[WriteReturnType]):
    """A custom destination (Ray's ``ray.data.Datasink``): subclass it, implement :meth:`write`, and
    pass an instance to ``Dataset.write_datasink``.

    Contract: ``write`` runs once per write task, on a thread of this process (several at once), on a
    shallow copy of the sink, so an attribute it sets on ``self`` (a file, a per-task buffer) is that
    task's own, as on Ray where each task gets a copy; objects the copies share (a list, a client) are
    shared between threads (on the Ray engine, in Ray's worker processes, each a full copy);
    the other methods run in the caller, in the order ``on_write_start``, the writes,
    ``on_write_complete``, or ``on_write_failed`` when any of them raised.
    """

    def on_write_start(self, schema: Optional[pa.Schema] = None) -> None:
        """Before the first write, with the first block's schema (set up a table, a staging folder)."""

    def write(self, blocks: Iterable[Block], ctx: TaskContext) -> WriteReturnType:
        """Write one task's blocks (pyarrow Tables); what it returns reaches ``on_write_complete``."""
        raise NotImplementedError

    def on_write_complete(self, write_result: WriteResult[WriteReturnType]) -> None:
        """After every write succeeded (commit the output)."""

    def on_write_failed(self, error: Exception) -> None:
        """When a write (or the plan feeding it, or ``on_write_start``/``on_write_complete``) raised:
        ``error`` is the error ``write_datasink`` then raises."""

    def get_name(self) -> str:
        """The class name without a leading ``_`` or a ``Datasink`` suffix (Ray's default)."""
        return type(self).__name__.removeprefix("_").removesuffix("Datasink")

    @property
    def supports_distributed_writes(self) -> bool:
        """Ray's: whether writes may run off the driver's node (muster's all run on this machine)."""
        return True

    @property
    def min_rows_per_write(self) -> Optional[int]:
        """Each write gets blocks of at least this many rows together (the last may have fewer); None: one
        block per write."""
        return None

    @property
    def min_bytes_per_write(self) -> Optional[int]:
        """As :attr:`min_rows_per_write`, in bytes (set one of the two)."""
        return None


def write(blocks: Iterator[pa.Table], sink: Datasink, concurrency: int | None, threads: int) -> None:
    """Write ``blocks`` to ``sink`` (``Dataset.write_datasink``): at most ``concurrency`` (else
    ``threads``) write tasks at once, at most twice that many waiting, so memory stays bounded.

    Raises:
        InvalidTypeError: ``sink`` is no Datasink.
        InvalidArgumentError: its ``min_rows_per_write``/``min_bytes_per_write`` are not positive integers,
            or both are set, or ``concurrency`` is not a positive integer.
        UserFunctionError: a method of the sink raised (named, with the error).
    """
    if not isinstance(sink, Datasink):
        raise InvalidTypeError(f"write_datasink({sink!r}): pass an instance of a muster.data.Datasink subclass "
                               "(class MySink(muster.data.Datasink) with a write(blocks, ctx) method).")
    name = type(sink).__name__
    enough = _bundle_target(sink, name)
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                                    or concurrency < 1):
        raise InvalidArgumentError(f"write_datasink({name}, concurrency={concurrency!r}): pass a positive number "
                                   "of write tasks at once, or None.")
    width = concurrency or threads
    pool = ThreadPoolExecutor(width, thread_name_prefix="muster-write")
    pending: collections.deque[Future[tuple[int, int, Any]]] = collections.deque()
    done: list[tuple[int, int, Any]] = []
    try:
        for idx, group in enumerate(_groups(blocks, enough)):
            if idx == 0:
                call_sink(name, "on_write_start", lambda: sink.on_write_start(group[0].schema))
            pending.append(pool.submit(_write_task, copy.copy(sink), name, group, idx))
            while pending and (len(pending) >= 2 * width or pending[0].done()):
                done.append(pending.popleft().result())
        while pending:
            done.append(pending.popleft().result())
        result: WriteResult = WriteResult(sum(d[0] for d in done), sum(d[1] for d in done), [d[2] for d in done])
        call_sink(name, "on_write_complete", lambda: sink.on_write_complete(result))
    except Exception as exc:
        pool.shutdown(wait=True, cancel_futures=True)  # the writes still running end before the sink hears
        sink.on_write_failed(exc)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        close = getattr(blocks, "close", None)
        if close is not None:
            close()  # stop the plan feeding the writes (its pending tasks) on an error


def _bundle_target(sink: Datasink, name: str) -> Callable[[int, int], bool]:
    """Whether a group of (rows, bytes) is enough for one write task of ``sink``."""
    rows, size = sink.min_rows_per_write, sink.min_bytes_per_write
    for what, value in (("min_rows_per_write", rows), ("min_bytes_per_write", size)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InvalidArgumentError(f"{name}.{what} is {value!r}: return a positive integer, or None.")
    if rows is not None and size is not None:
        raise InvalidArgumentError(f"{name} sets both min_rows_per_write ({rows}) and min_bytes_per_write "
                                   f"({size}); set only one of them (as Ray requires).")
    if rows is not None:
        return lambda r, _: r >= rows
    if size is not None:
        return lambda _, b: b >= size
    return lambda r, b: True


def _groups(blocks: Iterator[pa.Table], enough: Callable[[int, int], bool]) -> Iterator[list[pa.Table]]:
    group: list[pa.Table] = []
    rows = size = 0
    for block in blocks:
        group.append(block)
        rows, size = rows + block.num_rows, size + blk.nbytes(block)
        if enough(rows, size):
            yield group
            group, rows, size = [], 0, 0
    if group:
        yield group


def _write_task(sink: Datasink, name: str, group: list[pa.Table], idx: int) -> tuple[int, int, Any]:
    rows, size = sum(b.num_rows for b in group), sum(blk.nbytes(b) for b in group)
    returned = call_sink(name, f"write (task {idx}, {rows} rows)", lambda: sink.write(iter(group), TaskContext(idx)))
    return rows, size, returned


def call_sink(name: str, what: str, fn: Callable[[], Any]) -> Any:
    """``fn()``, a call of sink ``name``'s method ``what``; what it raises as a ``UserFunctionError`` naming both."""
    try:
        return fn()
    except DataError:
        raise
    except Exception as exc:
        raise UserFunctionError(f"write_datasink({name}): {name}.{what} failed: {type(exc).__name__}: {exc}") \
            from exc
