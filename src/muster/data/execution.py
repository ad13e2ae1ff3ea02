"""Streaming execution of a logical plan, in the process that consumes it.

Read tasks, with the transforms after them fused in, run as jobs on a thread
pool (pyarrow reads, decodes and computes with the GIL released) or, for jobs
that run Python per row or batch, in the engine's pooled worker processes
when the consumer is the driver and a CPU is idle (results come back through
the engine's shared-memory path: Arrow buffers travel out of band); the first such job goes out alone for a
few milliseconds, and if it is back by then the others run on the threads, cheaper than a round trip each
(see ``_Probe``).  Results come
back in order; a new task starts only while the bytes of finished, not yet
consumed blocks stay under ``DataContext.max_bytes_in_flight`` and fewer than
``2 x threads`` tasks are pending, so memory is bounded whatever the dataset's
size.  All-to-all operators (shuffle, sort, repartition) gather their input
first, as Ray's do, and a join both of its inputs.

**CPU budget.**  The pipeline never *needs* the engine's CPUs: a training
worker iterating its shard runs it on its own threads (it shares the cores
the trainer already holds), and the driver borrows a pooled worker only while
a CPU is idle, running a job itself when none is -- so a gang holding every
CPU can never starve it.  ``DataContext.max_threads`` bounds the threads per
consumer.
"""

from __future__ import annotations

import collections
import contextvars
import dataclasses
import functools
import logging
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Callable, Iterator, Sequence

import pyarrow as pa

from muster.data import block as blk
from muster.data import task_context
from muster.data.context import DataContext, current_as
from muster.data.plan import (AllToAll, BlockFn, Join, Limit, MapBatches, Node, Read, ReadTask, Transform, Union,
                               Zip)
from muster.data.stats import Stats, TaskClock, TaskTime, sizes as stats_sizes


_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_pool_lock = threading.Lock()


def _forget_pool_in_child() -> None:
    """A forked child inherits the pool but none of its threads: work submitted there would wait forever."""
    global _pool, _pool_size, _pool_lock
    _pool, _pool_size, _pool_lock = None, 0, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_in_child)


def _threads() -> ThreadPoolExecutor:
    global _pool, _pool_size
    want = DataContext.get_current().max_threads
    with _pool_lock:
        if _pool is None or _pool_size != want:
            _pool, _pool_size = ThreadPoolExecutor(want, thread_name_prefix="muster-data"), want
        return _pool


def execute(node: Node, epoch: int = 0, stats: Stats | None = None) -> Iterator[pa.Table]:
    """Stream the blocks ``node`` produces, in order, for pass ``epoch``."""
    from muster.data import live_view

    ctx = DataContext.get_current()
    stats = stats or Stats(ctx.max_bytes_in_flight)
    stats.budget = ctx.max_bytes_in_flight
    ended = live_view.start(stats, ctx.progress_every_s, ctx.enable_progress_bars)
    try:
        for b in _stream(numbered(node), epoch, stats):
            if b.num_rows or b.num_columns:
                stats.delivered(b.num_rows)
                yield b
    finally:
        stats.finish()
        ended()


def numbered(node: Node) -> Node:
    """``node``'s plan with the operators that share a name numbered in plan order (inputs first, the left one
    first), as Ray's operator ids are: a join of two ``read_parquet`` reads ``ReadParquet_1`` and ``ReadParquet_2``,
    so that ``stats()`` and the live view, which key their counters by name, keep the two apart."""
    names: collections.Counter[str] = collections.Counter()
    todo = [node]
    while todo:
        names[todo[-1].op.name] += 1
        todo.extend(todo.pop().inputs)
    if all(n == 1 for n in names.values()):
        return node
    seen: collections.Counter[str] = collections.Counter()

    def copy(at: Node) -> Node:
        inputs = tuple(copy(i) for i in at.inputs)
        if names[at.op.name] == 1:
            return at if all(a is b for a, b in zip(inputs, at.inputs)) else Node(at.op, inputs)
        seen[at.op.name] += 1
        return Node(dataclasses.replace(at.op, name=f"{at.op.name}_{seen[at.op.name]}"), inputs)

    return copy(node)


