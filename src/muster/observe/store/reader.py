"""Read-only queries over a run store, for ``muster runs|logs`` and the dashboard.

Every call opens its own read-only connection (``mode=ro``), so one reader is
safe to share between threads and can never change the file.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from typing import Any

import psutil

from muster.core.user_metrics import merge
from muster.observe import analysis
from muster.observe.store import schema, store_path

#: A driver on another machine that has not rewritten its rows for this long is gone (:func:`driver_gone`): many
#: times its heartbeat (``metrics_recorder.HEARTBEAT_S``), so that a busy or briefly stalled driver, or clocks a
#: little apart, never count as gone.
DRIVER_LEASE_S = 120.0

class StoreNotFoundError(FileNotFoundError):
    """No run store at the given storage path."""


class StoreReader:
    """Queries on one database file. Rows come back as plain dicts (JSON columns parsed)."""

    def __init__(self, path: str):
        self.path = path

    @classmethod
    def for_root(cls, root: str) -> "StoreReader":
        """The reader of storage root ``root``.

        Raises:
            StoreNotFoundError: no run has been recorded under ``root`` yet.
        """
        path = store_path(root)
        if not os.path.exists(path):
            raise StoreNotFoundError(
                f"No run store at {path}: no run has been recorded under storage path {root!r}. "
                "Pass the storage_path your runs use (--storage-path), or run a Trainer first."
            )
        return cls(path)

    def _query(self, sql: str, params: tuple = (), need: int = 1) -> list[dict[str, Any]]:
        """Rows of ``sql``; none when the file predates schema version ``need`` (whose tables it reads)."""
        conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=10.0)
        try:
            conn.row_factory = sqlite3.Row
            have = schema.version(conn)
            if have < need:
                return []  # not yet created by the first writer, or written by a muster before those tables
            if have > schema.SCHEMA_VERSION:
                schema.migrate(conn, self.path)  # raises SchemaTooNewError with the fix
            return [dict(r) for r in conn.execute(sql, params).fetchall()]
        finally:
            conn.close()

    # -- runs ---------------------------------------------------------------------
    def runs(self, experiment: str | None = None) -> list[dict[str, Any]]:
        """Every run, newest first, with its report count and its last rank-0 metrics."""
        where, params = ("WHERE r.experiment = ?", (experiment,)) if experiment is not None else ("", ())
        rows = self._query(
            "SELECT r.*, (SELECT COUNT(*) FROM reports p WHERE p.run_id = r.id) AS reports,"
            " (SELECT metrics FROM reports p WHERE p.run_id = r.id ORDER BY (p.rank != 0), p.id DESC LIMIT 1)"
            " AS last_metrics,"
            " (SELECT COUNT(*) FROM events e WHERE e.run_id = r.id AND e.kind = 'failure') AS failures,"
            f" (SELECT MAX(attempt) FROM attempts a WHERE a.run_id = r.id) AS attempt FROM runs r {where}"
            " ORDER BY r.created_at DESC, r.id DESC",
            params,
        )
        return [_run_row(r) for r in rows]

    def run(self, run_id: int) -> dict[str, Any] | None:
        rows = [r for r in self.runs() if r["id"] == run_id]
        return rows[0] if rows else None

    def find_run(self, name: str) -> dict[str, Any] | None:
        """The newest run called ``name`` (or whose folder is ``name``)."""
        for r in self.runs():
            if name in (r["name"], r["path"], r["path"].rstrip("/").rsplit("/", 1)[-1]):
                return r
        return None

    # -- one run's figures -------------------------------------------------------------
    def reports(self, run_id: int, after: int = 0, limit: int = 20000) -> list[dict[str, Any]]:
        rows = self._query(
            "SELECT id, attempt, rank, iteration, time, metrics, step_s, data_wait_s FROM reports"
            " WHERE run_id = ? AND id > ? ORDER BY id LIMIT ?",
            (run_id, after, limit),
        )
        for r in rows:
            r["metrics"] = json.loads(r["metrics"])
        return rows

    def samples(self, run_id: int, after: int = 0, limit: int = 20000) -> list[dict[str, Any]]:
        return self._query(
            "SELECT * FROM samples WHERE run_id = ? AND id > ? ORDER BY id LIMIT ?", (run_id, after, limit)
        )

    def data_ops(self, run_id: int, after: int = 0, limit: int = 20000) -> list[dict[str, Any]]:
        """muster.data operator samples of a run's workers (``data_ops``), oldest first."""
        return self._query("SELECT * FROM data_ops WHERE run_id = ? AND id > ? ORDER BY id LIMIT ?",
                           (run_id, after, limit), need=3)

    def data_ops_latest(self, run_id: int) -> list[dict[str, Any]]:
        """The latest sample of each (rank, operator) of a run: what the dashboard's Data panel shows."""
        return self._query(
            "SELECT * FROM data_ops WHERE id IN (SELECT MAX(id) FROM data_ops WHERE run_id = ? GROUP BY rank, op)"
            " ORDER BY rank, id", (run_id,), need=3)

    def attempts(self, run_id: int) -> list[dict[str, Any]]:
        return self._query("SELECT * FROM attempts WHERE run_id = ? ORDER BY attempt", (run_id,))

    def workers(self, run_id: int) -> list[dict[str, Any]]:
        """The latest attempt's workers, each with its recent timing, straggler verdict and last sample."""
        rows = self._query(
            "SELECT * FROM workers WHERE run_id = ? AND attempt = (SELECT MAX(attempt) FROM workers WHERE run_id = ?)"
            " ORDER BY rank",
            (run_id, run_id),
        )
        if not rows:
            return []
        attempt = rows[0]["attempt"]
        timing = self._query(
            "SELECT rank, step_s, data_wait_s FROM (SELECT rank, id, step_s, data_wait_s, ROW_NUMBER() OVER"
            " (PARTITION BY rank ORDER BY id DESC) AS n FROM reports WHERE run_id = ? AND attempt = ?"
            " AND step_s IS NOT NULL) WHERE n <= ? ORDER BY id",
            (run_id, attempt, analysis.WINDOW),
        )
        per_rank: dict[int, list[tuple[float | None, float | None]]] = {r["rank"]: [] for r in rows}
        for t in timing:
            per_rank.setdefault(t["rank"], []).append((t["step_s"], t["data_wait_s"]))
        verdicts = analysis.straggler_report(per_rank)
        last = {
            s["rank"]: s
            for s in self._query(
                "SELECT * FROM samples WHERE id IN (SELECT MAX(id) FROM samples WHERE run_id = ? AND attempt = ?"
                " GROUP BY rank)",
                (run_id, attempt),
            )
        }
        for w in rows:
            w["resources"] = json.loads(w["resources"] or "{}")
            w.update(verdicts.get(w["rank"], {}))
            sample = last.get(w["rank"], {})
            for key in ("cpu_percent", "rss_bytes", "gpu_util", "gpu_mem_bytes"):
                w[key] = sample.get(key)
        return rows

    def checkpoints(self, run_id: int) -> list[dict[str, Any]]:
        rows = self._query("SELECT * FROM checkpoints WHERE run_id = ? ORDER BY round", (run_id,))
        for r in rows:
            r["metrics"] = json.loads(r["metrics"])
        return rows

    def events(self, run_id: int, after: int = 0) -> list[dict[str, Any]]:
        return self._query("SELECT * FROM events WHERE run_id = ? AND id > ? ORDER BY id", (run_id, after))

    def logs(self, run_id: int, rank: int | None = None, after: int = 0, tail: int = 1000) -> list[dict[str, Any]]:
        """The last ``tail`` lines after id ``after`` (all ranks, or one), oldest first."""
        rank_sql, params = ("AND rank = ?", (rank,)) if rank is not None else ("", ())
        rows = self._query(
            f"SELECT id, attempt, rank, pid, time, line FROM logs WHERE run_id = ? AND id > ? {rank_sql}"
            " ORDER BY id DESC LIMIT ?",
            (run_id, after, *params, tail),
        )
        return rows[::-1]

    # -- Tune experiments ---------------------------------------------------------------
    def experiments(self) -> list[dict[str, Any]]:
        return self._query(
            "SELECT experiment AS name, COUNT(*) AS trials, SUM(status = 'RUNNING') AS running,"
            " SUM(status = 'FINISHED') AS finished, SUM(status IN ('ERRORED', 'INTERRUPTED')) AS errored,"
            " MIN(created_at) AS created_at, MAX(updated_at) AS updated_at FROM runs WHERE experiment IS NOT NULL"
            " GROUP BY experiment ORDER BY MAX(created_at) DESC"
        )

    # -- Serve (schema version 2) -------------------------------------------------------
    def _serve(self, sql: str, params: tuple = ()) -> list[dict[str, Any]]:
        return self._query(sql, params, need=2)

    def serve_deployments(self) -> list[dict[str, Any]]:
        """Every Serve deployment ever recorded, newest first: its last sample and its replicas by state."""
        rows = self._serve(
            "SELECT app, deployment, MIN(started_at) AS first_started, MAX(started_at) AS last_started,"
            " COUNT(*) AS replicas FROM serve_replicas GROUP BY app, deployment ORDER BY MAX(started_at) DESC"
        )
        for r in rows:
            states = [x["state"] for x in self.serve_replicas(r["app"], r["deployment"])]
            r["running"], r["dead"], r["lost"] = states.count("RUNNING"), states.count("DEAD"), states.count("LOST")
            last = self._serve(
                "SELECT * FROM serve_metrics WHERE app = ? AND deployment = ? AND replica IS NULL"
                " ORDER BY id DESC LIMIT 1", (r["app"], r["deployment"]))
            r["last"] = last[0] if last else None
        return rows

    def serve_replicas(self, app: str, deployment: str) -> list[dict[str, Any]]:
        """The deployment's replicas, newest first, each with its last sample. A replica recorded RUNNING
        whose process on this machine is gone (its driver died without stopping Serve) reads ``LOST``."""
        rows = self._serve("SELECT * FROM serve_replicas WHERE app = ? AND deployment = ? ORDER BY started_at DESC",
                           (app, deployment))
        last = {m["replica"]: m for m in self._serve(
            "SELECT * FROM serve_metrics WHERE id IN (SELECT MAX(id) FROM serve_metrics WHERE app = ?"
            " AND deployment = ? AND replica IS NOT NULL GROUP BY replica)", (app, deployment))}
        for r in rows:
            if r["state"] == "RUNNING" and driver_gone(r["host"], r["pid"]):
                r["state"] = "LOST"  # its process is gone without a word (the driver running Serve died)
            r["last"] = last.get(r["replica"]) if r["state"] == "RUNNING" else None
        return rows

    def serve_metrics(self, app: str, deployment: str, replica: int | None = None, after: int = 0,
                      limit: int = 20000) -> list[dict[str, Any]]:
        """Samples of the deployment (``replica`` None) or of one replica, oldest first."""
        who = "replica IS NULL" if replica is None else "replica = ?"
        return self._serve(
            f"SELECT * FROM serve_metrics WHERE app = ? AND deployment = ? AND {who} AND id > ? ORDER BY id LIMIT ?",
            (app, deployment, *(() if replica is None else (replica,)), after, limit),
        )

    def serve_custom_metrics(self, app: str | None = None, deployment: str | None = None,
                             running_only: bool = True) -> list[dict[str, Any]]:
        """The user metrics' series (``serve.metrics``) of each deployment's last sample, as
        :func:`muster.observe.prometheus.render` takes them; only deployments with a running replica
        unless ``running_only`` is False."""
        where, params = "", tuple[str, ...]()
        if app is not None:
            where, params = " AND c.app = ?", (app,)
            if deployment is not None:
                where, params = where + " AND c.deployment = ?", (app, deployment)
        if running_only:
            where += (" AND EXISTS (SELECT 1 FROM serve_replicas r WHERE r.app = c.app AND r.deployment = c.deployment"
                      " AND r.state = 'RUNNING')")
        rows = self._query(
            "SELECT c.* FROM serve_custom_metrics c WHERE c.time = (SELECT MAX(time) FROM serve_custom_metrics m"
            f" WHERE m.app = c.app AND m.deployment = c.deployment){where} ORDER BY c.name, c.id", params, need=4)
        return [decode_series(r) for r in rows]

    def user_metrics(self, live_only: bool = True) -> list[dict[str, Any]]:
        """The user metrics (``muster.util.metrics``) that tasks, actors and drivers recorded, merged across
        drivers as :func:`muster.observe.prometheus.render` takes them; only those of drivers still running
        unless ``live_only`` is False (schema version 5)."""
        rows = self._query("SELECT * FROM user_metrics ORDER BY name, session", need=5)
        if live_only:
            rows = [r for r in rows if r["ended"] is None and not driver_gone(r["host"], r["pid"], r["time"])]
        for r in rows:
            decode_series(r)
            for k in ("session", "host", "pid", "ended"):  # which driver: merged away
                del r[k]
        return merge([rows])

    def serve_events(self, app: str, after: int = 0) -> list[dict[str, Any]]:
        return self._serve("SELECT * FROM serve_events WHERE app = ? AND id > ? ORDER BY id", (app, after))

    def find_serve(self, name: str) -> list[tuple[str, str]]:
        """``(app, deployment)`` pairs ``name`` means: ``app/deployment``, an app, or a deployment name."""
        pairs = [(r["app"], r["deployment"]) for r in self._serve(
            "SELECT DISTINCT app, deployment FROM serve_replicas ORDER BY app, deployment")]
        return [(a, d) for a, d in pairs if name in (f"{a}/{d}", a, d)]

    def serve_logs(self, pairs: list[tuple[str, str]], replica: int | None = None, after: int = 0,
                   tail: int = 1000) -> list[dict[str, Any]]:
        """The last ``tail`` lines the replicas of ``pairs`` printed (all, or replica number ``replica``)."""
        if not pairs:
            return []
        where = " OR ".join("(app = ? AND deployment = ?)" for _ in pairs)
        params: tuple = tuple(x for p in pairs for x in p)
        if replica is not None:
            where, params = f"({where}) AND replica = ?", (*params, replica)
        rows = self._serve(f"SELECT * FROM serve_logs WHERE ({where}) AND id > ? ORDER BY id DESC LIMIT ?",
                           (*params, after, tail))
        return rows[::-1]


