"""Serve's part of the run store: replicas, metrics samples, events and replica logs.

The controller calls this from the driver.  Nothing here measures anything:
the metrics are the controller's :class:`~.metrics.DeploymentMetrics` (the
same figures ``serve.status()`` shows), sampled at most once a second per
deployment.  Every write is queued on the store's writer thread
(:mod:`muster.observe.store.writer`), which batches them; Serve never waits
on the disk.  The store is the one of ``MUSTER_STORAGE_PATH`` (default
``~/muster_results``, like training runs); ``MUSTER_RUN_STORE=0`` turns it off.
"""

from __future__ import annotations

import socket
import threading
import time
import warnings
from typing import Any

from muster.core import settings
from muster.observe.recorder import LogSource, let_go, to_json
from muster.observe.store import store_path, writer

_EARLY_PIDS, _EARLY_LINES = 64, 200  # bounds on the lines kept for processes not yet known as replicas
SAMPLE_MIN_S = 1.0  # at most one metrics row per deployment (and per replica) this often
# serve_metrics columns of an LLM deployment (schema v3) and the LLMMetrics keys they come from
LLM_FIELDS = ("llm_requests", "prompt_tokens", "completion_tokens", "tokens_per_s", "ttft_p50_ms", "ttft_p99_ms",
              "ttft_samples", "engine_running", "engine_waiting", "queue_depth")
_LLM_KEYS = ("requests", "prompt_tokens", "completion_tokens", "tokens_per_s", "ttft_p50_ms", "ttft_p99_ms",
             "ttft_samples", "running", "waiting")


def _llm_row(llm: dict[str, Any]) -> tuple:
    """The LLM columns' values (all NULL for a deployment that is no LLM)."""
    if not llm:
        return (None,) * len(LLM_FIELDS)
    return (*(llm.get(k) for k in _LLM_KEYS), llm["running"] + llm["waiting"])