def observed(blocks: Iterator[pa.Table], done: Callable[[int, pa.Schema | None], None]) -> Iterator[pa.Table]:
    """``blocks`` passed on; once they all have been, ``done(rows, schema of the first block with columns)``.
    Closing this early closes ``blocks`` (the pipeline stops) and calls nothing."""
    rows, schema = 0, None
    try:
        for block in blocks:
            rows += block.num_rows
            schema = schema if schema is not None or not block.num_columns else block.schema
            yield block
        done(rows, schema)
    finally:
        close = getattr(blocks, "close", None)
        if close is not None:
            close()


class Job:
    """One task: read (or take) blocks, then apply the fused chain. Picklable, so a pooled
    worker can run it; returns the blocks, the seconds/rows each operator took, and the task's times."""

    def __init__(self, source: Callable[[], list[pa.Table]], source_name: str | None,
                 chain: list[tuple[str, BlockFn]], size: int = 0, task_idx: int = 0, epoch: int = 0):
        self.source, self.source_name, self.chain = source, source_name, chain
        self.size = size  # bytes it reads (file bytes, or its input block's), for the in-flight budget
        self.task_idx, self.epoch = task_idx, epoch  # which task of its chain, in which pass (``task_context``)
        self.context: DataContext | None = None  # the consumer's settings, in whichever process runs it

    @property
    def stage(self) -> str:
        """The operator whose output this job's blocks are (what the live view names its stage)."""
        return self.chain[-1][0] if self.chain else self.source_name or "Input"

    @property
    def label(self) -> str:
        """The stage its task belongs to, as ``explain()`` and ``stats()`` name one: the read and the transforms
        fused after it (``ReadRange->Map(f)``), or the transforms fused into one task per block."""
        return "->".join(([self.source_name] if self.source_name is not None else []) + [n for n, _ in self.chain])

    def limit(self, threads: int) -> int | None:
        """At most this many such jobs at once: a map's ``concurrency=``, or ``threads / num_cpus``."""
        limits = []
        for _, fn in self.chain:
            if isinstance(fn, MapBatches):
                if fn.task_limit is not None:
                    limits.append(fn.task_limit)
                if fn.num_cpus:
                    limits.append(max(1, int(threads / fn.num_cpus)))
        return min(limits) if limits else None

    def resources(self) -> dict[str, float]:
        """What one such job holds on a pooled worker: the largest ``num_cpus``/``num_gpus`` of its maps."""
        maps = [fn for _, fn in self.chain if isinstance(fn, MapBatches)]
        cpus = max([1.0] + [float(m.num_cpus) for m in maps if m.num_cpus])
        gpus = max([0.0] + [float(m.num_gpus) for m in maps if m.num_gpus])
        return {"CPU": cpus, "GPU": gpus} if gpus else {"CPU": cpus}

    @property
    def holds_gpus(self) -> bool:
        """Whether a map of its chain asks for GPUs (then it runs only where they are held)."""
        return bool(self.resources().get("GPU"))

    @property
    def needs_process(self) -> bool:
        """Whether it runs Python per row or batch (so a process beats a GIL-bound thread)."""
        return bool(self.chain) and not any(getattr(fn, "is_class", False) for _, fn in self.chain)

    def __call__(self) -> tuple[list[pa.Table], list[tuple[str, int, int, float, int]], TaskTime]:
        clock = TaskClock()
        with clock, current_as(self.context), task_context.running(self.task_idx, self.epoch):
            blocks, timings = self._run()
        return blocks, timings, clock.took()

    def _run(self) -> tuple[list[pa.Table], list[tuple[str, int, int, float, int]]]:
        timings = []
        t = time.perf_counter()
        blocks = self.source()
        rows = sum(b.num_rows for b in blocks)
        if self.source_name is not None:
            timings.append((self.source_name, rows, len(blocks), time.perf_counter() - t, rows))
        for name, fn in self.chain:
            t = time.perf_counter()
            if isinstance(fn, MapBatches) and fn.bundle_rows:  # its batches span this task's small blocks
                blocks = blk.combined(blocks)
            blocks = [out for b in blocks for out in fn(b)]
            rows_in, rows = rows, sum(b.num_rows for b in blocks)
            timings.append((name, rows, len(blocks), time.perf_counter() - t, rows_in))
        _release_now_and_then(sum(b.nbytes for b in blocks))
        return blocks, timings


