"""``map_batches(CallableClass, concurrency=...)``: a pool of long-lived actors on muster's runtime.

Each actor is a process of the engine holding ``num_cpus`` (default 1) and
``num_gpus`` of its resources; it builds the user's class once, with
``fn_constructor_args/kwargs``, and then maps every block it is sent.  A block
goes to the least busy actor (fewest blocks in flight, at most
``_PER_ACTOR`` each).  ``concurrency=n`` starts ``n`` actors; ``(min, max)``
starts ``min`` and adds one, up to ``max``, whenever a block is ready and
every actor already has a full queue.  Output keeps the input order unless
``DataContext.preserve_order`` is off.

**Never waits for CPUs.**  A request the machine can never satisfy fails at
once (``ResourcesUnavailableError`` naming what was asked and what exists).
Otherwise the pool starts only the actors whose resources are free *now*
(and waits at most ``_START_WAIT_S`` for a race); with none free -- a
training gang holds every CPU -- or inside a training worker, the class runs
in the consumer's threads instead and one log line says why.  A pool also
never grows by waiting.  A pool in the driver starts muster's engine if it is
not running yet (the user asked for actors).  An actor that dies has its block re-run in the
consumer once, and leaves the pool.
"""

from __future__ import annotations

import collections
import logging
import os
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any, Iterator

import pyarrow as pa

from muster.core import resources as res
from muster.core.runtime import Runtime, RuntimeActor
from muster.data import block as blk
from muster.data.plan import MapBatches
from muster.data.stats import TaskClock, TaskTime
from muster.data.stats import sizes as block_sizes
from muster.exceptions import ActorDiedError, GetTimeoutError, TaskError

_log = logging.getLogger("muster.data")
_PER_ACTOR = 2  # blocks in flight per actor: one running, one queued behind it
_FREEING_S = 1.0  # how long a new pool waits for CPUs that killed actors are giving back
_START_WAIT_S = 5.0  # at most this long for resources that looked free (another caller may take them)
_said: set[str] = set()


def _say_once(message: str) -> None:
    """Log a fallback's reason once per process (a pass per epoch would repeat it every epoch)."""
    if message not in _said:
        _said.add(message)
        _log.warning(message)


class UdfActor:
    """What runs in each actor's process: the user's class, built once; then blocks in, blocks out."""

    def __init__(self) -> None:
        self._op: MapBatches | None = None
        self._inst: Any = None

    def setup(self, op: MapBatches, context: Any = None) -> int:
        """Build the user's class (its constructor runs here, once); return this process's pid. ``context``:
        the consumer's ``DataContext``, under which its blocks are converted (``batch_format`` settings)."""
        from muster.data.context import DataContext

        if context is not None:  # the process's own: an actor serves one pool
            DataContext._current = context
        self._op, self._inst = op, op.build()
        return os.getpid()

    def run(self, block: pa.Table) -> tuple[list[pa.Table], TaskTime]:
        """The blocks the user's class makes of ``block``, and the times of this task (for ``stats()``)."""
        assert self._op is not None  # setup() came first
        clock = TaskClock()
        with clock:
            out = self._op.apply(block, self._inst)
        return out, clock.took()


class _Member:
    def __init__(self, actor: RuntimeActor, pid: int):
        self.actor, self.pid, self.in_flight = actor, pid, 0

    def submit(self, block: pa.Table) -> Future[Any]:
        self.in_flight += 1
        fut: Future[Any] = self.actor.call("run", block)
        return fut


def describe(op: MapBatches) -> str:
    """``map_batches(Cls, concurrency=2, num_cpus=1)`` (``map(fn, num_gpus=1)``): how a request is named in messages."""
    return op.described()


def ensure_feasible(op: MapBatches, request: dict[str, float], total: dict[str, float]) -> None:
    """Raise ``ResourcesUnavailableError`` at once if one ``request`` of ``op`` can never fit in ``total``
    (Ray would wait for it forever); the message names the op, what was asked, what exists and the fix."""
    res.ensure_feasible(request, 1, total, what=describe(op), knob="its num_cpus= / num_gpus= (what each of its "
                        "tasks or actors holds)", no_gpu_fix=res.NO_GPU_OPTION_FIX)


def ensure_resources_exist(op: MapBatches) -> None:
    """A map run as tasks or in threads (a function, or a class without ``concurrency=``) that asks for
    ``num_cpus`` or ``num_gpus`` more than muster's engine (or, before it starts, this machine) has fails at
    once, as a pool does; in a training worker it runs in the worker's threads, as a pool's class does."""
    from muster.core import api, context
    from muster.core.local.slots import detect_total

    request = {k: float(v) for k, v in (("CPU", op.num_cpus), ("GPU", op.num_gpus)) if v}
    if not request or context.in_worker():
        return
    runtime = api.running()
    total = runtime.resources() if runtime is not None else detect_total(None, None, None)
    ensure_feasible(op, request, total)


def request_of(op: MapBatches) -> dict[str, float]:
    """The resources one actor holds: ``num_cpus`` (default 1) and ``num_gpus``."""
    return res.normalize({"CPU": 1.0 if op.num_cpus is None else op.num_cpus, "GPU": op.num_gpus or 0.0},
                         what=describe(op))


def sizes(op: MapBatches) -> tuple[int, int]:
    c = op.concurrency
    return (c, c) if isinstance(c, int) else (int(c[0]), int(c[1])) if c is not None else (1, 1)


def _capacity_soon(runtime: Runtime, request: dict[str, float], want: int, wait_s: float = _FREEING_S) -> int:
    """How many actors of ``request`` fit, waiting up to ``wait_s`` for ``want`` to: a pool that just
    ended (the pass before) gives its CPUs back as its killed actors' deaths are seen, within ms to
    half a second; without the wait the next pool started short or not at all."""
    deadline = time.monotonic() + wait_s
    fits = runtime.capacity(request)
    while fits < want and time.monotonic() < deadline:
        time.sleep(0.02)
        fits = runtime.capacity(request)
    return fits


