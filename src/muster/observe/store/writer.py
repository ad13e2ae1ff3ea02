"""Writes to the run store, batched on one background thread per database file.

Training never waits on the store: ``put`` only appends to an in-memory
queue; one thread per database file (shared by every run of the process
that writes there, e.g. concurrent Tune trials) takes whatever has queued,
writes it in a single transaction, and commits. If the disk is full or the
file is locked for too long, the batch is dropped with one warning and
training goes on.
"""

from __future__ import annotations

import os
import queue
import sqlite3
import threading
import time
import warnings
from typing import Any, Callable, TypeVar

from muster.observe.store import schema

_BATCH_MAX = 5000
_IDLE_WAIT_S = 0.2
_QUEUE_MAX = 200_000  # past this (a stuck disk), new rows are dropped rather than piling up in memory

T = TypeVar("T")
_writers: dict[str, "StoreWriter"] = {}
_writers_lock = threading.Lock()


def connect(path: str) -> sqlite3.Connection:
    """A read-write connection in WAL mode (readers never block the writer)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    conn = sqlite3.connect(path, timeout=10.0, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    schema.migrate(conn, path)
    return conn


class StoreWriter:
    """The single writer of one database file in this process.

    Thread-safe: ``put`` and ``open_run`` may be called from any thread.
    Obtain one with :func:`acquire` and hand it back with :meth:`release`.
    """

    def __init__(self, path: str):
        self.path = path
        self._conn = connect(path)
        self._conn_lock = threading.Lock()
        self._queue: queue.Queue[tuple[str, tuple] | threading.Event | None] = queue.Queue(_QUEUE_MAX)
        self._users = 0
        self._dropped = 0
        self._warned = False
        self._thread = threading.Thread(target=self._run, name="muster-store", daemon=True)
        self._thread.start()

    # -- the API ------------------------------------------------------------------
    def execute_now(self, sql: str, params: tuple = ()) -> int:
        """Run one statement at once and commit; returns ``lastrowid``. For rare calls
        outside the training path (opening a run), where the caller needs the row id."""
        with self._conn_lock:
            cur = self._conn.execute(sql, params)
            self._conn.commit()
            return int(cur.lastrowid or 0)

    def query_now(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._conn_lock:
            return list(self._conn.execute(sql, params).fetchall())

    def transact_now(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` at once as one write transaction and commit (rolled back if it raises). It
        begins IMMEDIATE: no other process writes between what ``fn`` reads and what it writes. For rare
        maintenance outside the training path (compacting a table)."""
        with self._conn_lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                out = fn(self._conn)
            except BaseException:
                self._conn.rollback()
                raise
            self._conn.commit()
            return out

    def put(self, sql: str, params: tuple) -> None:
        """Queue one statement; never blocks."""
        try:
            self._queue.put_nowait((sql, params))
        except queue.Full:
            self._dropped += 1

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything queued so far is written. Returns False on timeout."""
        done = threading.Event()
        self._queue.put(done)
        return done.wait(timeout)

    def release(self) -> None:
        """One user is done; the last one stops the thread after writing what is queued."""
        with _writers_lock:
            self._users -= 1
            if self._users > 0:
                return
            _writers.pop(self.path, None)
        self._queue.put(None)
        self._thread.join(30)
        with self._conn_lock:
            self._conn.close()

    # -- the thread ---------------------------------------------------------------
    def _run(self) -> None:
        stop = False
        while not stop:
            try:
                first = self._queue.get(timeout=_IDLE_WAIT_S)
            except queue.Empty:
                continue
            batch, waiters = [], []
            item: Any = first
            while True:
                if item is None:
                    stop = True
                elif isinstance(item, threading.Event):
                    waiters.append(item)
                else:
                    batch.append(item)
                if len(batch) >= _BATCH_MAX:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            self._write(batch)
            for w in waiters:
                w.set()

    def _write(self, batch: list[tuple[str, tuple]]) -> None:
        if not batch:
            return
        for attempt in range(3):
            try:
                with self._conn_lock:
                    with self._conn:  # one transaction
                        for sql, params in batch:
                            self._conn.execute(sql, params)
                return
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) and attempt < 2:
                    time.sleep(0.5)
                    continue
                self._warn(exc, len(batch))
                return
            except sqlite3.Error as exc:
                self._warn(exc, len(batch))
                return

    def _warn(self, exc: BaseException, n: int) -> None:
        self._dropped += n
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"muster run store {self.path}: {n} record(s) could not be written ({exc}); training goes on, "
                "but the dashboard and `muster runs` will miss them. Free disk space, or set "
                "MUSTER_RUN_STORE=0 to turn the store off.",
                RuntimeWarning,
                stacklevel=1,
            )


def acquire(path: str) -> StoreWriter:
    """The writer for ``path`` in this process (made on first use)."""
    path = os.path.abspath(path)
    with _writers_lock:
        writer = _writers.get(path)
        if writer is None:
            writer = _writers[path] = StoreWriter(path)
        writer._users += 1
        return writer
