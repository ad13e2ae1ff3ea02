"""Streaming execution of a logical plan, in the process that consumes it.

Read tasks, with the transforms after them fused in, run on a thread pool
(pyarrow reads, decodes and computes with the GIL released).  Results come
back in order; a new task starts only while the bytes of finished, not yet
consumed blocks stay under ``DataContext.max_bytes_in_flight`` and fewer than
``2 x threads`` tasks are pending, so memory is bounded whatever the dataset's
size.  All-to-all operators (shuffle, sort, repartition) gather their input
first, as Ray's do.

**CPU budget.**  The pipeline never asks the engine for CPUs: it runs on
threads of the consumer (the driver, or a training worker that iterates its
shard), so a training gang that holds every CPU can never starve it -- it
shares the cores the trainer already has.  ``DataContext.max_threads``
bounds the threads per consumer.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterator

import pyarrow as pa

from muster.data import block as blk
from muster.data.plan import AllToAll, BlockFn, Limit, Node, Read, Transform, Union, fuse


@dataclass(kw_only=True)
class DataContext:
    """Execution settings for this process (``DataContext.get_current()``, as in Ray).

    Attributes:
        max_threads: threads that run read and map tasks per consuming process.
        max_bytes_in_flight: finished blocks not yet consumed, at most (bytes).
        target_block_rows: rows per block that in-memory sources and shuffles aim for.
    """

    max_threads: int = field(default_factory=lambda: max(2, min(8, os.cpu_count() or 2)))
    max_bytes_in_flight: int = 256 * 1024 * 1024
    target_block_rows: int = 64 * 1024

    def __post_init__(self) -> None:
        if self.max_threads < 1:
            raise ValueError(f"DataContext(max_threads={self.max_threads}): use 1 or more.")
        if self.max_bytes_in_flight < 1:
            raise ValueError(f"DataContext(max_bytes_in_flight={self.max_bytes_in_flight}): use a positive size.")
        if self.target_block_rows < 1:
            raise ValueError(f"DataContext(target_block_rows={self.target_block_rows}): use 1 or more.")

    _current: "DataContext | None" = None

    @staticmethod
    def get_current() -> "DataContext":
        if DataContext._current is None:
            DataContext._current = DataContext()
        return DataContext._current


_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_pool_lock = threading.Lock()


def _threads() -> ThreadPoolExecutor:
    global _pool, _pool_size
    want = DataContext.get_current().max_threads
    with _pool_lock:
        if _pool is None or _pool_size != want:
            _pool, _pool_size = ThreadPoolExecutor(want, thread_name_prefix="muster-data"), want
        return _pool


class Stats:
    """Rows, blocks and busy seconds per operator for one execution (``Dataset.stats()``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ops: dict[str, list[float]] = {}
        self.started = time.perf_counter()
        self.wall = 0.0
        self.peak_bytes_in_flight = 0

    def add(self, op: str, rows: int, blocks: int, seconds: float) -> None:
        with self._lock:
            entry = self.ops.setdefault(op, [0, 0, 0.0])
            entry[0] += rows
            entry[1] += blocks
            entry[2] += seconds

    def timed(self, op: str, fn: BlockFn) -> BlockFn:
        def run(block: pa.Table) -> list[pa.Table]:
            t = time.perf_counter()
            out = fn(block)
            self.add(op, sum(b.num_rows for b in out), len(out), time.perf_counter() - t)
            return out

        return run

    def summary(self) -> str:
        lines = [f"Execution: {self.wall:.3f} s wall, peak {self.peak_bytes_in_flight / 2**20:.1f} MiB in flight"]
        for name, (rows, blocks, secs) in self.ops.items():
            rate = rows / secs if secs > 0 else float("inf")
            lines.append(f"  {name}: {int(rows)} rows in {int(blocks)} blocks, {secs:.3f} s busy ({rate:,.0f} rows/s)")
        return "\n".join(lines)


def execute(node: Node, epoch: int = 0, stats: Stats | None = None) -> Iterator[pa.Table]:
    """Stream the blocks ``node`` produces, in order, for pass ``epoch``."""
    stats = stats or Stats()
    try:
        yield from (b for b in _stream(node, epoch, stats) if b.num_rows or b.num_columns)
    finally:
        stats.wall = time.perf_counter() - stats.started


def _stream(node: Node, epoch: int, stats: Stats) -> Iterator[pa.Table]:
    chain: list[BlockFn] = []
    while isinstance(node.op, Transform):
        chain.append(stats.timed(node.op.name, node.op.fn))
        node = node.inputs[0]
    chain.reverse()
    fused = fuse(chain) if chain else None
    op = node.op
    if isinstance(op, Read):
        yield from _run(_read_thunks(op, op.tasks, fused, stats), stats)
        return
    if isinstance(op, AllToAll):
        child = node.inputs[0]
        if op.reorders_reads is not None and isinstance(child.op, Read):  # streaming: reorder the reads only
            yield from _run(_read_thunks(child.op, op.reorders_reads(child.op.tasks, epoch), fused, stats), stats)
            return
        t = time.perf_counter()
        blocks = list(_stream(child, epoch, stats))
        out = op.fn(blocks, epoch)
        stats.add(op.name, sum(b.num_rows for b in out), len(out), time.perf_counter() - t)
        upstream: Iterator[pa.Table] = iter(out)
    elif isinstance(op, Limit):
        upstream = _limit(_stream(node.inputs[0], epoch, stats), op.n)
    elif isinstance(op, Union):
        upstream = (b for child in node.inputs for b in _stream(child, epoch, stats))
    else:  # pragma: no cover - every operator is handled above
        raise TypeError(f"unknown operator {op!r}")
    if fused is None:
        yield from upstream
    else:
        yield from _run(((lambda b=b: fused(b)) for b in upstream), stats)


def _read_thunks(op: Read, tasks: tuple, fused: BlockFn | None, stats: Stats) -> Iterator[Callable[[], list[pa.Table]]]:
    def run(task: object) -> list[pa.Table]:
        t = time.perf_counter()
        blocks = task.read()  # type: ignore[attr-defined]
        stats.add(op.name, sum(b.num_rows for b in blocks), len(blocks), time.perf_counter() - t)
        return [out for b in blocks for out in fused(b)] if fused is not None else blocks

    return ((lambda task=task: run(task)) for task in tasks)


def _limit(blocks: Iterator[pa.Table], n: int) -> Iterator[pa.Table]:
    left = n
    if left <= 0:
        return
    for b in blocks:
        if b.num_rows >= left:
            yield b.slice(0, left)
            return
        left -= b.num_rows
        yield b


def _run(thunks: Iterator[Callable[[], list[pa.Table]]], stats: Stats) -> Iterator[pa.Table]:
    """Run thunks on the pool, a bounded number ahead, yielding their blocks in order."""
    ctx = DataContext.get_current()
    pool = _threads()
    pending: collections.deque[Future[list[pa.Table]]] = collections.deque()
    max_tasks = 2 * ctx.max_threads
    source = iter(thunks)
    exhausted = False

    def done_bytes() -> int:
        return sum(blk.nbytes(b) for f in pending if f.done() and f.exception() is None for b in f.result())

    try:
        while True:
            while not exhausted and len(pending) < max_tasks and done_bytes() < ctx.max_bytes_in_flight:
                thunk = next(source, None)
                if thunk is None:
                    exhausted = True
                    break
                pending.append(pool.submit(thunk))
            if not pending:
                return
            head = pending.popleft()
            blocks = head.result()
            stats.peak_bytes_in_flight = max(stats.peak_bytes_in_flight,
                                             done_bytes() + sum(blk.nbytes(b) for b in blocks))
            yield from blocks
    finally:
        for f in pending:
            f.cancel()
