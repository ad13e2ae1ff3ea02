"""``muster.util.metrics`` recorded in tasks and actors on a Ray cluster reach the driver's ``Runtime.user_metrics``,
merged across the cluster's worker processes, as on the embedded engine (tests/observe/test_core_user_metrics.py):
a task's with its result, an actor's every report interval and when it exits; a dead actor's gauges go. (Before,
only the driver's own metrics reached the table on the Ray engine.)"""

from __future__ import annotations

import os
import signal

from _shared import wait_for

import muster
from muster.core import api
from muster.exceptions import ActorDiedError

N = 6


def _value(series: list[dict], name: str, **tags: str) -> float | None:
    found = [s for s in series if s["name"] == name and all(s["tags"].get(k) == v for k, v in tags.items())]
    return sum(s.get("value") or s.get("count") or 0 for s in found) if found else None


@muster.remote(num_cpus=1)
def _counted_task(i: int) -> tuple[str, int]:
    from muster.util.metrics import Counter, Histogram

    Counter("ray_jobs", description="Jobs done.", tag_keys=("kind",)).inc(tags={"kind": "task"})
    Histogram("ray_sizes", boundaries=[1.0, 10.0]).observe(i)
    return muster.get_runtime_context().get_node_id(), os.getpid()


@muster.remote(num_cpus=1)
def _gauged_task(level: float) -> int:
    from muster.util.metrics import Counter, Gauge

    Counter("ray_gauged_jobs").inc()
    Gauge("ray_task_level", tag_keys=("who",)).set(level, tags={"who": str(os.getpid())})
    return os.getpid()


@muster.remote(num_cpus=0)
class _Meter:
    def __init__(self, name: str):
        from muster.util.metrics import Counter, Gauge

        self.jobs = Counter("ray_jobs", description="Jobs done.", tag_keys=("kind",))
        self.level = Gauge("ray_level", tag_keys=("who",)).set_default_tags({"who": name})

    def work(self, n: int, level: float) -> int:
        self.jobs.inc(n, tags={"kind": "actor"})
        self.level.set(level)
        return os.getpid()

    def work_and_exit(self, n: int) -> None:
        from muster.actor import exit_actor

        self.jobs.inc(n, tags={"kind": "exiting"})
        exit_actor()


def test_task_and_actor_metrics_reach_the_drivers_table_merged_across_the_cluster(on_ray, monkeypatch):
    monkeypatch.setenv("MUSTER_METRICS_REPORT_INTERVAL_MS", "200")  # forwarded to the actors' processes
    table = api.get_runtime().user_metrics
    where = muster.get([_counted_task.remote(i) for i in range(N)], timeout=120)
    assert len(set(where)) >= 2, "the tasks ran in more than one Ray worker process"
    # sent as each task ended, before its result: no wait
    assert _value(table.series(), "ray_jobs", kind="task") == N, table.series()
    sizes = [s for s in table.series() if s["name"] == "ray_sizes"]
    assert len(sizes) == 1 and sizes[0]["count"] == N and sizes[0]["buckets"] == [2, N - 2, 0]

    meter = _Meter.remote("a")
    try:
        muster.get(meter.work.remote(3, 2.5), timeout=120)
        assert wait_for(lambda: _value(table.series(), "ray_jobs", kind="actor") == 3, 20), table.series()
        assert wait_for(lambda: _value(table.series(), "ray_level", who="a") == 2.5, 20), table.series()
    finally:
        muster.kill(meter)
    # the actor's process is gone: its gauge goes, its counter stays counted
    assert wait_for(lambda: _value(table.series(), "ray_level", who="a") is None, 20), table.series()
    assert _value(table.series(), "ray_jobs", kind="actor") == 3

    monkeypatch.setenv("MUSTER_METRICS_REPORT_INTERVAL_MS", "600000")  # only the flush at its exit delivers
    leaving = _Meter.remote("b")
    try:
        muster.get(leaving.work_and_exit.remote(4), timeout=120)
    except ActorDiedError:
        pass
    assert wait_for(lambda: _value(table.series(), "ray_jobs", kind="exiting") == 4, 20), table.series()



def test_a_tasks_gauge_goes_when_its_ray_worker_dies_as_on_the_local_engine(on_ray):
    """Ray pools a task's worker process: its gauge stays while the process lives (its value is that process's,
    as Ray's agent exports a live worker's), and goes once Ray reports it dead, as the local engine drops a
    pooled worker's when it exits. Before, a task's gauges stayed for as long as the driver ran."""
    table = api.get_runtime().user_metrics
    pid = muster.get(_gauged_task.remote(3.5), timeout=120)
    assert _value(table.series(), "ray_task_level", who=str(pid)) == 3.5, table.series()
    os.kill(pid, signal.SIGKILL)  # the cluster runs on this machine: as Ray ending its idle worker
    assert wait_for(lambda: _value(table.series(), "ray_task_level", who=str(pid)) is None, 30), table.series()
    assert _value(table.series(), "ray_gauged_jobs") == 1  # its counter stays counted
