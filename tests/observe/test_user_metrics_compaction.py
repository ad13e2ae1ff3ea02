"""The run store's ``user_metrics`` table stays bounded: the rows of drivers gone (shut down, or killed) are folded
into one row per counter or histogram series, their gauges dropped, and a counter's total over every driver never
goes down. Before, every driver process left one row per series for good (many short drivers: rows without end)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

from _shared import wait_for

from muster.observe import metrics_recorder
from muster.observe.store import reader, store_path, writer
from muster.observe.store.reader import StoreReader

_DRIVER = """
import socket, sys, time
if len(sys.argv) > 3:  # a driver of another node: the test's machine is one host, so this one names another
    socket.gethostname = lambda: sys.argv[3]
import muster
from muster.observe import metrics_recorder
from muster.observe.store import reader
from muster.util.metrics import Counter, Gauge, Histogram

metrics_recorder.HEARTBEAT_S, reader.DRIVER_LEASE_S = 0.1, __LEASE__  # (10 s and 120 s)
muster.init(num_cpus=1)
i = int(sys.argv[1])
Counter("short_jobs", description="Jobs.", tag_keys=("kind",)).inc(2, tags={"kind": "driver"})
Counter("short_runs", tag_keys=("run",)).inc(tags={"run": str(i % 2)})
Gauge("short_level").set(float(i))
Histogram("short_sizes", boundaries=[1.0]).observe(0.5)
if sys.argv[2] == "crash":  # wait to be killed once its rows are in the store
    print("recording", flush=True)
    time.sleep(120)
muster.shutdown()
"""


_LEASE_S = 4.0
_DRIVER = _DRIVER.replace("__LEASE__", repr(_LEASE_S))


def _driver(storage: str, i: int, how: str, host: str | None = None) -> subprocess.Popen:
    # the one killed sends its series every 50 ms; the others shut down before their first round (10 min), so
    # only the last round at muster.shutdown() delivers theirs (before, a driver that short recorded nothing)
    interval = "50" if how == "crash" else "600000"
    env = {**os.environ, "MUSTER_STORAGE_PATH": storage, "MUSTER_METRICS_REPORT_INTERVAL_MS": interval,
           "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen([sys.executable, "-c", _DRIVER, str(i), how, *([host] if host else [])], env=env,
                            stdout=subprocess.PIPE, text=True)


def _rows(storage: str) -> list[tuple]:
    if not os.path.exists(store_path(storage)):
        return []
    conn = sqlite3.connect(store_path(storage))
    try:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'user_metrics'").fetchall():
            return []  # the driver has not made the table yet
        return conn.execute("SELECT session, pid, kind, name, tags, value, count FROM user_metrics"
                            " ORDER BY name, tags").fetchall()
    finally:
        conn.close()


def _total(series: list[dict], name: str) -> float:
    return sum(s.get("value") or s.get("count") or 0 for s in series if s["name"] == name)


def test_the_rows_of_drivers_gone_are_folded_and_their_totals_kept(storage):
    crashed = _driver(storage, 0, "crash")
    try:
        assert crashed.stdout is not None and crashed.stdout.readline() == "recording\n"
        assert wait_for(lambda: len(_rows(storage)) == 4, 30)
    finally:
        os.kill(crashed.pid, signal.SIGKILL)
        crashed.wait(30)
    assert {r[1] for r in _rows(storage)} == {crashed.pid}  # its rows stay, never marked ended
    for i in (1, 2, 3):
        assert _driver(storage, i, "clean").wait(60) == 0

    rows = _rows(storage)  # one row per counter or histogram series (before: 4 per driver, 16 in all)
    assert [(r[0], r[2], r[3], r[4]) for r in rows] == [
        ("archive", "counter", "short_jobs", '{"kind": "driver"}'),
        ("archive", "counter", "short_runs", '{"run": "0"}'),
        ("archive", "counter", "short_runs", '{"run": "1"}'),
        ("archive", "histogram", "short_sizes", "{}"),
    ], rows
    every = StoreReader.for_root(storage).user_metrics(live_only=False)
    assert _total(every, "short_jobs") == 8 and _total(every, "short_sizes") == 4  # the killed driver's too
    assert [s["value"] for s in every if s["name"] == "short_runs"] == [2, 2]
    assert _total(every, "short_level") == 0  # a dead driver's gauge is gone
    assert StoreReader.for_root(storage).user_metrics() == []  # no driver runs


def test_the_archive_keeps_the_series_updated_last(storage, monkeypatch):
    monkeypatch.setattr(metrics_recorder, "MAX_ARCHIVED_SERIES", 3)
    w = writer.acquire(store_path(storage))
    try:
        for i in range(5):  # five ended drivers, each with a series of its own, and one they share
            for name, tags in (("tagged", {"id": str(i)}), ("shared", {})):
                s = {"name": name, "kind": "counter", "description": "", "tags": tags, "value": 1.0}
                w.put(metrics_recorder._INSERT, metrics_recorder._row(f"s{i}", "h", 1, 1.0, 100.0 + i, s))
        w.flush()
        assert w.transact_now(metrics_recorder.compact) == 5
        assert w.transact_now(metrics_recorder.compact) == 0  # nothing left to fold
    finally:
        w.release()
    rows = _rows(storage)
    assert [(r[3], r[4], r[5]) for r in rows] == [("shared", "{}", 5.0), ("tagged", '{"id": "3"}', 1.0),
                                                 ("tagged", '{"id": "4"}', 1.0)], rows


def test_the_rows_of_a_driver_on_another_node_are_folded_once_it_stops_renewing_them(storage, monkeypatch):
    # a driver on another machine (a storage path the cluster's nodes share) is killed: its process cannot be
    # looked up from here, so it is gone once it has not rewritten its rows for the lease. Before, its rows
    # stayed for good (never folded, shown as a running driver's: its gauge too)
    monkeypatch.setattr(reader, "DRIVER_LEASE_S", _LEASE_S, raising=False)  # (raising: to run on older code too)
    remote = _driver(storage, 7, "crash", host="node-2.cluster")
    try:
        assert remote.stdout is not None and remote.stdout.readline() == "recording\n"
        assert wait_for(lambda: len(_rows(storage)) == 4, 30)
        time.sleep(_LEASE_S + 1)  # it runs: its rows, renewed, outlive the lease
        assert _total(StoreReader.for_root(storage).user_metrics(), "short_level") == 7
        assert _driver(storage, 1, "clean").wait(60) == 0  # this one's compaction keeps a running driver's rows
        assert {r[0].split(":")[0] for r in _rows(storage)} == {"node-2.cluster", "archive"}
    finally:
        os.kill(remote.pid, signal.SIGKILL)
        remote.wait(30)
    time.sleep(_LEASE_S + 1)
    assert StoreReader.for_root(storage).user_metrics() == []  # no driver runs
    assert _driver(storage, 2, "clean").wait(60) == 0
    assert {r[0] for r in _rows(storage)} == {"archive"}  # every driver's rows folded
    every = StoreReader.for_root(storage).user_metrics(live_only=False)
    assert _total(every, "short_jobs") == 6 and _total(every, "short_sizes") == 3  # the killed driver's too
    assert _total(every, "short_level") == 0  # its gauge is gone
