"""``muster.util.metrics`` in plain tasks and actors (Ray's ``ray.util.metrics`` from any worker): the series reach
the driver's ``Runtime.user_metrics`` merged across worker processes, then the run store and the dashboard's
Prometheus ``/metrics``; a task's before its result, an actor's periodically and when it exits."""

from __future__ import annotations

import os
import re
import time

import httpx
import pytest
from _shared import free_port, wait_for

import muster
from muster.core import api

pytest.importorskip("starlette")

N = 8


def _engine(storage: str, monkeypatch, interval_ms: int):
    monkeypatch.setenv("MUSTER_STORAGE_PATH", storage)
    monkeypatch.setenv("MUSTER_METRICS_REPORT_INTERVAL_MS", str(interval_ms))
    cpus = muster.cluster_resources()["CPU"]
    muster.shutdown()  # a fresh engine: its recorder writes into ``storage``
    muster.init(num_cpus=4)
    return cpus


@pytest.fixture
def restart_engine(storage, monkeypatch):
    cpus: list[float] = []
    yield lambda interval_ms: cpus.append(_engine(storage, monkeypatch, interval_ms))
    muster.shutdown()
    monkeypatch.undo()
    muster.init(num_cpus=cpus[0] if cpus else 4)


def _value(series: list[dict], name: str, **tags: str) -> float | None:
    found = [s for s in series if s["name"] == name and all(s["tags"].get(k) == v for k, v in tags.items())]
    return sum(s.get("value") or s.get("count") or 0 for s in found) if found else None


@muster.remote(num_cpus=1)
def _counted_task(i: int) -> int:
    from muster.util.metrics import Counter, Histogram

    Counter("core_jobs", description="Jobs done.", tag_keys=("kind",)).inc(tags={"kind": "task"})
    Histogram("core_sizes", boundaries=[1.0, 10.0]).observe(i)
    time.sleep(0.3)  # the tasks overlap: more than one worker process runs them
    return os.getpid()


@muster.remote(num_cpus=1)
def _gauged_task(level: float) -> int:
    from muster.util.metrics import Gauge

    Gauge("core_task_level", tag_keys=("who",)).set(level, tags={"who": str(os.getpid())})
    return os.getpid()


@muster.remote(num_cpus=0)
class _Meter:
    def __init__(self, name: str):
        from muster.util.metrics import Counter, Gauge

        self.name = name
        self.jobs = Counter("core_jobs", description="Jobs done.", tag_keys=("kind",))
        self.level = Gauge("core_level", tag_keys=("who",)).set_default_tags({"who": name})

    def work(self, n: int, level: float) -> int:
        self.jobs.inc(n, tags={"kind": "actor"})
        self.level.set(level)
        return os.getpid()

    def work_and_exit(self, n: int) -> None:
        from muster.actor import exit_actor

        self.jobs.inc(n, tags={"kind": "actor"})
        exit_actor()


def test_task_and_actor_metrics_reach_the_dashboard_summed_across_workers(restart_engine, storage, dashboard):
    from muster.observe.store.reader import StoreReader

    restart_engine(200)
    table = api.get_runtime().user_metrics
    pids = muster.get([_counted_task.remote(i) for i in range(N)])
    assert len(set(pids)) >= 2, "the tasks ran in more than one worker"
    # flushed when each task ended, before its result: no wait
    assert _value(table.series(), "core_jobs", kind="task") == N
    sizes = [s for s in table.series() if s["name"] == "core_sizes"]
    assert len(sizes) == 1 and sizes[0]["count"] == N and sizes[0]["buckets"] == [2, N - 2, 0]
    assert sizes[0]["sum"] == sum(range(N))

    meters = [_Meter.remote("a"), _Meter.remote("b")]
    try:
        actor_pids = muster.get([m.work.remote(3, level) for m, level in zip(meters, (1.5, 2.5))])
        assert len(set(actor_pids)) == 2
        # an actor's call sends nothing itself: its series come with the next periodic round
        assert wait_for(lambda: _value(table.series(), "core_jobs", kind="actor") == 6, 10), table.series()
        assert wait_for(lambda: _value(table.series(), "core_level", who="b") == 2.5, 10)
        assert _value(table.series(), "core_level", who="a") == 1.5

        from muster.util.metrics import Counter

        Counter("core_jobs", tag_keys=("kind",)).inc(4, tags={"kind": "driver"})  # the driver's own, as Ray's
        assert wait_for(lambda: _value(table.series(), "core_jobs", kind="driver") == 4, 15), table.series()

        reader = StoreReader.for_root(storage)
        assert wait_for(lambda: _value(reader.user_metrics(), "core_jobs", kind="driver") == 4, 10)
        assert _value(reader.user_metrics(), "core_jobs", kind="actor") == 6
        assert _value(reader.user_metrics(), "core_jobs", kind="task") == N

        d = dashboard(storage)
        text = httpx.get(d.base + "metrics").text
        assert "# TYPE ray_core_jobs_total counter" in text and "# HELP ray_core_jobs_total Jobs done." in text
        assert re.search(r'^ray_core_jobs_total\{kind="task"\} 8$', text, re.M), text
        assert re.search(r'^ray_core_jobs_total\{kind="actor"\} 6$', text, re.M), text
        assert re.search(r'^ray_core_jobs_total\{kind="driver"\} 4$', text, re.M), text
        assert re.search(r'^ray_core_level\{who="a"\} 1.5$', text, re.M), text
        assert re.search(r'^ray_core_sizes_bucket\{le="10"\} 8$', text, re.M), text
        assert re.search(r'^ray_core_sizes_count 8$', text, re.M), text
        api_rows = httpx.get(d.base + "api/metrics").json()["metrics"]
        assert _value(api_rows, "core_jobs", kind="actor") == 6
    finally:
        for m in meters:
            muster.kill(m)

    muster.shutdown()  # the driver's engine ended: its rows leave /metrics, and the store keeps them
    assert _value(reader.user_metrics(), "core_jobs", kind="task") is None
    assert _value(reader.user_metrics(live_only=False), "core_jobs", kind="task") == N
    assert "core_jobs" not in httpx.get(d.base + "metrics").text


