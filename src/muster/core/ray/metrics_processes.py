"""The Ray worker processes that sent user metrics, watched so that a dead one's gauges go.

On the local engine a task runs in a pooled worker of muster's, and when that process exits the driver's
``Runtime.user_metrics`` ends it: its counters and histograms stay counted, its gauges go. On a Ray cluster
a task runs in a worker process that Ray pools and ends (an idle worker past its limit, a crash), and muster
has no handle on it. So while such a process holds series in the table, :class:`MetricsProcesses` asks the
hub every :data:`CHECK_S` which of them Ray reports dead, and ends those in the table, as the local engine
does (and as Ray's metrics agent stops exporting a dead worker's). An actor's process is ended by its death
watch (``handles.py``) already; ending it twice changes nothing.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import ray

from muster.core.ray.gate import RayGate
from muster.core.user_metrics import MetricsTable

CHECK_S = 1.0  # how often the processes with series are checked
_ASK_TIMEOUT_S = 30.0


class MetricsProcesses:
    """One Ray engine's processes with user metrics, by their key in the table. Thread-safe."""

    def __init__(self, hub: Any, table: MetricsTable, gate: RayGate):
        self._hub, self._table, self._gate = hub, table, gate  # the engine's hub actor, Runtime.user_metrics, gate
        self._lock = threading.Lock()
        self._watched: dict[str, str] = {}  # Ray worker id -> the process' key in runtime.user_metrics
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def track(self, process: str, worker_id: str) -> None:
        """``process`` (Ray's worker ``worker_id``) sent series: watch it until it dies."""
        if not worker_id:
            return
        with self._lock:
            self._watched[worker_id] = process
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name="muster-ray-metrics-processes", daemon=True)
                self._thread.start()

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(CHECK_S):
            with self._lock:
                ids = list(self._watched)
            if not ids:
                continue
            try:
                with self._gate:
                    dead = ray.get(self._hub.gone.remote(ids), timeout=_ASK_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - Ray's internal worker table changed, say: watch no more
                if not self._stop.is_set():
                    print(f"muster: could not learn which Ray workers died ({exc!r}); the gauges of a task's "
                          "dead worker stay in the user metrics until the driver ends.", file=sys.stderr)
                return
            for worker_id in dead:
                with self._lock:
                    process = self._watched.pop(worker_id, None)
                if process is not None:
                    self._table.process_ended(process)
