"""The driver's side of the run store: one recorder per ``fit()``.

The training controller calls one method per event it already handles
(attempt started, report, checkpoint committed, attempt failed, restart,
finish). Each call turns into rows queued on the store's writer thread, so
none of them waits on the disk. Worker log lines come from the runtime's
log sink (``Runtime.add_log_sink``), which both engines feed. With ``MUSTER_RUN_STORE=0``, or when the store cannot be
opened, every method does nothing.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import threading
import time
import warnings
from typing import Any, Callable, Protocol, Sequence

from muster.core import settings
from muster.core.serialization import json_default
from muster.observe.store import store_path, writer

#: where a row keeps the values a training function reported under the ledger's own keys (``training_iteration``...)
OWN_RUN_KEYS = "_own_run_keys"
#: report keys the ledger adds; the rest of a row is the user's metrics
BOOKKEEPING = frozenset({"training_iteration", "timestamp", "_rank", "_attempt", "_round", "checkpoint_dir_name",
                         OWN_RUN_KEYS})
_RUN_TOUCH_EVERY_S = 1.0
_RANK_LABEL = re.compile(r"^rank (\d+)$")


class LogSource(Protocol):
    """Where worker output comes from (``core.runtime.Runtime`` is one)."""

    def add_log_sink(self, sink: Callable[[str, int | None, list[str]], None]) -> None: ...

    def remove_log_sink(self, sink: Callable[[str, int | None, list[str]], None]) -> None: ...


class WorkerInfo(Protocol):
    """What the recorder reads of a gang member (``train.worker_group.Member`` has it)."""

    rank: int
    host: str
    pid: int


def to_json(value: Any) -> str:
    """JSON text for the store; NaN and infinities become null (browsers cannot parse them)."""
    return json.dumps(finite(value), default=json_default)


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinity (however nested) replaced by None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def rank_of(error: BaseException) -> int | None:
    """The rank a worker error names (``label == "rank 3"``), if any."""
    match = _RANK_LABEL.match(str(getattr(error, "label", "") or ""))
    return int(match.group(1)) if match else None


class RunRecorder:
    """Records one run into the store of its storage root. Thread-safe."""

    def __init__(
        self,
        *,
        root: str,
        path: str,
        name: str,
        state: dict[str, Any],
        resources: dict[str, float],
        logs: LogSource | None = None,
    ):
        self.path, self.name, self.resources = path, name, dict(resources)
        self._logs = logs
        self.run_id = 0
        self._w: writer.StoreWriter | None = None
        self._attempt: int | None = None
        self._pids: dict[int, int] = {}  # pid -> rank of the current attempt
        self._lock = threading.Lock()
        self._last_touch = 0.0
        if not settings.run_store_enabled():
            return
        try:
            self._w = writer.acquire(store_path(root))
            self.run_id = self._open_run(state)
        except Exception as exc:  # noqa: BLE001 - the store is never worth failing a run for
            warnings.warn(
                f"muster run store for {root!r} could not be opened ({exc}); this run is not recorded for "
                "the dashboard or `muster runs`. Check that the folder is writable, or set MUSTER_RUN_STORE=0.",
                RuntimeWarning,
                stacklevel=2,
            )
            if self._w is not None:
                self._w.release()
            self._w = None
            return
        if logs is not None:
            logs.add_log_sink(self._on_log_lines)

    @property
    def enabled(self) -> bool:
        return self._w is not None

    def _open_run(self, state: dict[str, Any]) -> int:
        assert self._w is not None
        now = time.time()
        config = state.get("config")
        self._w.execute_now(
            "INSERT INTO runs (path, name, trainer, experiment, trial_id, config, num_workers, status, created_at,"
            " updated_at, driver_host, driver_pid) VALUES (?, ?, ?, ?, ?, ?, ?, 'RUNNING', ?, ?, ?, ?)"
            " ON CONFLICT (path) DO UPDATE SET status = 'RUNNING', updated_at = excluded.updated_at,"
            " ended_at = NULL, error = NULL, driver_host = excluded.driver_host, driver_pid = excluded.driver_pid,"
            " num_workers = excluded.num_workers",
            (
                self.path, self.name, state.get("trainer"), state.get("experiment"),
                None if state.get("trial_id") is None else str(state.get("trial_id")),
                None if config is None else to_json(config), state.get("num_workers"),
                float(state.get("created_at") or now), now, socket.gethostname(), os.getpid(),
            ),
        )
        run_id = int(self._w.query_now("SELECT id FROM runs WHERE path = ?", (self.path,))[0][0])
        resumed = bool(self._w.query_now("SELECT 1 FROM attempts WHERE run_id = ? LIMIT 1", (run_id,)))
        self._w.put(
            "INSERT INTO events (run_id, attempt, time, kind, rank, message) VALUES (?, NULL, ?, 'start', NULL, ?)",
            (run_id, now, f"run {self.name!r} {'resumed' if resumed else 'started'} by pid {os.getpid()}"),
        )
        return run_id

    def _put(self, sql: str, params: tuple) -> None:
        if self._w is not None:
            self._w.put(sql, params)

    def event(self, kind: str, message: str, rank: int | None = None) -> None:
        """One line on the run's timeline (``start``, ``failure``, ``restart``, ``finish``...)."""
        self._put(
            "INSERT INTO events (run_id, attempt, time, kind, rank, message) VALUES (?, ?, ?, ?, ?, ?)",
            (self.run_id, self._attempt, time.time(), kind, rank, message),
        )

    # -- the controller's event points ---------------------------------------------
    def attempt_started(self, attempt: int, members: Sequence[WorkerInfo]) -> None:
        now = time.time()
        with self._lock:
            self._attempt = attempt
            self._pids = {m.pid: m.rank for m in members}
        self._put(
            "INSERT OR REPLACE INTO attempts (run_id, attempt, started_at, status) VALUES (?, ?, ?, 'RUNNING')",
            (self.run_id, attempt, now),
        )
        resources = to_json(self.resources)
        for m in members:
            self._put(
                "INSERT OR REPLACE INTO workers (run_id, attempt, rank, host, pid, resources, state, started_at)"
                " VALUES (?, ?, ?, ?, ?, ?, 'ALIVE', ?)",
                (self.run_id, attempt, m.rank, m.host, m.pid, resources, now),
            )
        pids = ", ".join(str(m.pid) for m in members)
        self.event("attempt", f"attempt {attempt}: {len(members)} worker(s) up (pids {pids})")

    def report(self, row: dict[str, Any], timing: dict[str, Any] | None) -> None:
        """One ``train.report()`` of one rank, as the ledger recorded it."""
        metrics = {k: v for k, v in row.items() if k not in BOOKKEEPING}
        metrics.update(row.get(OWN_RUN_KEYS) or {})  # what the function reported under those keys itself
        timing = timing or {}
        now = time.time()
        self._put(
            "INSERT INTO reports (run_id, attempt, rank, iteration, time, metrics, step_s, data_wait_s)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                self.run_id, int(row.get("_attempt", self._attempt or 0)), int(row.get("_rank", 0)),
                int(row.get("training_iteration", 0)), float(row.get("timestamp", now)), to_json(metrics),
                timing.get("step_s"), timing.get("data_wait_s"),
            ),
        )
        if now - self._last_touch >= _RUN_TOUCH_EVERY_S:
            self._last_touch = now
            self._put("UPDATE runs SET updated_at = ? WHERE id = ?", (now, self.run_id))

    def sample(self, rank: int, figures: dict[str, Any]) -> None:
        """One worker's system figures (CPU, RSS, GPU, and its dataset operators), sent every few seconds."""
        self._put(
            "INSERT INTO samples (run_id, attempt, rank, time, cpu_percent, rss_bytes, gpu_util, gpu_mem_bytes)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                self.run_id, self._attempt or 0, rank, float(figures.get("time") or time.time()),
                figures.get("cpu_percent"), figures.get("rss_bytes"), figures.get("gpu_util"),
                figures.get("gpu_mem_bytes"),
            ),
        )
        for op in figures.get("data") or ():  # muster.data's operators in this worker: OpSample each
            self._put(
                "INSERT INTO data_ops (run_id, attempt, rank, time, execution, op, rows_in, rows_out, rows_per_s,"
                " bytes_in_flight, budget_bytes, blocked_s, actors, done)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    self.run_id, self._attempt or 0, rank, float(figures.get("time") or time.time()), op.execution,
                    op.op, op.rows_in, op.rows_out, op.rows_per_s, op.bytes_in_flight, op.budget_bytes,
                    op.blocked_s, op.actors, int(op.done),
                ),
            )

    def checkpoint(self, round_: int, path: str, metrics: dict[str, Any]) -> None:
        clean = {k: v for k, v in metrics.items() if k not in BOOKKEEPING}
        self._put(
            "INSERT OR REPLACE INTO checkpoints (run_id, round, path, time, metrics) VALUES (?, ?, ?, ?, ?)",
            (self.run_id, round_, path, time.time(), to_json(clean)),
        )

    def attempt_ended(self, attempt: int, error: BaseException | None) -> None:
        now = time.time()
        failed = rank_of(error) if error is not None else None
        cause = None if error is None else _first_line(error)
        self._put(
            "UPDATE attempts SET ended_at = ?, status = ?, cause = ? WHERE run_id = ? AND attempt = ?",
            (now, "FINISHED" if error is None else "FAILED", cause, self.run_id, attempt),
        )
        self._put(
            "UPDATE workers SET ended_at = ?, state = CASE WHEN ? THEN 'FINISHED' WHEN rank = ? THEN 'FAILED'"
            " ELSE 'STOPPED' END WHERE run_id = ? AND attempt = ? AND state = 'ALIVE'",
            (now, error is None, failed, self.run_id, attempt),
        )
        if error is not None:
            self.event("failure", f"{type(error).__name__}: {str(error).strip()}", failed)
        with self._lock:
            self._pids = {}

    def finished(self, status: str, error: BaseException | None = None) -> None:
        """The run ended: ``FINISHED``, ``ERRORED`` (``error``: the last attempt's cause) or ``INTERRUPTED``."""
        now = time.time()
        cause = None if error is None else _first_line(error)
        self._put(
            "UPDATE runs SET status = ?, ended_at = ?, updated_at = ?, error = ? WHERE id = ?",
            (status, now, now, cause, self.run_id),
        )
        # an attempt cut short (Ctrl-C, a gang that could not be scheduled) ends with the run
        self._put("UPDATE attempts SET ended_at = ?, status = ? WHERE run_id = ? AND status = 'RUNNING'",
                  (now, status, self.run_id))
        self._put("UPDATE workers SET ended_at = ?, state = 'STOPPED' WHERE run_id = ? AND state = 'ALIVE'",
                  (now, self.run_id))
        self.event("finish", f"run {status.lower()}" + (f": {cause}" if cause else ""))

    def close(self) -> None:
        """Write what is queued and let go of the store (the run's last call)."""
        w, self._w = self._w, None
        let_go(w, self._on_log_lines, self._logs)

    # -- worker logs ------------------------------------------------------------------
    def _on_log_lines(self, label: str, pid: int | None, lines: list[str]) -> None:
        with self._lock:
            rank = self._pids.get(pid) if pid is not None else None
            attempt = self._attempt
        if rank is None:
            return
        now = time.time()
        for line in lines:
            self._put(
                "INSERT INTO logs (run_id, attempt, rank, pid, time, line) VALUES (?, ?, ?, ?, ?, ?)",
                (self.run_id, attempt, rank, pid, now, line),
            )


def let_go(w: writer.StoreWriter | None, sink: Callable[[str, int | None, list[str]], None],
           logs: LogSource | None) -> None:
    """Stop feeding worker lines to ``sink``, write what is queued, and hand the store writer back."""
    if logs is not None:
        logs.remove_log_sink(sink)
    if w is None:
        return
    w.flush()
    w.release()


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__
