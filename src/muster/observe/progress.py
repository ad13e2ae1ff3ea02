"""Live view of a training run in the terminal.

On a TTY: a compact rich panel (workers up, latest metrics of rank 0,
reports per second, latest checkpoint), refreshed a few times a second.
Elsewhere (CI logs, files): plain lines, at most one every few seconds, plus
one per event.  ``verbose=0`` prints nothing; ``verbose=2`` a line per report.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from typing import Any

from muster.core import settings
from muster.observe.data_progress import OpSample, format_op

_PLAIN_EVERY_S = 5.0
_HIDDEN = {"training_iteration", "_rank", "timestamp", "_attempt", "_round", "checkpoint_dir_name", "_own_run_keys"}


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


class ProgressView:
    def __init__(self, run_name: str, num_workers: int, verbose: int, run_path: str):
        self.run_name, self.num_workers, self.verbose, self.run_path = run_name, num_workers, verbose, run_path
        self.workers_up = 0
        self.state = "starting"
        self.latest: dict[str, Any] = {}
        self.iteration = 0
        self.checkpoint = "-"
        self.attempt = 0
        self._times: deque[float] = deque(maxlen=200)
        self._start = time.monotonic()
        self._lock = threading.Lock()
        self._print_lock = threading.Lock()
        self._last_plain = 0.0
        self._last_data = 0.0
        self.data_ops: list[OpSample] = []  # rank 0's dataset operators, latest sample
        self._live: Any = None
        self._rich = verbose > 0 and sys.stdout.isatty() and not settings.force_plain_progress()

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> None:
        if self._rich:
            from rich.live import Live

            self._live = Live(get_renderable=self._render, refresh_per_second=4, transient=False)
            self._live.start()
        self.event(f"run {self.run_name!r} -> {self.run_path}")

    def stop(self, status: str) -> None:
        self.state = status
        if self._live is not None:
            self._live.stop()
            self._live = None
        self.event(f"run {self.run_name!r} {status} after {time.monotonic() - self._start:.1f} s"
                   + (f"; last report: {self._metrics_line()}" if self.latest else ""))

    # -- updates (any thread) -----------------------------------------------------
    def set_state(self, state: str, workers_up: int | None = None, attempt: int | None = None) -> None:
        with self._lock:
            self.state = state
            if workers_up is not None:
                self.workers_up = workers_up
            if attempt is not None:
                self.attempt = attempt

    def on_report(self, row: dict[str, Any], lead: bool) -> None:
        now = time.monotonic()
        with self._lock:
            self._times.append(now)
            if not lead:
                return
            self.latest = {k: v for k, v in row.items() if k not in _HIDDEN}
            self.iteration = row.get("training_iteration", self.iteration)
        if self.verbose == 2 or (not self._rich and self.verbose and now - self._last_plain > _PLAIN_EVERY_S):
            self._last_plain = now
            rate = self.rate()  # 0 until a second of history: not shown then, rather than "0.0 reports/s"
            shown_rate = f" | {rate:.1f} reports/s" if rate else ""
            self._print(f"iter {self.iteration} | {self._metrics_line()}{shown_rate}")

    def on_data(self, rank: int, ops: list[OpSample]) -> None:
        """A worker's muster.data operators (rank 0's are shown: every rank runs the same pipeline)."""
        if rank != 0 or not ops:
            return
        last = max(op.execution for op in ops)
        with self._lock:
            self.data_ops = [op for op in ops if op.execution == last]
        now = time.monotonic()
        if not self._rich and self.verbose and now - self._last_data > _PLAIN_EVERY_S:
            self._last_data = now
            for op in self.data_ops:
                self._print(f"data rank 0: {format_op(op)}")

    def on_checkpoint(self, name: str) -> None:
        self.checkpoint = name
        if self.verbose == 2:
            self.event(f"checkpoint committed: {name}")

    def event(self, text: str) -> None:
        if self.verbose:
            self._print(text)

    # -- rendering -------------------------------------------------------------------
    def rate(self) -> float:
        """Reports per second over the recent window (0 until a second of history exists)."""
        with self._lock:
            if len(self._times) < 2:
                return 0.0
            span = time.monotonic() - self._times[0]
            return len(self._times) / span if span >= 1.0 else 0.0

    def _metrics_line(self) -> str:
        return " ".join(f"{k}={_fmt(v)}" for k, v in list(self.latest.items())[:8]) or "-"

    def _print(self, text: str) -> None:
        line = f"[muster] {text}"
        with self._print_lock:  # reader threads and the controller both print
            if self._live is not None:
                self._live.console.print(line, markup=False, highlight=False)
            else:
                sys.stdout.write(line + "\n")
                sys.stdout.flush()

    def _render(self) -> Any:
        from rich.table import Table
        from rich.text import Text

        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold cyan")
        table.add_column()
        elapsed = time.monotonic() - self._start
        rows = [
            ("run", f"{self.run_name}  ({self.state})  attempt {self.attempt + 1}  {elapsed:.0f} s"),
            ("workers", f"{self.workers_up}/{self.num_workers} up"),
            ("iteration", f"{self.iteration}   ({self.rate():.1f} reports/s)"),
            ("metrics", self._metrics_line()),
            ("checkpoint", self.checkpoint),
        ]
        rows += [("data", format_op(op)) for op in self.data_ops]
        for name, value in rows:
            table.add_row(name, Text(value))  # Text: brackets in names or metrics are not markup
        return table
