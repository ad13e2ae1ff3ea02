"""The engine's user metrics (``muster.util.metrics`` in tasks, actors and the driver) into the run store.

The engine merges what its processes ship into ``Runtime.user_metrics``; this recorder writes that
table's series to the ``user_metrics`` table of the default storage path's store (``MUSTER_STORAGE_PATH``
when the first series arrives, as Serve's recorder reads it at ``serve.start()``), at most once per :data:`WRITE_MIN_S` and only when something changed, replacing each
series' row. It starts its thread on the first update (an engine whose processes record nothing pays
nothing) and, when the engine shuts down, writes the last values and marks its rows ended. The dashboard
serves the rows of live drivers on ``/metrics``. ``MUSTER_RUN_STORE=0`` turns it off.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import warnings

from muster.core import settings
from muster.core.runtime import Runtime
from muster.core.user_metrics import MetricsTable
from muster.observe.recorder import to_json
from muster.observe.store import store_path, writer

WRITE_MIN_S = 1.0  # at most one round of rows this often


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
        self._lock = threading.Lock()
        self._written = -1  # the table's version last written
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
            if self._stop.is_set():  # the engine shut down while the store opened
                w.release()
                return False
            self._w = w
        return True

    def _run(self) -> None:
        if not self._open():
            return
        while not self._stop.wait(WRITE_MIN_S):
            self.write()

    def write(self, ended: float | None = None) -> None:
        """Queue the table's series (when it changed since the last write, or ``ended`` is given)."""
        w, version = self._w, self._table.version
        if w is None or (version == self._written and ended is None):
            return
        self._written = version
        now = time.time()
        for s in self._table.series():
            hist = s["kind"] == "histogram"
            w.put("INSERT OR REPLACE INTO user_metrics (session, host, pid, ended, time, name, kind, description,"
                  " tags, value, boundaries, buckets, sum, count) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                  (self.session, self._host, self._pid, ended, now, s["name"], s["kind"], s.get("description"),
                   to_json(dict(sorted(s["tags"].items()))), s.get("value"),
                   to_json(s["boundaries"]) if hist else None, to_json(s["buckets"]) if hist else None,
                   s.get("sum"), s.get("count")))

    def close(self) -> None:
        """Write the last values, mark this engine's rows ended, and let go of the store."""
        with self._lock:
            self._stop.set()
            thread = self._thread
        if thread is not None:
            thread.join(WRITE_MIN_S * 5)
        with self._lock:
            w = self._w
        if w is None:
            return
        ended = time.time()
        self.write(ended=ended)
        w.put("UPDATE user_metrics SET ended = ? WHERE session = ?", (ended, self.session))
        with self._lock:
            self._w = None
        w.flush()
        w.release()


def attach(runtime: Runtime) -> MetricsRecorder:
    """Record ``runtime``'s user metrics (muster attaches one at the first series an engine of ``init()`` gets)."""
    return MetricsRecorder(runtime.user_metrics)
