"""``muster.util.state``: Ray's state API over the running engine (actors, placement groups, nodes)."""

from __future__ import annotations

import os
import time

import pytest
from _task_helpers import TIMEOUT, wait_for

import muster
from muster.exceptions import InvalidArgumentError, UnsupportedRayImportError
from muster.util import placement_group, remove_placement_group
from muster.util.state import (
    get_actor,
    get_node,
    get_placement_group,
    get_task,
    list_actors,
    list_nodes,
    list_placement_groups,
    list_tasks,
    summarize_actors,
    summarize_tasks,
)


@muster.remote
class Probe:
    def me(self):
        return os.getpid(), muster.get_runtime_context().get_actor_id()


@muster.remote
def actors_seen_from_a_task(actor_id):
    from muster.util.state import get_actor as lookup

    row = lookup(actor_id)
    return row.state, row.pid


def test_list_actors_follows_an_actor_from_alive_to_dead_with_rays_columns_and_filters():
    named = Probe.options(name="probe-named", num_cpus=1).remote()
    other = Probe.remote()
    try:
        pid, actor_id = muster.get(named.me.remote(), timeout=TIMEOUT)
        muster.get(other.me.remote(), timeout=TIMEOUT)
        mine = [a for a in list_actors(filters=[("class_name", "=", "probe")]) if a.actor_id == actor_id]
        assert len(mine) == 1  # string filters ignore case, as Ray's
        row = mine[0]
        assert (row.state, row.name, row.pid, row["ray_namespace"]) == ("ALIVE", "probe-named", pid, "default")
        assert row.node_id == muster.get_runtime_context().get_node_id()
        assert row.job_id == muster.get_runtime_context().get_job_id()
        assert row.required_resources is None and row.num_restarts is None  # detail columns: detail=True only
        full = get_actor(actor_id)
        assert full.required_resources == {"CPU": 1.0} and full.num_restarts == 0 and full.is_detached is False
        assert muster.get(actors_seen_from_a_task.remote(actor_id), timeout=TIMEOUT) == ("ALIVE", pid)
        assert [a.name for a in list_actors(filters=[("name", "=", "probe-named"), ("pid", "=", str(pid))])] == \
            ["probe-named"]  # a CLI-style string matches an int column

        muster.kill(named)
        assert wait_for(lambda: get_actor(actor_id).state == "DEAD", TIMEOUT)
        dead = get_actor(actor_id)
        assert "muster.kill" in dead.death_cause["actor_died_error_context"]["error_message"]
        alive_ids = {a.actor_id for a in list_actors(filters=[("state", "!=", "DEAD")], limit=1000)}
        assert actor_id not in alive_ids
        counts = summarize_actors()["cluster"]["summary"]["Probe"]["state_counts"]
        assert counts["DEAD"] >= 1 and counts["ALIVE"] >= 1
        assert len(list_actors(limit=1)) == 1
        assert get_actor("ff" * 12) is None
    finally:
        muster.kill(named)
        muster.kill(other)


def test_placement_groups_and_nodes_as_rows():
    pg = placement_group([{"CPU": 1}], name="state-api-group")
    try:
        assert pg.wait(TIMEOUT)
        [row] = list_placement_groups(filters=[("name", "=", "state-api-group")], detail=True)
        node = muster.get_runtime_context().get_node_id()
        assert (row.placement_group_id, row.state, row.is_detached) == (pg.id, "CREATED", False)
        assert row.bundles == [{"bundle_id": {"placement_group_id": pg.id, "bundle_index": 0},
                                "unit_resources": {"CPU": 1.0}, "node_id": node}]
        remove_placement_group(pg)
        assert get_placement_group(pg.id).state == "REMOVED"
    finally:
        remove_placement_group(pg)
    [only] = list_nodes()
    assert (only.node_id, only.state, only.is_head_node) == (node, "ALIVE", True)
    assert only.resources_total["CPU"] == muster.cluster_resources()["CPU"]
    assert get_node(node).node_ip == muster.util.get_node_ip_address()


