"""``muster.util.state``: Ray's state API over the running engine (actors, placement groups, nodes)."""

from __future__ import annotations

import os

import pytest
from _task_helpers import TIMEOUT, wait_for

import muster
from muster.exceptions import InvalidArgumentError, UnsupportedRayImportError
from muster.util import placement_group, remove_placement_group
from muster.util.state import (
    get_actor,
    get_node,
    get_placement_group,
    list_actors,
    list_nodes,
    list_placement_groups,
    summarize_actors,
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
    with pytest.raises(UnsupportedRayImportError, match="list_tasks.*muster.wait"):
        from muster.util.state import list_tasks  # noqa: F401
