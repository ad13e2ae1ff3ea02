"""Per-operator counters of one execution: ``Dataset.stats()`` after a pass, and the live view during one.

Every operator (a read, a map, an all-to-all) counts the rows it took in and
gave out, its blocks and busy seconds.  The stage that runs it (a run of fused
tasks, or an actor pool) also keeps the bytes it has in flight now and how
long a ready task was held back because the in-flight budget was full (time
blocked on backpressure).  ``snapshot()`` is what the live view publishes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass

from muster.data.summary import DatasetSummary
from muster.observe.data_progress import OpSample

__all__ = ["DatasetSummary", "OpStats", "Stats"]


@dataclass
class OpStats:
    rows_in: int = 0
    rows_out: int = 0
    blocks: int = 0
    busy_s: float = 0.0
    bytes_in_flight: int = 0
    blocked_s: float = 0.0
    actors: int = 0


class Stats:
    """Counters per operator for one execution. Thread-safe."""

    def __init__(self, budget: int = 0) -> None:
        self._lock = threading.Lock()
        self.ops: dict[str, OpStats] = {}
        self.started = time.perf_counter()
        self.started_at = time.time()
        self.wall = 0.0
        self.done = False
        self.budget = budget
        self.peak_bytes_in_flight = 0

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

    def summary(self) -> str:
        lines = [f"Execution: {self.wall:.3f} s wall, peak {self.peak_bytes_in_flight / 2**20:.1f} MiB in flight"]
        with self._lock:
            items = list(self.ops.items())
        for name, o in items:
            rate = o.rows_out / o.busy_s if o.busy_s > 0 else float("inf")
            extra = f", {o.actors} actors" if o.actors else ""
            blocked = f", {o.blocked_s:.3f} s blocked on backpressure" if o.blocked_s >= 0.001 else ""
            lines.append(f"  {name}: {o.rows_out} rows in {o.blocks} blocks, {o.busy_s:.3f} s busy "
                         f"({rate:,.0f} rows/s){extra}{blocked}")
        return "\n".join(lines)