def test_bad_filters_and_what_is_not_kept_fail_naming_the_fix():
    with pytest.raises(InvalidArgumentError, match="filter column 'death_cause' is not supported.*'state'"):
        list_actors(filters=[("death_cause", "=", "x")])
    with pytest.raises(InvalidArgumentError, match="predicate '>' is not supported"):
        list_actors(filters=[("state", ">", "ALIVE")])
    with pytest.raises(UnsupportedRayImportError, match="list_objects.*available_resources"):
        from muster.util.state import list_objects  # noqa: F401


@muster.remote
def _waits_then_names_itself(path):
    while not os.path.exists(path):
        time.sleep(0.02)
    return muster.get_runtime_context().get_task_id(), os.getpid()


@muster.remote
def _raises():
    raise KeyError("no such key")


@muster.remote
def _tasks_seen_from_a_task(task_id):
    from muster.util.state import get_task as lookup

    return lookup(task_id).state


@muster.remote
class _Calls:
    def __init__(self):
        self.made_by = muster.get_runtime_context().get_task_id()

    def ids(self):
        return self.made_by, muster.get_runtime_context().get_task_id()


@muster.remote
class _StateApiFailsToStart:
    def __init__(self):
        raise RuntimeError("cannot start")

    def f(self):
        return 1


def test_list_tasks_follows_tasks_actor_calls_and_constructors_with_the_ids_they_see(tmp_path):
    gate = str(tmp_path / "go")
    running = _waits_then_names_itself.options(name="gated").remote(gate)
    assert wait_for(lambda: (get_task(running) or {}).get("state") == "RUNNING", TIMEOUT)
    assert get_task(running).name == "gated" and get_task(running).func_or_class_name == "_waits_then_names_itself"
    open(gate, "w").close()
    task_id, pid = muster.get(running, timeout=TIMEOUT)
    row = get_task(task_id)
    assert (row.state, row.type, row.worker_pid, row.job_id) == ("FINISHED", "NORMAL_TASK", pid,
                                                                 muster.get_runtime_context().get_job_id())
    assert row.node_id == muster.get_runtime_context().get_node_id() and row.required_resources == {"CPU": 1.0}
    assert row.end_time_ms >= row.start_time_ms >= row.creation_time_ms
    failed = _raises.remote()
    with pytest.raises(KeyError):
        muster.get(failed, timeout=TIMEOUT)
    bad = get_task(failed)
    assert (bad.state, bad.error_type) == ("FAILED", "TASK_EXECUTION_EXCEPTION") and "no such key" in bad.error_message
    assert muster.get(_tasks_seen_from_a_task.remote(task_id), timeout=TIMEOUT) == "FINISHED"

    actor = _Calls.remote()
    broken = _StateApiFailsToStart.remote()
    try:
        made_by, call_id = muster.get(actor.ids.remote(), timeout=TIMEOUT)
        call = get_task(call_id)  # the id the call saw in get_runtime_context()
        assert (call.name, call.type, call.state) == ("_Calls.ids", "ACTOR_TASK", "FINISHED")
        assert call.actor_id == get_task(made_by).actor_id == actor._hex_id
        assert get_actor(actor._hex_id).class_name == "_Calls"
        assert (get_task(made_by).name, get_task(made_by).type) == ("_Calls.__init__", "ACTOR_CREATION_TASK")
        with pytest.raises(muster.exceptions.ActorDiedError):
            muster.get(broken.f.remote(), timeout=TIMEOUT)
        [creation] = list_tasks(filters=[("name", "=", "_StateApiFailsToStart.__init__"),
                                         ("actor_id", "=", broken._hex_id)], detail=True)
        assert creation.state == "FAILED" and "cannot start" in creation.error_message
        failed_names = {t.name for t in list_tasks(filters=[("state", "=", "FAILED"), ("type", "=", "NORMAL_TASK")],
                                                   limit=10_000)}
        assert "_raises" in failed_names and "gated" not in failed_names
        summary = summarize_tasks()["cluster"]
        assert summary["summary"]["_raises"]["state_counts"]["FAILED"] >= 1
        assert summary["total_tasks"] >= 3 and summary["total_actor_tasks"] >= 1
        assert summary["total_actor_scheduled"] >= 2
    finally:
        muster.kill(actor)
        muster.kill(broken)
