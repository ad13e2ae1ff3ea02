"""The engine's user metrics (``muster.util.metrics`` in tasks, actors and the driver) into the run store.

The engine merges what its processes ship into ``Runtime.user_metrics``; this recorder writes that
table's series to the ``user_metrics`` table of the default storage path's store (``MUSTER_STORAGE_PATH``
when the first series arrives, as Serve's recorder reads it at ``serve.start()``), at most once per
:data:`WRITE_MIN_S` and only when something changed, replacing each series' row. It starts its thread on
the first update (an engine whose processes record nothing pays
nothing) and, when the engine shuts down, writes the last values and marks its rows ended. The dashboard
serves the rows of live drivers on ``/metrics``. ``MUSTER_RUN_STORE=0`` turns it off.

The table stays bounded. A driver's rows are what its engine holds now: a series the table dropped (the
gauges of a process that ended) leaves the store at the next write. They are rewritten every
:data:`HEARTBEAT_S` even when nothing changed, so that a driver on another machine (the cluster's nodes
sharing a storage path) that stops rewriting them for ``reader.DRIVER_LEASE_S`` is known to be gone: its
process ended, or its machine or connection went, without a word. The rows of drivers gone (shut down,
on this host and no longer running, or on another past that lease) are compacted when a recorder opens
the store and when it closes:
their counters and histograms are added into one row per series under the session :data:`ARCHIVE` (so a
counter's total over every driver, ``StoreReader.user_metrics(live_only=False)``, never goes down), their
gauges are dropped (the value was a dead process's), and past :data:`MAX_ARCHIVED_SERIES` the series
updated longest ago go.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time
import warnings

from muster.core import settings
from muster.core.runtime import Runtime
from muster.core.user_metrics import MetricsTable, Series, merge, series_key
from muster.observe.recorder import to_json
from muster.observe.store import store_path, writer
from muster.observe.store import reader
from muster.observe.store.reader import decode_series, driver_gone

WRITE_MIN_S = 1.0  # at most one round of rows this often
HEARTBEAT_S = 10.0  # at least one round this often, changed or not: other machines see the driver runs
ARCHIVE = "archive"  # the session of the rows compacted from drivers gone
MAX_ARCHIVED_SERIES = 10_000  # past this many, the archive's series updated longest ago are dropped
_INSERT = ("INSERT OR REPLACE INTO user_metrics (session, host, pid, ended, time, name, kind, description, tags, value,"
           " boundaries, buckets, sum, count) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")


class MetricsRecorder:
    """Writes one engine's :class:`MetricsTable` into the run store. Thread-safe."""

    def __init__(self, table: MetricsTable, root: str | None = None):
        self.root = root  # None: the default storage path when the first series arrives
        self._table = table
        self._host, self._pid = socket.gethostname(), os.getpid()
        self.session = f"{self._host}:{self._pid}:{time.time():.6f}"
        self._w: writer.StoreWriter | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._closed = False
        self._lock = threading.Lock()
        self._written = -1  # the table's version last written
        self._wrote_at = 0.0  # when
        table.subscribe(self._on_change)

    def _on_change(self, closing: bool) -> None:
        if closing:
            self.close()
            return
        with self._lock:  # the engine's thread calls: the store opens on this recorder's own
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = threading.Thread(target=self._run, name="muster-metrics-store", daemon=True)
            self._thread.start()

    def _open(self) -> bool:
        if not settings.run_store_enabled():
            return False
        self.root = self.root or settings.storage_path_default()
        try:
            w = writer.acquire(store_path(self.root))
        except Exception as exc:  # noqa: BLE001 - the store is never worth failing the engine for
            warnings.warn(f"muster run store for {self.root!r} could not be opened ({exc}); user metrics "
                          "are not recorded for the dashboard. Set MUSTER_STORAGE_PATH to a writable folder, "
                          "or MUSTER_RUN_STORE=0.", RuntimeWarning, stacklevel=2)
            return False
        with self._lock:
            if self._closed:  # close() gave up waiting for the store to open
                w.release()
                return False
            self._w = w  # (if the engine shuts down meanwhile, close() writes the last values)
        _compact(w)  # what drivers that ended (or died) left
        return True

    def _run(self) -> None:
        if not self._open():
            return
        while not self._stop.wait(WRITE_MIN_S):
            self.write()

    def write(self, ended: float | None = None) -> None:
        """Queue the table's series (when it changed since the last write, :data:`HEARTBEAT_S` passed, or
        ``ended`` is given)."""
        w, version, now = self._w, self._table.version, time.time()
        if w is None or (version == self._written and ended is None and now - self._wrote_at < HEARTBEAT_S):
            return
        self._written, self._wrote_at = version, now
        for s in self._table.series():
            w.put(_INSERT, _row(self.session, self._host, self._pid, ended, now, s))
        w.put("DELETE FROM user_metrics WHERE session = ? AND time < ?", (self.session, now))  # series gone

    def close(self) -> None:
        """Write the last values, mark this engine's rows ended, and let go of the store."""
        with self._lock:
            self._stop.set()
            thread = self._thread
        if thread is not None:
            thread.join(WRITE_MIN_S * 5)
        with self._lock:
            w, self._closed = self._w, True
        if w is None:
            return
        ended = time.time()
        self.write(ended=ended)
        w.put("UPDATE user_metrics SET ended = ? WHERE session = ?", (ended, self.session))
        with self._lock:
            self._w = None
        w.flush()
        _compact(w)
        w.release()