_made = 0  # bytes of blocks made since Arrow's allocator last gave freed pages back


def _release_now_and_then(nbytes: int) -> None:
    """Hand the decoders' freed scratch pages back to the OS once a quarter of the in-flight
    budget has been made since the last time.  Arrow's allocator keeps freed pages per thread
    (peak RSS 2.2-3x the budget, measured); giving them back after every job costs every read
    fresh page faults instead (a file's decode 2x slower, measured)."""
    global _made
    _made += nbytes
    if _made >= DataContext.get_current().max_bytes_in_flight // 4:
        _made = 0
        pa.default_memory_pool().release_unused()


def _refuse_infeasible(chain: list[tuple[str, BlockFn]]) -> None:
    """A map of the chain asking for more CPUs or GPUs than exist fails now (Ray would wait forever)."""
    maps = [fn for _, fn in chain if isinstance(fn, MapBatches) and (fn.num_gpus or fn.num_cpus)]
    if maps:
        from muster.data.actor_pool import ensure_resources_exist

        for op in maps:
            ensure_resources_exist(op)


def _stream(node: Node, epoch: int, stats: Stats) -> Iterator[pa.Table]:
    chain: list[tuple[str, BlockFn]] = []
    while isinstance(node.op, Transform) and not node.op.on_actors:
        chain.append((node.op.name, node.op.fn))
        node = node.inputs[0]
    chain.reverse()
    _refuse_infeasible(chain)
    op = node.op
    upstream: Iterator[pa.Table]
    if isinstance(op, Transform):  # a callable class on an actor pool: a stage of its own
        upstream = _actor_stage(op, _stream(node.inputs[0], epoch, stats), stats, epoch)
    elif isinstance(op, Read):
        yield from _run(_read_jobs(op.name, op.tasks, chain, epoch), stats)
        return
    elif isinstance(op, AllToAll):
        child = node.inputs[0]
        if op.reorders_reads is not None and isinstance(child.op, Read):  # streaming: reorder the reads only
            name = child.op.name
            yield from _run(_read_jobs(name, op.reorders_reads(child.op.tasks, epoch), chain, epoch), stats)
            return
        upstream = _timed(op.name, node.inputs, lambda blocks: op.fn(blocks, epoch), epoch, stats)
    elif isinstance(op, Join):
        upstream = _timed(op.name, node.inputs, op.fn, epoch, stats)
    elif isinstance(op, Zip):
        upstream = _timed(op.name, node.inputs, lambda *inputs: op.fn(list(inputs)), epoch, stats)
    elif isinstance(op, Limit):
        upstream = _limit(_stream(node.inputs[0], epoch, stats), op.n)
    elif isinstance(op, Union) and op.weights is not None:
        from muster.data.mix import mix_blocks

        upstream = mix_blocks([_stream(child, epoch, stats) for child in node.inputs], op.weights, op.stop_on_shortest)
    elif isinstance(op, Union):
        upstream = (b for child in node.inputs for b in _stream(child, epoch, stats))
    else:  # pragma: no cover - every operator is handled above
        raise TypeError(f"unknown operator {op!r}")
    if not chain:
        yield from upstream
    else:
        yield from _run(_block_jobs(upstream, chain, epoch), stats)


def _bundle_rows(chain: list[tuple[str, BlockFn]]) -> int | None:
    """The rows a chain's input is bundled into: its first explicit ``map_batches`` batch size (counted on the
    chain's input: a ``filter`` before it leaves its batches smaller)."""
    return next((fn.bundle_rows for _, fn in chain if isinstance(fn, MapBatches) and fn.bundle_rows), None)


def _read_jobs(name: str, tasks: Sequence[ReadTask], chain: list[tuple[str, BlockFn]], epoch: int) -> Iterator[Job]:
    """One job per read task, applying ``chain`` to its blocks. When the chain starts with a ``map_batches`` of an
    explicit batch size, consecutive tasks known to make fewer rows share a job until they make that many, so
    that its batches span them (``range(60, override_num_blocks=20)`` in batches of 8, not 3). A job is numbered
    as its first task (``TaskContext.task_idx``)."""
    rows = _bundle_rows(chain)
    if not rows:
        yield from (Job(t.read, name, chain, t.size, i, epoch) for i, t in enumerate(tasks))
        return
    first, group, held = 0, list[ReadTask](), 0
    for i, t in enumerate(tasks):
        group.append(t)
        held += t.rows or 0
        if t.rows is None or held >= rows or i == len(tasks) - 1:
            read = group[0].read if len(group) == 1 else functools.partial(_read_all, [g.read for g in group])
            yield Job(read, name, chain, sum(g.size for g in group), first, epoch)
            first, group, held = i + 1, [], 0


