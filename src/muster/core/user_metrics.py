"""User metrics (``muster.util.metrics``) across processes: how series merge, and the driver's table of them.

A series is a dict as :meth:`muster.util.metrics._Registry.snapshot` gives it: ``name``, ``kind``
(``counter``, ``gauge``, ``histogram``), ``description``, ``tags`` and cumulative values (``value``,
a gauge's ``time``; a histogram's ``boundaries``, ``buckets``, ``sum``, ``count``).

Each worker process ships the series it changed to its driver now and then (and when a task ends,
before its result), not one message per record; the driver keeps the latest of each process in a
:class:`MetricsTable`. Series with the same name and tags merge as Ray's metrics do across workers:
counters and histogram buckets add up, a gauge keeps the value set last. When a process ends, its
counters and histograms stay counted; its gauges go (their value was that process's, and Ray stops
exporting a dead worker's too).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Hashable, Iterable
from typing import Any, Callable

Series = dict[str, Any]


def series_key(s: Series) -> tuple:
    """What identifies a series across processes: its name and its tags."""
    return s["name"], tuple(sorted(s["tags"].items()))


def merge(snapshots: Iterable[Iterable[Series]]) -> list[Series]:
    """One list of series from several processes' snapshots (each cumulative)."""
    out: dict[tuple, Series] = {}
    for snap in snapshots:
        for s in snap:
            have = out.get(series_key(s))
            if have is None:
                out[series_key(s)] = {**s, "tags": dict(s["tags"]), **({"buckets": list(s["buckets"])}
                                                                        if s["kind"] == "histogram" else {})}
                continue
            if s["kind"] != have["kind"]:  # one name used for two kinds (in different processes): the first's
                continue
            if not have.get("description"):  # declared bare in one process, with a description in another
                have["description"] = s.get("description")
            if s["kind"] == "counter":
                have["value"] += s["value"]
            elif s["kind"] == "gauge":
                if s.get("time", 0) >= have.get("time", 0):
                    have["value"], have["time"] = s["value"], s.get("time", 0)
            elif len(s["buckets"]) == len(have["buckets"]):  # histograms (of the same boundaries)
                have["buckets"] = [a + b for a, b in zip(have["buckets"], s["buckets"])]
                have["sum"] += s["sum"]
                have["count"] += s["count"]
    return list(out.values())


class MetricsTable:
    """The user metrics an engine's processes shipped to its driver (``Runtime.user_metrics``). Thread-safe.

    Engines call :meth:`update` with what a process sent and :meth:`process_ended` once it is gone;
    readers call :meth:`series`. A listener (:meth:`subscribe`) hears ``fn(closing=False)`` once, at the
    first update (on the engine's thread: keep it short), and ``fn(closing=True)`` once when the engine
    shuts down.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[Hashable, dict[tuple, tuple[int, Series]]] = {}  # per process: (batch number, series)
        self._ended: dict[tuple, Series] = {}  # counters and histograms of the processes gone, merged
        self._listeners: list[Callable[[bool], None]] = []
        self._heard = False
        self._told = threading.Event()  # the listeners heard of the first update
        self._closed = False
        self.version = 0  # goes up with every change

    def update(self, process: Hashable, seq: int, series: list[Series]) -> None:
        """``process`` (any key, unique per process) sent these series in its batch number ``seq``
        (cumulative; the others unchanged). A series from an older batch than the one held is ignored."""
        if not series:
            return
        with self._lock:
            mine = self._live.setdefault(process, {})
            for s in series:
                key = series_key(s)
                if key not in mine or mine[key][0] <= seq:
                    mine[key] = (seq, s)
            self.version += 1
            first, self._heard = not self._heard, True
            listeners = list(self._listeners) if first else []
        if first:
            _tell(listeners, False)
            self._told.set()

    def process_ended(self, process: Hashable) -> None:
        """``process`` is gone: keep its counters and histograms, drop its gauges."""
        with self._lock:
            mine = self._live.pop(process, None)
            if not mine:
                return
            kept = [s for _, s in mine.values() if s["kind"] != "gauge"]
            self._ended = {series_key(s): s for s in merge([self._ended.values(), kept])}
            self.version += 1

    def series(self) -> list[Series]:
        """Every series, merged across processes (cumulative)."""
        with self._lock:
            return merge([self._ended.values(), *([s for _, s in p.values()] for p in self._live.values())])

    def subscribe(self, fn: Callable[[bool], None]) -> None:
        with self._lock:
            if self._closed:
                return
            self._listeners.append(fn)
            heard = self._heard
        if heard:
            _tell([fn], False)

    def close(self) -> None:
        """The engine shuts down: tell the listeners (once). A listener that the first update is attaching
        (a recorder, which then subscribes itself) is waited for, so it hears the close too."""
        with self._lock:
            heard = self._heard
        if heard:
            self._told.wait(5.0)
        with self._lock:
            listeners, self._listeners, self._closed = self._listeners, [], True
        _tell(listeners, True)


def _tell(listeners: list[Callable[[bool], None]], closing: bool) -> None:
    """Call each listener; one that fails is reported, never let through (the caller is an engine's thread)."""
    for fn in listeners:
        try:
            fn(closing)
        except Exception as exc:  # noqa: BLE001
            print(f"muster: a user-metrics listener ({fn!r}) failed: {exc!r}", file=sys.stderr)