def test_what_a_task_and_an_exiting_actor_recorded_is_not_lost(restart_engine):
    """With a report interval far longer than the test, only the flushes at task end and actor exit deliver."""
    restart_engine(600_000)
    table = api.get_runtime().user_metrics
    muster.get([_counted_task.remote(i) for i in range(2)])
    assert _value(table.series(), "core_jobs", kind="task") == 2

    meter = _Meter.remote("c")
    muster.get(meter.work.remote(4, 7.0))
    time.sleep(0.5)
    assert _value(table.series(), "core_jobs", kind="actor") is None  # waits for the next round (or its exit)
    with pytest.raises(muster.exceptions.ActorDiedError):
        muster.get(meter.work_and_exit.remote(5))
    assert wait_for(lambda: _value(table.series(), "core_jobs", kind="actor") == 9, 10), table.series()
    # once it is gone its counter stays counted, and its gauge (its own value) goes, as Ray's does
    assert wait_for(lambda: _value(table.series(), "core_level", who="c") is None, 10), table.series()
    assert _value(table.series(), "core_jobs", kind="task") == 2


def test_a_serve_replicas_metrics_are_exported_once(restart_engine):
    """A replica's series go out with the replica's tags through Serve's controller; not also as a worker's."""
    from muster import serve

    restart_engine(100)

    @serve.deployment(ray_actor_options={"num_cpus": 0})
    class Hits:
        def __call__(self, x):
            serve.metrics.Counter("replica_hits").inc()
            return x

    serve.start(http_options={"host": "127.0.0.1", "port": free_port()})  # never the default 8000 another may hold
    handle = serve.run(Hits.bind(), name="once", route_prefix=None)
    try:
        assert handle.remote(3).result() == 3

        def custom() -> list[dict]:
            return serve.status().applications["once"].deployments["Hits"].metrics.get("custom_metrics") or []

        assert wait_for(lambda: _value(custom(), "replica_hits") == 1, 30), custom()
        time.sleep(0.5)  # five report rounds of the replica's process
        assert _value(api.get_runtime().user_metrics.series(), "replica_hits") is None
    finally:
        serve.shutdown()


def test_a_dead_actors_gauge_leaves_the_store_as_it_leaves_the_table(restart_engine, storage):
    """Before, the store kept the row of a dead process's gauge (at its last value, on the dashboard's /metrics)
    until the driver ended, though the engine's table had dropped it; the counter stays counted."""
    from muster.observe.store.reader import StoreReader

    restart_engine(100)
    table = api.get_runtime().user_metrics
    meter = _Meter.remote("gone")
    muster.get(meter.work.remote(2, 4.5))
    assert wait_for(lambda: os.path.exists(os.path.join(storage, ".muster", "runs.db")), 15)
    reader = StoreReader.for_root(storage)
    assert wait_for(lambda: _value(reader.user_metrics(), "core_level", who="gone") == 4.5, 15), reader.user_metrics()
    muster.kill(meter)
    assert wait_for(lambda: _value(table.series(), "core_level", who="gone") is None, 10), table.series()
    assert wait_for(lambda: _value(reader.user_metrics(), "core_level", who="gone") is None, 10), reader.user_metrics()
    assert _value(reader.user_metrics(), "core_jobs", kind="actor") == 2


def test_a_tasks_gauge_stays_while_its_pooled_worker_lives_and_goes_with_it(restart_engine):
    """The rule the Ray engine follows too (tests/cluster/test_user_metrics_on_ray.py): a gauge is its process's."""
    import signal

    restart_engine(600_000)
    table = api.get_runtime().user_metrics
    pid = muster.get(_gauged_task.remote(1.5))
    time.sleep(0.3)
    assert _value(table.series(), "core_task_level", who=str(pid)) == 1.5  # the worker waits in the pool
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: _value(table.series(), "core_task_level", who=str(pid)) is None, 10), table.series()