def _read_all(reads: list[Callable[[], list[pa.Table]]]) -> list[pa.Table]:
    return [b for read in reads for b in read()]


def _block_jobs(blocks: Iterator[pa.Table], chain: list[tuple[str, BlockFn]], epoch: int) -> Iterator[Job]:
    """One job per block, applying ``chain`` to it (task ``i`` for the ``i``-th block); blocks smaller than an
    explicit ``map_batches`` batch size first combined until they hold it."""
    rows = _bundle_rows(chain)
    if rows:
        blocks = blk.bundled(blocks, rows)
    return (Job(functools.partial(_one, b), None, chain, blk.nbytes(b), i, epoch) for i, b in enumerate(blocks))


def _actor_stage(op: Transform, upstream: Iterator[pa.Table], stats: Stats, epoch: int) -> Iterator[pa.Table]:
    """``op``'s blocks from its actor pool, or from this process's threads when no pool can start now."""
    from muster.data.actor_pool import ActorPool

    assert isinstance(op.fn, MapBatches)
    pool = ActorPool.start(op.fn, op.name)
    if pool is None:
        yield from _run(_block_jobs(upstream, [(op.name, op.fn)], epoch), stats)
        return
    if op.fn.bundle_rows:
        upstream = blk.bundled(upstream, op.fn.bundle_rows)
    try:
        yield from pool.map(upstream, stats, DataContext.get_current().preserve_order)
    finally:
        pool.close()


def _timed(name: str, inputs: Sequence[Node], make: Callable[..., list[pa.Table] | Iterator[pa.Table]], epoch: int,
           stats: Stats) -> Iterator[pa.Table]:
    """The blocks ``make(blocks of each input)`` returns, once every input is gathered (their stages run and
    count first), as one task of stage ``name``: the time spent making them (lazily, too) counted for it."""
    gathered = [list(_stream(child, epoch, stats)) for child in inputs]
    stats.open_stage(name, sum(b.num_rows for blocks in gathered for b in blocks))
    clock, made = TaskClock(), list[tuple[int, int]]()
    try:
        with clock:
            out = iter(make(*gathered))
        del gathered
        counted = 0.0  # the busy seconds already added for ``name``
        while True:
            with clock:
                b = next(out, None)
            busy, counted = clock.wall_s - counted, clock.wall_s
            if b is None:
                stats.add(name, 0, 0, busy)
                return
            stats.add(name, b.num_rows, 1, busy)
            made.append((b.num_rows, blk.nbytes(b)))
            yield b
    finally:
        stats.add_task(name, clock.took(), made)


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
    waiting: Job | None = None  # the next job, when it did not fit in the budget (or its limit) yet
    blocked_since: float | None = None  # when the budget began holding ``waiting`` back
    exhausted = False
    grown = [0, 0]  # bytes read, bytes of blocks made: how much a job's output outgrows its input
    probe = _Probe()  # whether this pipeline's jobs are worth a worker's round trip

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
                job.context = ctx
                limit = job.limit(ctx.max_threads)
                if limit is not None and sum(1 for _, f, _ in pending if not f.done()) >= limit:
                    waiting = job  # concurrency= / num_cpus= of a map in its chain
                    break
                if pending and in_flight() + estimate(job) > ctx.max_bytes_in_flight:
                    waiting = job  # the head job is always admitted, so the pipeline moves
                    if blocked_since is None:
                        blocked_since = time.perf_counter()
                    break
                if blocked_since is not None:
                    stats.add_blocked(job.stage, time.perf_counter() - blocked_since)
                    blocked_since = None
                fut = None
                if workers is not None and job.needs_process and probe.to_workers():
                    if probe.holds_back():
                        waiting = job
                        break
                    fut = workers.submit(job, sum(1 for _, f, r in pending if r and not f.done()) - probe.holding())
                    probe.started(fut)
                pending.append((job, fut, True) if fut is not None
                               else (job, pool.submit(contextvars.copy_context().run, job), False))
            if not pending:
                return
            if probe.holds_back():
                probe.judge()
                continue
            job, head, remote = pending.popleft()
            blocks, timings, took = _result(job, head, remote, workers)
            probe.finished(took)
            for name, rows, count, secs, rows_in in timings:
                stats.add(name, rows, count, secs, rows_in)
            # a read takes no rows from another stage (as Ray counts); a block task, its input block's
            stats.add_task(job.label, took, stats_sizes(blocks),
                           0 if job.source_name is not None or not timings else timings[0][4])
            made = sum(blk.nbytes(b) for b in blocks)
            if job.size:
                grown[0] += job.size
                grown[1] += made
            stats.set_in_flight(job.stage, in_flight() + made)
            yield from blocks
    finally:
        if blocked_since is not None and waiting is not None:
            stats.add_blocked(waiting.stage, time.perf_counter() - blocked_since)
        for _, f, remote in pending:
            if not remote:  # the engine's futures are the engine's to settle
                f.cancel()


