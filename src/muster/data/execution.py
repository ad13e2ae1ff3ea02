"""Streaming execution of a logical plan, in the process that consumes it.

Read tasks, with the transforms after them fused in, run as jobs on a thread
pool (pyarrow reads, decodes and computes with the GIL released) or, for jobs
that run Python per row or batch, in the engine's pooled worker processes
when the consumer is the driver and a CPU is idle (results come back through
the engine's shared-memory path: Arrow buffers travel out of band).  Results come
back in order; a new task starts only while the bytes of finished, not yet
consumed blocks stay under ``DataContext.max_bytes_in_flight`` and fewer than
``2 x threads`` tasks are pending, so memory is bounded whatever the dataset's
size.  All-to-all operators (shuffle, sort, repartition) gather their input
first, as Ray's do.

**CPU budget.**  The pipeline never *needs* the engine's CPUs: a training
worker iterating its shard runs it on its own threads (it shares the cores
the trainer already holds), and the driver borrows a pooled worker only while
a CPU is idle, running a job itself when none is -- so a gang holding every
CPU can never starve it.  ``DataContext.max_threads`` bounds the threads per
consumer.
"""

from __future__ import annotations

import collections
import functools
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import pyarrow as pa

from muster.data import block as blk
from muster.data.plan import AllToAll, BlockFn, Limit, Node, Read, Transform, Union
from muster.exceptions import InvalidArgumentError


@dataclass(kw_only=True)
class DataContext:
    """Execution settings for this process (``DataContext.get_current()``, as in Ray).

    Attributes:
        max_threads: threads that run read and map tasks per consuming process.
        max_bytes_in_flight: finished blocks not yet consumed, at most (bytes).
        target_block_rows: rows per block that in-memory sources and shuffles aim for.
        use_workers: let the driver run jobs with Python functions on idle pooled workers
            of an engine that is already running (see ``_Workers``).
    """

    max_threads: int = field(default_factory=lambda: max(2, min(8, os.cpu_count() or 2)))
    max_bytes_in_flight: int = 256 * 1024 * 1024
    target_block_rows: int = 64 * 1024
    use_workers: bool = True

    def __post_init__(self) -> None:
        if self.max_threads < 1:
            raise InvalidArgumentError(f"DataContext(max_threads={self.max_threads}): use 1 or more.")
        if self.max_bytes_in_flight < 1:
            raise InvalidArgumentError(f"DataContext(max_bytes_in_flight={self.max_bytes_in_flight}): use a positive size.")
        if self.target_block_rows < 1:
            raise InvalidArgumentError(f"DataContext(target_block_rows={self.target_block_rows}): use 1 or more.")

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


class Job:
    """One task: read (or take) blocks, then apply the fused chain. Picklable, so a pooled
    worker can run it; returns the blocks and the seconds/rows each operator took."""

    def __init__(self, source: Callable[[], list[pa.Table]], source_name: str | None,
                 chain: list[tuple[str, BlockFn]], size: int = 0):
        self.source, self.source_name, self.chain = source, source_name, chain
        self.size = size  # bytes it reads (file bytes, or its input block's), for the in-flight budget

    @property
    def needs_process(self) -> bool:
        """Whether it runs Python per row or batch (so a process beats a GIL-bound thread)."""
        return bool(self.chain) and not any(getattr(fn, "is_class", False) for _, fn in self.chain)

    def __call__(self) -> tuple[list[pa.Table], list[tuple[str, int, int, float]]]:
        timings = []
        t = time.perf_counter()
        blocks = self.source()
        if self.source_name is not None:
            timings.append((self.source_name, sum(b.num_rows for b in blocks), len(blocks), time.perf_counter() - t))
        for name, fn in self.chain:
            t = time.perf_counter()
            blocks = [out for b in blocks for out in fn(b)]
            timings.append((name, sum(b.num_rows for b in blocks), len(blocks), time.perf_counter() - t))
        # Hand the decoder's scratch memory back now: Arrow's allocator otherwise keeps freed
        # pages per thread, which put peak RSS at 2.2-3x the in-flight budget (measured).
        pa.default_memory_pool().release_unused()
        return blocks, timings


def _stream(node: Node, epoch: int, stats: Stats) -> Iterator[pa.Table]:
    chain: list[tuple[str, BlockFn]] = []
    while isinstance(node.op, Transform):
        chain.append((node.op.name, node.op.fn))
        node = node.inputs[0]
    chain.reverse()
    op = node.op
    if isinstance(op, Read):
        yield from _run((Job(t.read, op.name, chain, t.size) for t in op.tasks), stats)
        return
    if isinstance(op, AllToAll):
        child = node.inputs[0]
        if op.reorders_reads is not None and isinstance(child.op, Read):  # streaming: reorder the reads only
            name = child.op.name
            yield from _run((Job(t.read, name, chain, t.size) for t in op.reorders_reads(child.op.tasks, epoch)), stats)
            return
        upstream: Iterator[pa.Table] = _timed(op.name, lambda: op.fn(list(_stream(child, epoch, stats)), epoch), stats)
    elif isinstance(op, Limit):
        upstream = _limit(_stream(node.inputs[0], epoch, stats), op.n)
    elif isinstance(op, Union):
        upstream = (b for child in node.inputs for b in _stream(child, epoch, stats))
    else:  # pragma: no cover - every operator is handled above
        raise TypeError(f"unknown operator {op!r}")
    if not chain:
        yield from upstream
    else:
        yield from _run((Job(functools.partial(_one, b), None, chain, blk.nbytes(b)) for b in upstream), stats)


