"""Live view of a Tune experiment: the trial table.

On a TTY: a rich table (trial, status, config, iterations, latest metric,
best so far), refreshed a few times a second, with the scheduler's summary.
Elsewhere: a line per trial event (started, stopped, failed) and a status
line every few seconds.  ``verbose=0`` prints nothing.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from muster.core import settings

_PLAIN_EVERY_S = 10.0
_MAX_ROWS = 20


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def flatten_config(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{'a': {'b': 1}}`` -> ``{'a/b': 1}`` (Ray's ``config/a/b`` column names)."""
    out: dict[str, Any] = {}
    for k, v in config.items():
        if isinstance(v, dict):
            out.update(flatten_config(v, f"{prefix}{k}/"))
        else:
            out[f"{prefix}{k}"] = v
    return out


class TuneProgress:
    def __init__(self, name: str, path: str, metric: str | None, mode: str | None, verbose: int):
        self.name, self.path, self.metric, self.mode, self.verbose = name, path, metric, mode, verbose
        self._start = time.monotonic()
        self._trials: list[Any] = []
        self._note = ""
        self._live: Any = None
        self._lock = threading.Lock()
        self._last_plain = time.monotonic()
        self.interrupted = False  # set by the loop on Ctrl-C: the last line says so
        self._rich = verbose > 0 and sys.stdout.isatty() and not settings.force_plain_progress()

    def start(self) -> None:
        if self._rich:
            from rich.live import Live

            self._live = Live(get_renderable=self._render, refresh_per_second=4, transient=False)
            self._live.start()
        self.event(f"experiment {self.name!r} -> {self.path}")

    def update(self, trials: list[Any], note: str) -> None:
        with self._lock:
            self._trials, self._note = list(trials), note
        if not self._rich and self.verbose and time.monotonic() - self._last_plain > _PLAIN_EVERY_S:
            self._last_plain = time.monotonic()
            self._print(self.summary())

    def stop(self, trials: list[Any]) -> None:
        with self._lock:
            self._trials = list(trials)
        if self._live is not None:
            self._live.stop()
            self._live = None
        ended = "interrupted" if self.interrupted else "done"
        self.event(f"experiment {self.name!r} {ended} after {time.monotonic() - self._start:.1f} s: {self.summary()}")

    def event(self, text: str) -> None:
        if self.verbose:
            self._print(text)

    # -- rendering ---------------------------------------------------------------------
    def summary(self) -> str:
        counts: dict[str, int] = {}
        for t in self._trials:
            counts[t.status] = counts.get(t.status, 0) + 1
        parts = [f"{n} {s}" for s, n in sorted(counts.items())]
        best = self.best()
        if best is not None:
            parts.append(f"best {self.metric}={_fmt(best[1])} ({best[0].trial_name})")
        return ", ".join(parts) or "no trials yet"

    def best(self) -> tuple[Any, float] | None:
        if not self.metric or self.mode not in ("min", "max"):
            return None
        scored = [
            (t, t.last_result[self.metric]) for t in self._trials
            if isinstance(t.last_result.get(self.metric), (int, float))
        ]
        if not scored:
            return None
        pick = min if self.mode == "min" else max
        return pick(scored, key=lambda x: x[1])

    def _print(self, text: str) -> None:
        line = f"[muster.tune] {text}"
        if self._live is not None:
            self._live.console.print(line, markup=False, highlight=False)
        else:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def _render(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        with self._lock:
            trials, note = list(self._trials), self._note
        elapsed = time.monotonic() - self._start
        table = Table(title=f"{self.name}  {elapsed:.0f} s  {note}", title_justify="left")
        keys: list[str] = []
        for t in trials:
            for k in flatten_config(t.config):
                if k not in keys:
                    keys.append(k)
        keys = keys[:5]
        for col in ["trial", "status", *keys, "iter", self.metric or "metric"]:
            table.add_column(col, overflow="fold")
        shown = sorted(trials, key=lambda t: (t.status != "RUNNING", t.trial_id))[:_MAX_ROWS]
        for t in shown:
            flat = flatten_config(t.config)
            value = t.last_result.get(self.metric, "-") if self.metric else "-"
            table.add_row(
                Text(t.trial_id), Text(t.status), *[Text(_fmt(flat.get(k, "-"))) for k in keys],
                Text(str(t.last_result.get("training_iteration", "-"))), Text(_fmt(value)),
            )
        footer = Text(self.summary() + (f"   (+{len(trials) - _MAX_ROWS} more)" if len(trials) > _MAX_ROWS else ""))
        return Group(table, footer)