class _Probe:
    """Whether a pipeline's jobs that run Python go to pooled workers. A worker's round trip costs about a
    millisecond, more than a map over a tiny block takes, so a small source cut into a few blocks per CPU would
    pay it per block: the first such job goes out alone, for up to ``probe_s``. Back by then, the jobs are cheap,
    and the next ones run on this process's threads, until one takes longer than ``probe_s``; still out, the
    jobs are slow, and go to idle workers as before (a slow map over 8 rows waits ``probe_s`` once)."""

    probe_s = 0.005

    def __init__(self) -> None:
        self.head: Future[Any] | None = None  # the job that went out first
        self.deadline = 0.0
        self.cheap: bool | None = None  # None: not known yet

    def to_workers(self) -> bool:
        return not self.cheap

    def holds_back(self) -> bool:
        """Whether the first job is out and not yet judged: then no other job starts."""
        return self.cheap is None and self.head is not None

    def started(self, fut: Future[Any] | None) -> None:
        if fut is not None and self.head is None:
            self.head, self.deadline = fut, time.perf_counter() + self.probe_s

    def holding(self) -> int:
        """1 while the first job, judged slow, still runs: it holds a CPU the engine no longer counts as free."""
        return int(self.cheap is False and self.head is not None and not self.head.done())

    def judge(self) -> None:
        """Wait for the first job until ``probe_s`` after it went out, and judge the pipeline by it."""
        assert self.head is not None
        wait([self.head], timeout=max(0.0, self.deadline - time.perf_counter()))
        self.cheap = self.head.done()

    def finished(self, took: TaskTime) -> None:
        if self.cheap and took.wall_s > self.probe_s:
            self.cheap = False


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
            # (never a job that asks for GPUs: here it would use a GPU it does not hold)
            if waited >= workers.steal_after_s and not job.holds_gpus and not workers.has_free_cpu():
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
    still queued after ``steal_after_s`` while no CPU is free runs here instead, unless it asks for
    GPUs (it waits for a worker that holds one).
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
        """Submit ``job`` if its resources (a CPU by default) are free beyond the ``mine`` jobs this
        pipeline already has out. A job that asks for GPUs is always submitted, to wait in the engine for
        a worker holding them: on the driver's threads it would use a GPU it does not hold."""
        try:
            if not job.holds_gpus and self.runtime.capacity(job.resources()) - mine < 1:
                return None
            said = functools.partial(_say_gpu_wait, job.stage) if job.holds_gpus else None
            fut: Future[Any] = self.runtime.submit(job, (), {}, job.resources(), label="muster.data", on_wait=said)
            return fut
        except Exception:  # noqa: BLE001 - not picklable, engine gone: run it here
            return None


def _say_gpu_wait(stage: str, message: str) -> None:
    """A batch asking for GPUs waits for a worker that holds one, while other work holds them all: say so."""
    logging.getLogger("muster.data").warning("muster.data: a %s batch waits for a GPU. %s", stage, message)