def _row(session: str, host: str | None, pid: int | None, ended: float | None, now: float, s: Series) -> tuple:
    hist = s["kind"] == "histogram"
    return (session, host, pid, ended, now, s["name"], s["kind"], s.get("description"),
            to_json(dict(sorted(s["tags"].items()))), s.get("value"), to_json(s["boundaries"]) if hist else None,
            to_json(s["buckets"]) if hist else None, s.get("sum"), s.get("count"))


def _compact(w: writer.StoreWriter) -> None:
    """Compact the rows of drivers gone into :data:`ARCHIVE` (see the module docstring); never raises."""
    try:
        w.transact_now(compact)
    except sqlite3.Error as exc:  # locked for long by another process, say: the next open or close compacts
        warnings.warn(f"muster run store {w.path}: compacting the user metrics failed ({exc}); it is tried again "
                      "when a driver next records or shuts down.", RuntimeWarning, stacklevel=2)


def compact(conn: sqlite3.Connection) -> int:
    """In one transaction of ``conn``: fold the ``user_metrics`` rows of the drivers gone into :data:`ARCHIVE`.
    Returns how many drivers' rows were folded."""
    conn.row_factory = sqlite3.Row
    try:
        rows = [dict(r) for r in conn.execute(
            "SELECT * FROM user_metrics WHERE session = ? OR ended IS NOT NULL OR host = ? OR time < ?",
            (ARCHIVE, socket.gethostname(), time.time() - reader.DRIVER_LEASE_S))]
    finally:
        conn.row_factory = None
    gone = [r for r in rows if r["session"] == ARCHIVE or r["ended"] is not None
            or driver_gone(r["host"], r["pid"], r["time"])]
    sessions = {r["session"] for r in gone} - {ARCHIVE}
    if not sessions:
        return 0
    latest: dict[tuple, float] = {}  # each series' last write, over the drivers
    for r in gone:
        key = series_key(decode_series(r))
        latest[key] = max(latest.get(key, 0.0), r["time"])
    kept = merge([[r for r in gone if r["kind"] != "gauge"]])  # a counter's total: the sum over the drivers
    kept.sort(key=lambda s: latest[series_key(s)], reverse=True)
    conn.executemany("DELETE FROM user_metrics WHERE session = ?", [(x,) for x in (*sessions, ARCHIVE)])
    now = time.time()
    conn.executemany(_INSERT, [_row(ARCHIVE, None, None, now, latest[series_key(s)], s)
                               for s in kept[:MAX_ARCHIVED_SERIES]])
    return len(sessions)


def attach(runtime: Runtime) -> MetricsRecorder:
    """Record ``runtime``'s user metrics (muster attaches one at the first series an engine of ``init()`` gets)."""
    return MetricsRecorder(runtime.user_metrics)
