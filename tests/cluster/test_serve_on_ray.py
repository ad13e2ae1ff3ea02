"""muster.serve on a Ray cluster: replicas are Ray actors (through the runtime seam), reached over TCP;
the HTTP ingress runs in the driver's process, on the driver's node."""

from __future__ import annotations

import os
import time

import httpx
import pytest
from starlette.requests import Request

import muster
from muster import serve


@serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0.5})
class Where:
    def __init__(self, offset: int):
        self.offset = offset

    async def __call__(self, request: Request) -> dict:
        return {"pid": os.getpid(), "x": int(request.query_params.get("x", "0")) + self.offset}

    def add(self, x: int) -> int:
        return x + self.offset


@serve.deployment(ray_actor_options={"num_cpus": 0.5})
class Front:
    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, request: Request) -> dict:
        return {"sum": await self.inner.add.remote(int(request.query_params["x"]))}


@serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0.25}, gang_scheduling_config={"gang_size": 2})
class GangMember:
    def __call__(self) -> tuple:
        gang = serve.get_replica_context().gang_context
        return gang.gang_id, gang.rank, gang.pg_name


@muster.remote(num_cpus=0.25)
class GroupHelper:
    def group(self) -> str | None:
        from muster.util.placement_group import get_current_placement_group

        pg = get_current_placement_group()
        return None if pg is None else pg.id


@serve.deployment(ray_actor_options={"num_cpus": 0.25}, placement_group_bundles=[{"CPU": 0.25}, {"CPU": 0.25}])
class OwnGroup:
    def __init__(self):
        self.helper = GroupHelper.remote()  # captured into the replica's group, as on Ray

    def __call__(self) -> tuple:
        from muster.util.placement_group import get_current_placement_group

        pg = get_current_placement_group()
        return None if pg is None else (pg.id, pg.name), muster.get(self.helper.group.remote(), timeout=30)


@muster.remote(num_cpus=0.1)
def add_in_a_task(handle, x: int) -> int:
    return handle.add.remote(x).result(timeout_s=30)


@muster.remote(num_cpus=0.1)
def add_by_name_in_a_task(x: int) -> int:
    return serve.get_app_handle("where").add.remote(x).result(timeout_s=30)


def test_serve_on_ray(on_ray, tmp_path, monkeypatch):
    from muster.core.api import get_runtime
    from muster.observe.store.reader import StoreReader
    from muster.serve import api

    monkeypatch.setenv("MUSTER_STORAGE_PATH", str(tmp_path))  # Serve records its replicas and metrics there

    assert get_runtime().name == "ray"
    serve.start(http_options={"host": "127.0.0.1", "port": 0})
    try:
        port = serve.status().http["port"]
        serve.run(Where.bind(10), name="where", route_prefix="/where")
        serve.run(Front.bind(Where.options(name="Inner", num_replicas=1).bind(5)), name="front", route_prefix="/front")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
            answers = [c.get("/where", params={"x": i}).json() for i in range(20)]
            assert [a["x"] for a in answers] == [i + 10 for i in range(20)]
            assert len({a["pid"] for a in answers}) == 2
            assert c.get("/front", params={"x": 1}).json() == {"sum": 6}
        assert serve.get_app_handle("where").add.remote(1).result(timeout_s=30) == 11
        # a Ray task (on any node) asks the driver for the route table and calls over TCP
        assert muster.get(add_in_a_task.remote(serve.get_app_handle("where"), 2), timeout=60) == 12
        assert muster.get(add_by_name_in_a_task.remote(3), timeout=60) == 13
        st = serve.status().applications["where"].deployments["Where"]
        assert st.replica_states == {"RUNNING": 2}
        routes = api._controller.table.deployments[("where", "Where")].replicas
        assert all(r.path.startswith("tcp:") for r in routes)  # Ray actors, reached over TCP
        reader = StoreReader.for_root(str(tmp_path))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(
                (m["served"] or 0) >= 20 for m in reader.serve_metrics("where", "Where")):
            time.sleep(0.2)
        assert any((m["served"] or 0) >= 20 for m in reader.serve_metrics("where", "Where"))
        reps = reader.serve_replicas("where", "Where")
        assert [r["state"] for r in reps] == ["RUNNING", "RUNNING"] and all(r["host"] is None for r in reps)
        # a gang is one Ray placement group, a bundle per member
        gang = serve.run(GangMember.bind(), name="gang", route_prefix=None)
        members = {gang.remote().result(timeout_s=30) for _ in range(20)}
        assert len(members) == 2 and {m[1] for m in members} == {0, 1} and len({m[0] for m in members}) == 1
        import ray

        groups = [g for g in ray.util.placement_group_table().values() if g["name"] == next(iter(members))[2]]
        assert [(g["state"], g["strategy"], len(g["bundles"])) for g in groups] == [("CREATED", "PACK", 2)]
        # placement_group_bundles: each replica runs in its own Ray placement group, its helper actor too
        (pg_id, pg_name), helper_group = serve.run(OwnGroup.bind(), name="own", route_prefix=None).remote().result(
            timeout_s=60)
        assert helper_group == pg_id and pg_name.startswith("SERVE_REPLICA::")
        states = [g["state"] for g in ray.util.placement_group_table().values() if g["name"] == pg_name]
        assert states == ["CREATED"]
        serve.delete("own")
        states = [g["state"] for g in ray.util.placement_group_table().values() if g["name"] == pg_name]
        assert states in ([], ["REMOVED"])
    finally:
        serve.shutdown()
