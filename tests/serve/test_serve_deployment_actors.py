"""Deployment-scoped actors (Ray 2.60's ``deployment_actors=``, ``serve.get_deployment_actor``): one actor the
replicas share, started before them and stopped with the app."""

from __future__ import annotations

import os

import pytest

import muster
from muster import serve
from muster.serve.config import DeploymentActorConfig
from muster.serve.exceptions import RayServeException

pytestmark = pytest.mark.allow_leftover_workers  # Serve lives across the module (the client fixture checks its end)


@muster.remote
class _Counter:
    def __init__(self, start: int = 0):
        self.value = start

    def increment(self) -> int:
        self.value += 1
        return self.value

    def who(self) -> tuple[str, str, str]:
        ctx = serve.get_deployment_actor_context()
        return ctx.app_name, ctx.deployment, ctx.actor_name


@muster.remote
class _Broken:
    def __init__(self):
        raise RuntimeError("no database")


def _counter(start: int) -> DeploymentActorConfig:
    return DeploymentActorConfig(name="counter", actor_class=_Counter, init_kwargs={"start": start},
                                 actor_options={"num_cpus": 0})


@serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0.1}, deployment_actors=[_counter(10)])
class _Shared:
    async def __call__(self) -> tuple[int, int]:
        return os.getpid(), await serve.get_deployment_actor("counter").increment.remote()

    def missing(self) -> None:
        serve.get_deployment_actor("nope")

    async def actor_says(self) -> tuple[str, str, str]:
        return await serve.get_deployment_actor("counter").who.remote()


def _serve_actor_names() -> list[str]:
    return [a["name"] for a in muster.util.list_named_actors(all_namespaces=True)
            if a["name"].startswith("SERVE_DEPLOYMENT_ACTOR::")]


def test_replicas_share_their_deployments_actor_and_it_stops_with_the_app(client):
    handle = serve.run(_Shared.bind(), name="shared", route_prefix="/shared")
    answers = [handle.remote().result(timeout_s=30) for _ in range(12)]
    assert sorted(n for _, n in answers) == list(range(11, 23))  # one counter, started at 10, for every call
    assert len({pid for pid, _ in answers}) == 2  # ... reached from both replicas
    assert client.get("/shared").json()[1] == 23
    assert len(_serve_actor_names()) == 1
    # Ray 2.60's serve.get_deployment_actor_context() in the actor (UnsupportedRayImportError before)
    assert tuple(handle.actor_says.remote().result(timeout_s=30)) == ("shared", "_Shared", "counter")
    with pytest.raises(ValueError, match=r"get_deployment_actor\('nope'\): deployment '_Shared' declares no "
                                         r"deployment actor of that name; it declares \['counter'\]"):
        handle.missing.remote().result(timeout_s=30)
    serve.delete("shared")
    assert _serve_actor_names() == []


def test_an_actor_that_fails_to_start_fails_serve_run_and_leaves_nothing(client):
    broken = _Shared.options(deployment_actors=[_counter(0), DeploymentActorConfig(name="db", actor_class=_Broken)])
    with pytest.raises(RayServeException, match=r"deployment '_Shared' of app 'broken': its deployment actor 'db' "
                                               r"failed to start: .*no database"):
        serve.run(broken.bind(), name="broken", route_prefix="/broken")
    assert _serve_actor_names() == [] and serve.status().applications["broken"].status == "DEPLOY_FAILED"
    serve.delete("broken")


def test_get_deployment_actor_outside_a_replica_and_bad_configs_name_the_fix():
    with pytest.raises(RayServeException, match="only works inside a deployment's replica"):
        serve.get_deployment_actor("counter")
    with pytest.raises(RayServeException, match="only works inside a deployment-scoped actor"):
        serve.get_deployment_actor_context()
    with pytest.raises(ValueError, match=r"deployment_actors names \['a', 'a'\] repeat"):
        twice = [DeploymentActorConfig(name="a", actor_class=_Counter)] * 2
        serve.deployment(deployment_actors=twice)(_Shared.func_or_class)
    with pytest.raises(ValueError, match=r"actor_options \['name'\] are Serve's to set"):
        DeploymentActorConfig(name="a", actor_class=_Counter, actor_options={"name": "x"})