class ActorPool:
    """The actors of one ``map_batches`` operator for one pass. Use ``start``, then ``map``, then ``close``."""

    def __init__(self, runtime: Runtime, op: MapBatches, name: str):
        self.runtime, self.op, self.name = runtime, op, name
        self.request = request_of(op)
        self.min_size, self.max_size = sizes(op)
        self.members: list[_Member] = []

    @staticmethod
    def start(op: MapBatches, name: str) -> "ActorPool | None":
        """A pool of ``min`` actors (fewer if fewer fit now), or None: run in this process (logged).

        Raises:
            ResourcesUnavailableError: one actor's resources exceed what the machine has.
        """
        from muster.core import api, context

        if context.in_worker():
            _say_once(f"muster.data: {describe(op)} runs in this worker's threads, not in actors: its CPUs "
                      "belong to the gang (an actor pool would wait for them).")
            return None
        runtime = api.get_runtime()
        pool = ActorPool(runtime, op, name)
        ensure_feasible(op, pool.request, runtime.resources())
        fits = _capacity_soon(runtime, pool.request, pool.min_size)
        if fits < 1:
            _say_once(f"muster.data: {describe(op)} runs in this process's threads, not in actors: none of "
                      f"{{{res.fmt(pool.request)}}} is free now (something, e.g. a training gang, holds it).")
            return None
        want = min(pool.min_size, fits)
        if want < pool.min_size:
            _log.warning("muster.data: %s starts %d actor(s), not %d: only that many x {%s} are free now.",
                         describe(op), want, pool.min_size, res.fmt(pool.request))
        pool._add(want)
        if not pool.members:
            _log.warning("muster.data: %s runs in this process's threads: its actors' resources were taken "
                         "meanwhile.", describe(op))
            return None
        return pool

    def _grow(self) -> _Member | None:
        """One more actor, if the pool may grow and its resources are free now; never waits long."""
        if len(self.members) >= self.max_size or self.runtime.capacity(self.request) < 1:
            return None
        added = self._add(1)
        return added[0] if added else None

    def _add(self, n: int) -> list[_Member]:
        """Start ``n`` actors together (their constructors run in parallel); none if they are not free."""
        try:
            actors = self.runtime.create_gang(n, UdfActor, self.request, timeout_s=_START_WAIT_S)
        except GetTimeoutError:
            return []
        from muster.data.context import DataContext

        try:
            ctx = DataContext.get_current()
            pids = [int(f.result()) for f in [a.call("setup", self.op, ctx) for a in actors]]
        except TaskError as exc:  # the constructor raised: its own error, as if it had run here
            self._kill(actors)
            raise exc.cause if exc.cause is not None else exc from None
        except BaseException:
            self._kill(actors)
            raise
        added = [_Member(a, pid) for a, pid in zip(actors, pids)]
        self.members += added
        return added

    def _kill(self, actors: list[RuntimeActor]) -> None:
        for actor in actors:
            self.runtime.kill(actor)

    def close(self) -> None:
        self._kill([m.actor for m in self.members])
        self.members = []

    @property
    def pids(self) -> list[int]:
        return [m.pid for m in self.members]

    # -- the stage ------------------------------------------------------------------
    def _least_busy(self) -> _Member | None:
        self.members = [m for m in self.members if m.actor.is_alive()]  # a dead one's blocks re-run here
        open_ = [m for m in self.members if m.in_flight < _PER_ACTOR]
        return min(open_, key=lambda m: m.in_flight) if open_ else self._grow()

    def map(self, upstream: Iterator[pa.Table], stats: Any, ordered: bool = True) -> Iterator[pa.Table]:
        """Send upstream blocks to the actors; yield what they make (in input order when ``ordered``)."""
        pending: collections.deque[tuple[pa.Table, Future[Any], _Member]] = collections.deque()
        source = iter(upstream)
        held: pa.Table | None = None  # the next block, while every actor is full
        exhausted = False
        while True:
            while not exhausted:
                block = held if held is not None else next(source, None)
                held = None
                if block is None:
                    exhausted = True
                    break
                member = self._least_busy()
                if member is None:
                    held = block
                    break
                pending.append((block, member.submit(block), member))
            stats.set_in_flight(self.name, sum(blk.nbytes(b) for b, _, _ in pending), len(self.members))
            if not pending:
                return
            if ordered:
                item = pending.popleft()
            else:
                wait([f for _, f, _ in pending], return_when=FIRST_COMPLETED)
                item = next(p for p in pending if p[1].done())
                pending.remove(item)
            yield from self._result(*item, stats)

    def _result(self, block: pa.Table, fut: Future[Any], member: _Member, stats: Any) -> list[pa.Table]:
        try:
            out, took = fut.result()
        except TaskError as exc:  # the UDF's own error (it names the operator, function and first row)
            if exc.cause is not None:
                raise exc.cause from None
            raise
        except ActorDiedError as exc:  # killed, out of memory: this block runs here, the actor leaves
            _log.warning("muster.data: an actor of %s died (%s); its block runs in this process.",
                         describe(self.op), exc)
            if member in self.members:
                self.members.remove(member)
            clock = TaskClock()
            with clock:
                out = self.op(block)
            took = clock.took()
        finally:
            member.in_flight -= 1
        stats.add(self.name, sum(b.num_rows for b in out), len(out), took.wall_s, rows_in=block.num_rows)
        stats.add_task(self.name, took, block_sizes(out), block.num_rows)
        return list(out)