def _timed(name: str, make: Callable[[], list[pa.Table] | Iterator[pa.Table]], stats: Stats) -> Iterator[pa.Table]:
    """The blocks ``make`` returns, with the time spent making them (lazily, too) counted for ``name``."""
    t = time.perf_counter()
    out = iter(make())
    busy = time.perf_counter() - t
    while True:
        t = time.perf_counter()
        b = next(out, None)
        busy += time.perf_counter() - t
        if b is None:
            stats.add(name, 0, 0, busy)
            return
        stats.add(name, b.num_rows, 1, busy)
        busy = 0.0
        yield b


def _one(block: pa.Table) -> list[pa.Table]:
    return [block]


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


def _run(jobs: Iterator[Job], stats: Stats) -> Iterator[pa.Table]:
    """Run jobs a bounded number ahead (threads here, or idle pooled workers); yield their blocks in order."""
    ctx = DataContext.get_current()
    pool = _threads()
    workers = _Workers.get(ctx)
    pending: collections.deque[tuple[Job, Future[Any], bool]] = collections.deque()
    max_tasks = 2 * ctx.max_threads
    source = iter(jobs)
    waiting: Job | None = None  # the next job, when it did not fit in the budget yet
    exhausted = False
    grown = [0, 0]  # bytes read, bytes of blocks made: how much a job's output outgrows its input

    def estimate(job: Job) -> int:
        return int(job.size * max(1.0, grown[1] / grown[0])) if grown[0] else job.size

    def in_flight() -> int:
        """Finished blocks not yet consumed, plus what the jobs still running will make."""
        total = 0
        for job, f, _ in pending:
            if not f.done():
                total += estimate(job)
            elif f.exception() is None:
                total += sum(blk.nbytes(b) for b in f.result()[0])
        return total

    try:
        while True:
            while not exhausted and len(pending) < max_tasks:
                job = waiting if waiting is not None else next(source, None)
                waiting = None
                if job is None:
                    exhausted = True
                    break
                if pending and in_flight() + estimate(job) > ctx.max_bytes_in_flight:
                    waiting = job  # the head job is always admitted, so the pipeline moves
                    break
                fut = None
                if workers is not None and job.needs_process:
                    fut = workers.submit(job, sum(1 for _, f, r in pending if r and not f.done()))
                pending.append((job, fut, True) if fut is not None else (job, pool.submit(job), False))
            if not pending:
                return
            job, head, remote = pending.popleft()
            blocks, timings = _result(job, head, remote, workers)
            for name, rows, count, secs in timings:
                stats.add(name, rows, count, secs)
            made = sum(blk.nbytes(b) for b in blocks)
            if job.size:
                grown[0] += job.size
                grown[1] += made
            stats.peak_bytes_in_flight = max(stats.peak_bytes_in_flight, in_flight() + made)
            yield from blocks
    finally:
        for _, f, remote in pending:
            if not remote:  # the engine's futures are the engine's to settle
                f.cancel()


def _result(job: Job, fut: Future[Any], remote: bool, workers: "_Workers | None") -> Any:
    if not remote or workers is None:
        return fut.result()
    from muster.exceptions import TaskError, WorkerCrashedError

    waited = 0.0
    while True:  # a pooled worker's job: if the engine filled up meanwhile, never wait on it
        try:
            return fut.result(timeout=0.25)
        except TimeoutError:
            waited += 0.25
            if waited >= workers.steal_after_s and not workers.has_free_cpu():
                return job()  # the queued copy still runs later; its result is dropped
        except TaskError as exc:  # the job's own error, as if it had run here
            if exc.cause is not None:
                raise exc.cause from None
            raise
        except WorkerCrashedError:  # the worker died (killed, out of memory): run it here once
            return job()


class _Workers:
    """Idle CPUs of this process's own engine, borrowed one job at a time.

    Only the driver borrows (a worker -- a trainer -- never asks the engine for
    CPUs), only once the engine is already running (reading data never starts
    it), only while a whole CPU is free beyond the jobs it already has out, and a job
    still queued after ``steal_after_s`` while no CPU is free runs here instead.
    """

    steal_after_s = 10.0

    def __init__(self, runtime: Any):
        self.runtime = runtime

    @staticmethod
    def get(ctx: DataContext) -> "_Workers | None":
        if not ctx.use_workers:
            return None
        from muster.core import api, context

        if context.in_worker() or not api.is_initialized():
            return None
        runtime = api.get_runtime()
        return _Workers(runtime) if runtime.name == "local" else None

    def free_cpus(self) -> float:
        try:
            return float(self.runtime.available().get("CPU", 0))
        except Exception:  # noqa: BLE001 - an engine shutting down has nothing free
            return 0.0

    def has_free_cpu(self) -> bool:
        return self.free_cpus() >= 1

    def submit(self, job: Job, mine: int) -> Future[Any] | None:
        """Submit ``job`` if a CPU is free beyond the ``mine`` jobs this pipeline already has out."""
        if self.free_cpus() - mine < 1:
            return None
        try:
            fut: Future[Any] = self.runtime.submit(job, (), {}, {"CPU": 1}, label="muster.data")
            return fut
        except Exception:  # noqa: BLE001 - not picklable, engine gone: run it here
            return None
