"""The counters of one execution: ``Dataset.stats()`` after a pass, and the live view during one.

Two views of the same pass:

* **Per operator** (``OpStats``): every operator (a read, a map, an all-to-all) counts the rows it took in
  and gave out, its blocks and busy seconds; the stage that runs it (a run of fused tasks, or an actor
  pool) also keeps the bytes it has in flight now and how long a ready task was held back because the
  in-flight budget was full (time blocked on backpressure).  ``snapshot()`` is what the live view publishes.
* **Per stage** (``StageStats``): what Ray's ``Dataset.stats()`` calls an operator, a read with the
  transforms fused into its tasks (``ReadRange->Map(<lambda>)``), the transforms after an all-to-all
  operator, an actor pool, an all-to-all operator: each of its tasks' wall and CPU seconds and start and
  end, and the rows and bytes of each block it made.  ``summary()`` prints them as Ray 2.60 does (see
  ``stats_text``), then muster's own figures.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Sequence

import pyarrow as pa

from muster.data import block as blk
from muster.data.summary import DatasetSummary
from muster.observe.data_progress import OpSample

__all__ = ["DatasetSummary", "OpStats", "StageStats", "Stats", "TaskClock", "TaskTime", "sizes"]


def sizes(blocks: Sequence[pa.Table]) -> list[tuple[int, int]]:
    """The rows and in-memory bytes of each block, as ``Stats.add_task`` takes them."""
    return [(b.num_rows, blk.nbytes(b)) for b in blocks]


@dataclass
class OpStats:
    rows_in: int = 0
    rows_out: int = 0
    blocks: int = 0
    busy_s: float = 0.0
    bytes_in_flight: int = 0
    blocked_s: float = 0.0
    actors: int = 0


@dataclass(frozen=True)
class TaskTime:
    """When one task ran (``time.time()`` seconds, comparable between the processes of this machine) and
    what it took: wall seconds and CPU seconds of the thread that ran it."""

    start: float
    end: float
    wall_s: float
    cpu_s: float


class TaskClock:
    """Times one task, in one piece (``with clock: ...``) or in several (a generator resumed once per block:
    each ``with`` adds its wall and CPU seconds; the task starts at the first and ends at the last)."""

    def __init__(self) -> None:
        self.start: float | None = None
        self.end = 0.0
        self.wall_s = self.cpu_s = 0.0
        self._perf = self._cpu = 0.0

    def __enter__(self) -> "TaskClock":
        now = time.time()
        self.start = now if self.start is None else self.start
        self._perf, self._cpu = time.perf_counter(), time.thread_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_s += time.perf_counter() - self._perf
        self.cpu_s += time.thread_time() - self._cpu
        self.end = time.time()

    def took(self) -> TaskTime:
        start = self.start if self.start is not None else time.time()
        return TaskTime(start, max(self.end, start), self.wall_s, self.cpu_s)


@dataclass
class StageStats:
    """One stage's tasks: their times, the rows each made, and the rows and bytes of every block they made;
    ``rows_in``: the rows it took from other stages (0 for a read, as Ray counts them)."""

    rows_in: int = 0
    times: list[TaskTime] = field(default_factory=list)
    task_rows: list[int] = field(default_factory=list)
    block_rows: list[int] = field(default_factory=list)
    block_bytes: list[int] = field(default_factory=list)

    @property
    def rows_out(self) -> int:
        return sum(self.block_rows)

    @property
    def span(self) -> tuple[float, float] | None:
        """(earliest start, latest end) of its tasks; None before one has finished."""
        return (min(t.start for t in self.times), max(t.end for t in self.times)) if self.times else None


class Stats:
    """Counters of one execution, per operator and per stage. Thread-safe. ``parent``: the stats of the
    execution that made this one's input blocks (a ``materialize()``), printed before its own, as Ray does."""

    def __init__(self, budget: int = 0, parent: "Stats | None" = None) -> None:
        self._lock = threading.Lock()
        self.ops: dict[str, OpStats] = {}
        self.stages: dict[str, StageStats] = {}
        self.parent = parent
        self.started = time.perf_counter()
        self.started_at = time.time()
        self.wall = 0.0
        self.done = False
        self.budget = budget
        self.peak_bytes_in_flight = 0
        self.rows_delivered = 0  # the rows the pass handed its consumer

    def _op(self, name: str) -> OpStats:
        op = self.ops.get(name)
        if op is None:
            op = self.ops[name] = OpStats()
        return op

    def add(self, op: str, rows: int, blocks: int, seconds: float, rows_in: int | None = None) -> None:
        """``op`` made ``blocks`` blocks of ``rows`` rows in ``seconds`` from ``rows_in`` rows (a source: ``rows``)."""
        with self._lock:
            entry = self._op(op)
            entry.rows_in += rows if rows_in is None else rows_in
            entry.rows_out += rows
            entry.blocks += blocks
            entry.busy_s += seconds

    def open_stage(self, stage: str, rows_in: int = 0) -> None:
        """Place ``stage`` (taking ``rows_in`` rows) in the order now, before its first task ends (an all-to-all
        operator's one task ends after the stages it feeds have run theirs)."""
        with self._lock:
            self.stages.setdefault(stage, StageStats()).rows_in += rows_in

    def add_task(self, stage: str, took: TaskTime, made: Sequence[tuple[int, int]], rows_in: int = 0) -> None:
        """One task of ``stage`` ran (``took``), taking ``rows_in`` rows from other stages and making blocks
        of ``made`` (rows, bytes) each (see :func:`sizes`)."""
        with self._lock:
            entry = self.stages.setdefault(stage, StageStats())
            entry.rows_in += rows_in
            entry.times.append(took)
            entry.task_rows.append(sum(rows for rows, _ in made))
            entry.block_rows += [rows for rows, _ in made]
            entry.block_bytes += [nbytes for _, nbytes in made]

    def delivered(self, rows: int) -> None:
        with self._lock:
            self.rows_delivered += rows

    def set_in_flight(self, op: str, nbytes: int, actors: int | None = None) -> None:
        with self._lock:
            entry = self._op(op)
            entry.bytes_in_flight = nbytes
            if actors is not None:
                entry.actors = actors
            self.peak_bytes_in_flight = max(self.peak_bytes_in_flight,
                                            sum(o.bytes_in_flight for o in self.ops.values()))

    def add_blocked(self, op: str, seconds: float) -> None:
        with self._lock:
            self._op(op).blocked_s += seconds

    def finish(self) -> None:
        with self._lock:
            self.wall = time.perf_counter() - self.started
            self.done = True
            for entry in self.ops.values():
                entry.bytes_in_flight = 0

    def elapsed(self) -> float:
        return self.wall if self.done else time.perf_counter() - self.started

    def snapshot(self, execution: int = 0) -> list[OpSample]:
        """One sample per operator: its counters, rows/s over the execution so far, and the budget."""
        elapsed = max(self.elapsed(), 1e-9)
        with self._lock:
            return [OpSample(op=name, **asdict(o), rows_per_s=o.rows_out / elapsed, budget_bytes=self.budget,
                             execution=execution, done=self.done) for name, o in self.ops.items()]

    def copy_stages(self) -> list[tuple[str, StageStats]]:
        """This execution's stages, in the order they ran, each a copy taken under the lock."""
        with self._lock:
            return [(name, StageStats(s.rows_in, list(s.times), list(s.task_rows), list(s.block_rows),
                                      list(s.block_bytes))) for name, s in self.stages.items()]

    def copy_ops(self) -> list[tuple[str, OpStats]]:
        with self._lock:
            return [(name, OpStats(**asdict(o))) for name, o in self.ops.items()]

    def summary(self) -> str:
        """Ray 2.60's ``Dataset.stats()`` text for this execution (its parents' first), then muster's own
        figures; "" when nothing has run yet (see ``stats_text``)."""
        from muster.data.stats_text import render

        return render(self)
