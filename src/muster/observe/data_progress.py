"""Live view of a dataset pass in the terminal: one line per operator.

Each line: rows in and out, rows/s, bytes in flight against the budget, the
time a ready task was held back by that budget (backpressure), and the actors
of a pool.  On a TTY a rich panel refreshes in place (and goes away when the
pass ends); elsewhere (CI logs, files) plain ``[muster.data]`` lines, one set
per period.  Nothing is shown for a pass shorter than one period.  The same
``format_op`` line is what the training view shows for a worker's pipeline.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable

from muster.core import settings


@dataclass(frozen=True)
class OpSample:
    """One dataset operator's counters at one moment: what the live view shows, what a training
    worker's samples carry to the driver (``figures["data"]``) and what the run store keeps (``data_ops``).

    ``rows_per_s`` is over the pass so far; ``blocked_s`` is how long a ready task was held back
    because ``bytes_in_flight`` of the stage had reached ``budget_bytes``; ``execution`` numbers the
    passes of one process; ``done`` says the pass has ended.
    """

    op: str
    rows_in: int
    rows_out: int
    blocks: int
    busy_s: float
    bytes_in_flight: int
    blocked_s: float
    actors: int
    rows_per_s: float
    budget_bytes: int
    execution: int = 0
    done: bool = False


Snapshot = Callable[[], list[OpSample]]


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f}"


def format_op(op: OpSample) -> str:
    """``MapBatches(f): 1,200 in -> 1,180 out, 540 rows/s, 1.2/256.0 MiB in flight, blocked 0.3 s``."""
    text = (f"{op.op}: {op.rows_in:,} in -> {op.rows_out:,} out, {op.rows_per_s:,.0f} rows/s, "
            f"{_mib(op.bytes_in_flight)}/{_mib(op.budget_bytes)} MiB in flight, blocked {op.blocked_s:.1f} s")
    if op.actors:
        text += f", {op.actors} actors"
    return text


class DataProgress:
    """Shows ``snapshot()`` (one sample per operator) every ``every_s`` until ``stop()``."""

    def __init__(self, snapshot: Snapshot, every_s: float):
        self._snapshot, self._every = snapshot, every_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._live: Any = None
        self._rich = sys.stdout.isatty() and not settings.force_plain_progress()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="muster-data-progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _loop(self) -> None:
        while not self._stop.wait(self._every):
            try:
                if self._rich:
                    if self._live is None:
                        from rich.live import Live

                        self._live = Live(get_renderable=self._render, refresh_per_second=2, transient=True)
                        self._live.start()
                else:
                    lines = [f"[muster.data] {format_op(op)}" for op in self._snapshot()]
                    if lines and not self._stop.is_set():
                        sys.stdout.write("\n".join(lines) + "\n")
                        sys.stdout.flush()
            except Exception:  # noqa: BLE001 - a closed stdout must not break the pipeline
                return

    def _render(self) -> Any:
        from rich.text import Text

        return Text("\n".join(format_op(op) for op in self._snapshot()))