class ServeRecorder:
    """Records one Serve instance into the run store of the default storage path. Thread-safe."""

    def __init__(self, logs: LogSource | None = None, root: str | None = None):
        self.root = root or settings.storage_path_default()
        self._logs = logs
        self._w: writer.StoreWriter | None = None
        # (log label, pid) -> (app, deployment, replica number): the label too, since on a Ray cluster two
        # replicas on two nodes may have the same pid
        self._pids: dict[tuple[str, int], tuple[str, str, int]] = {}
        self._last: dict[tuple[str, str], float] = {}
        # lines of pids not (yet) known as replicas: a replica prints in its constructor before it is registered
        self._early: dict[tuple[str, int], list[tuple[float, str]]] = {}
        self._lock = threading.Lock()
        self._host = socket.gethostname()
        if not settings.run_store_enabled():
            return
        try:
            self._w = writer.acquire(store_path(self.root))
        except Exception as exc:  # noqa: BLE001 - the store is never worth failing Serve for
            warnings.warn(
                f"muster run store for {self.root!r} could not be opened ({exc}); Serve runs but is not recorded "
                "for the dashboard or `muster logs`. Set MUSTER_STORAGE_PATH to a writable folder, or "
                "MUSTER_RUN_STORE=0.",
                RuntimeWarning,
                stacklevel=2,
            )
            return
        if logs is not None:
            logs.add_log_sink(self._on_log_lines)

    @property
    def enabled(self) -> bool:
        return self._w is not None

    def _put(self, sql: str, params: tuple) -> None:
        if self._w is not None:
            self._w.put(sql, params)

    def event(self, app: str, deployment: str | None, replica: int | None, kind: str, message: str) -> None:
        self._put("INSERT INTO serve_events (time, app, deployment, replica, kind, message) VALUES (?, ?, ?, ?, ?, ?)",
                  (time.time(), app, deployment, replica, kind, message))

    def replica_started(self, app: str, deployment: str, number: int, rid: str, pid: int | None,
                        here: bool = True, label: str = "") -> None:
        """``here``: the replica runs on this machine (the local engine); otherwise its host is left unknown,
        so no reader takes its pid for one of its own machine's.  ``label``: the replica's actor label, which
        its log lines come with (from either engine's log sink)."""
        early: list[tuple[float, str]] = []
        if pid is not None:
            with self._lock:
                self._pids[(label, pid)] = (app, deployment, number)
                early = self._early.pop((label, pid), [])
            for t, line in early:
                self._put_line(t, (app, deployment, number), pid, line)
        self._put(
            "INSERT OR REPLACE INTO serve_replicas (id, app, deployment, replica, host, pid, state, started_at)"
            " VALUES (?, ?, ?, ?, ?, ?, 'RUNNING', ?)",
            (rid, app, deployment, number, self._host if here else None, pid, time.time()),
        )
        self.event(app, deployment, number, "replica_started", f"replica #{number} started (pid {pid})")

    def replica_ended(self, app: str, deployment: str, number: int, rid: str, state: str, cause: str = "") -> None:
        """``state``: ``STOPPED`` (Serve stopped it) or ``DEAD`` (it died or failed its health check)."""
        self._put("UPDATE serve_replicas SET state = ?, ended_at = ?, cause = ? WHERE id = ?",
                  (state, time.time(), cause or None, rid))
        kind = "replica_died" if state == "DEAD" else "replica_stopped"
        self.event(app, deployment, number, kind, f"replica #{number} {'died' if state == 'DEAD' else 'stopped'}"
                   + (f": {cause}" if cause else ""))

    def sample(self, app: str, deployment: str, metrics: dict[str, Any], numbers: dict[str, int],
               running: int, target: int, restarts: int, now: float) -> None:
        """One deployment row and one row per replica from ``metrics`` (``DeploymentMetrics.as_dict()``),
        unless the deployment was sampled less than :data:`SAMPLE_MIN_S` ago."""
        key = (app, deployment)
        with self._lock:
            if now - self._last.get(key, -SAMPLE_MIN_S) < SAMPLE_MIN_S:
                return
            self._last[key] = now
        t = time.time()
        sql = ("INSERT INTO serve_metrics (time, app, deployment, replica, requests_per_s, p50_ms, p99_ms, served,"
               " errors, ongoing, running, target, restarts, " + ", ".join(LLM_FIELDS) + ")"
               " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?" + ", ?" * len(LLM_FIELDS) + ")")
        m = metrics
        llm = m.get("llm") or {}
        self._put(sql, (t, app, deployment, None, m["requests_per_s"], m["p50_ms"], m["p99_ms"], m["served"],
                        m["errors"], m["ongoing"], running, target, restarts, *_llm_row(llm)))
        llm_replicas = llm.get("replicas", {})
        for rid, r in m.get("replicas", {}).items():
            if rid in numbers:
                self._put(sql, (t, app, deployment, numbers[rid], r.get("requests_per_s"), r.get("p50_ms"),
                                r.get("p99_ms"), r["served"], r["errors"], r["ongoing"], None, None, None,
                                *_llm_row(llm_replicas.get(rid) or {})))

        custom = m.get("custom_metrics") or []
        for c in custom:
            hist = c["kind"] == "histogram"
            self._put("INSERT INTO serve_custom_metrics (time, app, deployment, name, kind, description, tags, value,"
                      " boundaries, buckets, sum, count) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                      (t, app, deployment, c["name"], c["kind"], c.get("description"), to_json(c["tags"]),
                       c.get("value"), to_json(c["boundaries"]) if hist else None,
                       to_json(c["buckets"]) if hist else None, c.get("sum"), c.get("count")))

    def close(self) -> None:
        """Write what is queued and let go of the store (at ``serve.shutdown()``)."""
        w, self._w = self._w, None
        let_go(w, self._on_log_lines, self._logs)

    def _on_log_lines(self, label: str, pid: int | None, lines: list[str]) -> None:
        if pid is None:
            return
        now = time.time()
        key = (label, pid)
        with self._lock:
            who = self._pids.get(key)
            if who is None:
                if key in self._early or len(self._early) < _EARLY_PIDS:
                    self._early.setdefault(key, []).extend((now, line) for line in lines)
                    del self._early[key][:-_EARLY_LINES]
                return
        for line in lines:
            self._put_line(now, who, pid, line)

    def _put_line(self, t: float, who: tuple[str, str, int], pid: int, line: str) -> None:
        self._put("INSERT INTO serve_logs (time, app, deployment, replica, pid, line) VALUES (?, ?, ?, ?, ?, ?)",
                  (t, *who, pid, line))