def _run_row(r: dict[str, Any]) -> dict[str, Any]:
    r["config"] = json.loads(r["config"]) if r.get("config") else None
    r["last_metrics"] = json.loads(r["last_metrics"]) if r.get("last_metrics") else {}
    r["stale"] = r["status"] == "RUNNING" and driver_gone(r.get("driver_host"), r.get("driver_pid"))
    return r


def decode_series(r: dict[str, Any]) -> dict[str, Any]:
    """A metric series' row (``user_metrics``, ``serve_custom_metrics``) with its JSON columns read, in place."""
    r["tags"] = json.loads(r["tags"])
    for k in ("boundaries", "buckets"):
        r[k] = json.loads(r[k]) if r[k] else None
    return r


def driver_gone(host: str | None, pid: int | None, seen: float | None = None) -> bool:
    """Whether a driver no longer runs (it died without a word). On this machine: its process is gone. On
    another (a storage path shared by the cluster's nodes): ``seen``, when it last wrote what is asked about
    (a driver's user metrics rows are rewritten every ``metrics_recorder.HEARTBEAT_S``), is more than
    :data:`DRIVER_LEASE_S` ago; without ``seen``, another machine's driver is taken as running."""
    if not host or not pid:
        return False
    if host != socket.gethostname():
        return seen is not None and time.time() - seen > DRIVER_LEASE_S
    return not psutil.pid_exists(pid)
