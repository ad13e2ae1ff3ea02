"""Ray Serve 2.60's user guides (composition, configuring deployments) ported by changing the import: what
their code prints matches Ray's."""

from __future__ import annotations

import pytest

from muster import serve
from muster.serve.context import DeploymentID, ReplicaID
from muster.serve.handle import DeploymentHandle, DeploymentResponse

pytestmark = pytest.mark.allow_leftover_workers  # the module's Serve ends with the module (its client fixture)

SMALL = {"num_cpus": 0.1}


@serve.deployment(ray_actor_options=SMALL)
class Adder:
    def __init__(self, increment: int):
        self._increment = increment

    def __call__(self, val: int) -> int:
        return val + self._increment


@serve.deployment(ray_actor_options=SMALL)
class Multiplier:
    def __init__(self, multiple: int):
        self._multiple = multiple

    def __call__(self, val: int) -> int:
        return val * self._multiple


@serve.deployment(ray_actor_options=SMALL)
class Ingress:
    def __init__(self, adder: DeploymentHandle, multiplier: DeploymentHandle):
        self._adder = adder
        self._multiplier = multiplier

    async def __call__(self, input: int) -> int:
        adder_response: DeploymentResponse = self._adder.remote(input)
        return await self._multiplier.remote(adder_response)  # the response goes in unawaited


def test_the_chaining_guide_prints_rays_handle_and_deployment_id(client):
    """Ray 2.60 prints a handle as ``DeploymentHandle(deployment='Ingress')`` and its ``deployment_id`` as
    ``Deployment(name='Ingress', app='default')`` (muster printed ``..., app='default')`` and the dataclass's
    ``DeploymentID(name=..., app_name=...)``)."""
    handle = serve.run(Ingress.bind(Adder.bind(increment=1), Multiplier.bind(multiple=2)), name="chain",
                       route_prefix=None)
    assert handle.remote(5).result(timeout_s=30) == 12
    assert repr(handle.deployment_id) == str(handle.deployment_id) == "Deployment(name='Ingress', app='chain')"
    assert repr(handle) == "DeploymentHandle(deployment='Ingress')"
    assert handle.deployment_id == DeploymentID("Ingress", "chain")
    serve.delete("chain")


def test_a_deployment_prints_and_reports_its_actor_options_as_rays_does():
    """The configure guide's ``Translator.options(ray_actor_options={})``: Ray's ``ray_actor_options`` fills in
    the replica's default ``num_cpus`` of 1 (muster gave ``{}``), a deployment prints as
    ``Deployment(name=Translator)``, and ``num_replicas`` is 1 when it is not a fixed count."""

    @serve.deployment(name="Translator", num_replicas=2, ray_actor_options={"num_cpus": 0.2, "num_gpus": 0})
    class Translator:
        pass

    assert Translator.ray_actor_options == {"num_cpus": 0.2, "num_gpus": 0}
    assert Translator.options(ray_actor_options={}).ray_actor_options == {"num_cpus": 1}
    assert Translator.options(ray_actor_options={"num_gpus": 1}).ray_actor_options == {"num_gpus": 1, "num_cpus": 1}
    assert serve.deployment(Translator.func_or_class).ray_actor_options == {"num_cpus": 1}
    assert repr(Translator) == "Deployment(name=Translator)"
    assert Translator.num_replicas == 2 and Translator.options(num_replicas="auto").num_replicas == 1
    autoscaled = serve.deployment(autoscaling_config={"min_replicas": 1, "max_replicas": 3})(Translator.func_or_class)
    assert autoscaled.num_replicas == 1  # Ray's default count, as Ray reports it (muster gave None)


def test_a_replica_id_prints_as_rays():
    """Ray's ``ReplicaID`` prints as its ``str`` (``Replica(id=..., ...)``) in reprs and containers too."""
    rid = ReplicaID("abc", DeploymentID("D", "app"))
    assert repr(rid) == repr([rid])[1:-1] == "Replica(id='abc', deployment='D', app='app')"


def test_a_local_testing_mode_handle_prints_as_rays():
    """Ray's ``_local_testing_mode`` handle is a ``DeploymentHandle`` and prints as one."""
    handle = serve.run(Adder.bind(increment=1), _local_testing_mode=True)
    assert handle.remote(1).result(timeout_s=10) == 2
    assert repr(handle) == "DeploymentHandle(deployment='Adder')"


def test_run_refuses_a_keyword_rays_run_does_not_take(client):
    """Ray 2.60's ``serve.run`` has no ``_blocking`` (older Rays' ``_blocking``, ``host``, ``port``) and raises
    ``TypeError`` for it, deploying nothing; muster dropped any such keyword unread, a misspelt ``nmae=`` too."""
    for bad in ({"_blocking": False}, {"nmae": "typo"}):
        with pytest.raises(TypeError, match=rf"unexpected keyword argument '{next(iter(bad))}'"):
            serve.run(Adder.bind(increment=1), name="refused", route_prefix=None, **bad)
    assert "refused" not in serve.status().applications
    with pytest.raises(TypeError, match=r"'_blocking'.*returns once the app runs"):
        serve.run_many([serve.RunTarget(Adder.bind(increment=1), name="refused")], _blocking=True)
