"""Live view of a Tune experiment: the trial table.

On a TTY: a rich table (trial, status, config, iterations, latest metric,
best so far), refreshed a few times a second, with the scheduler's summary.
Elsewhere: a line per trial event (started, stopped, failed) and a status
line every few seconds.  ``verbose=0`` prints nothing.  Ray's
``RunConfig(progress_reporter=CLIReporter(...))`` picks the table's columns,
rows and order (and off a terminal, prints the table every
``max_report_frequency`` seconds); a reporter of the user's own replaces the
table (``muster.tune.progress_reporter``).
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
        self.columns: Any = None  # a CLIReporter's choice of columns
        self.user: Any = None  # a reporter of the user's own, which replaces the table
        self._start = time.monotonic()
        self._trials: list[Any] = []
        self._note = ""
        self._live: Any = None
        self._lock = threading.Lock()
        self._last_plain = time.monotonic()
        self.interrupted = False  # set by the loop on Ctrl-C: the last line says so
        self._rich = verbose > 0 and sys.stdout.isatty() and not settings.force_plain_progress()

    def use(self, reporter: Any) -> None:
        """Show what ``RunConfig(progress_reporter=)`` asks (before :meth:`start`)."""
        from muster.tune.progress_reporter import TuneReporterBase, UserReporter

        if isinstance(reporter, TuneReporterBase):
            self.columns = reporter
            reporter.set_search_properties(self.metric, self.mode)
        elif reporter is not None:
            self.user, self._rich = UserReporter(reporter, self.metric, self.mode), False

    def start(self) -> None:
        if self._rich:
            from rich.live import Live

            self._live = Live(get_renderable=self._render, refresh_per_second=4, transient=False)
            self._live.start()
        self.event(f"experiment {self.name!r} -> {self.path}")

    def update(self, trials: list[Any], note: str) -> None:
        with self._lock:
            self._trials, self._note = list(trials), note
        if self.user is not None:
            self.user.refresh(self._trials, note)
            return
        every = self.columns.max_report_frequency if self.columns is not None else _PLAIN_EVERY_S
        if not self._rich and self.verbose and time.monotonic() - self._last_plain > every:
            self._last_plain = time.monotonic()
            self._print(self.summary() if self.columns is None else self._table_text())

    def stop(self, trials: list[Any]) -> None:
        with self._lock:
            self._trials = list(trials)
        if self.user is not None:
            self.user.refresh(self._trials, self._note, done=True)
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self.columns is not None and not self._rich and self.verbose:
            self._print(self._table_text())  # the last table, as Ray's reporter prints one at the end
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

    def _table_text(self) -> str:
        """The table as plain text (off a terminal, with a reporter's columns)."""
        import io

        from rich.console import Console

        out = io.StringIO()
        Console(file=out, width=160, color_system=None).print(self._render())
        return "\n" + out.getvalue().rstrip()

    def _layout(self, trials: list[Any]) -> tuple[dict[str, str], dict[str, str], list[Any], int]:
        """(parameter columns, metric columns, the trials shown, rows at most): a reporter's, else the default."""
        rows = self.columns.max_progress_rows if self.columns is not None else _MAX_ROWS
        params = dict(self.columns.parameter_columns) if self.columns is not None else {}
        if not params:
            for t in trials:
                for k in flatten_config(t.config):
                    params.setdefault(k, k)
            params = dict(list(params.items())[:5])
        metrics = dict(self.columns.metric_columns) if self.columns is not None else {}
        metric = self.columns.metric if self.columns is not None and self.columns.metric else self.metric
        metrics = {"training_iteration": "iter", **metrics} if metrics else \
            {"training_iteration": "iter", (metric or "metric"): (metric or "metric")}
        order = sorted(trials, key=lambda t: (t.status != "RUNNING", t.trial_id))
        mode = self.columns.mode if self.columns is not None and self.columns.mode else self.mode
        if self.columns is not None and self.columns.sort_by_metric and metric and mode in ("min", "max"):
            scored = [t for t in trials if isinstance(t.last_result.get(metric), (int, float))]
            scored.sort(key=lambda t: t.last_result[metric], reverse=mode == "max")
            order = scored + [t for t in order if t not in scored]
        return params, metrics, order[:rows], rows

    def _render(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        with self._lock:
            trials, note = list(self._trials), self._note
        elapsed = time.monotonic() - self._start
        table = Table(title=f"{self.name}  {elapsed:.0f} s  {note}", title_justify="left")
        params, metrics, shown, rows = self._layout(trials)
        for col in ("trial", "status"):  # whole on a narrow terminal: the values' columns give way
            table.add_column(col, no_wrap=True)
        for col in [*params.values(), *metrics.values()]:
            table.add_column(col, overflow="fold")
        for t in shown:
            flat = flatten_config(t.config)
            table.add_row(Text(t.trial_id), Text(t.status), *[Text(_fmt(flat.get(k, "-"))) for k in params],
                          *[Text(_fmt(t.last_result.get(k, "-"))) for k in metrics])
        footer = Text(self.summary() + (f"   (+{len(trials) - rows} more)" if len(trials) > rows else ""))
        return Group(table, footer)
