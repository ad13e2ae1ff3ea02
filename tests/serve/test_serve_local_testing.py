"""Ray's ``serve.run(app, _local_testing_mode=True)``: the app runs in this process, with no Serve started."""

from __future__ import annotations

import pytest

from muster import serve
from muster.serve.exceptions import RayServeException


@serve.deployment(num_replicas=3, ray_actor_options={"num_gpus": 8})  # more than the machine: never asked for
class Doubler:
    def double(self, s: str) -> str:
        return f"{s} {s}"

    def fail(self):
        raise KeyError("no such key")

    def count(self, n: int):
        yield from range(n)


@serve.deployment
class Hello:
    def __init__(self, doubler):
        self.doubler = doubler

    async def __call__(self, name: str) -> str:
        return await self.doubler.double.remote(f"Hello, {name}!")

    async def fail(self):
        return await self.doubler.fail.remote()


def test_local_testing_mode_runs_the_app_in_process_without_serve():
    """Ray's dev-workflow sample: a composed app answers through its handle, a method's exception comes back as
    itself, streams stream, and nothing is deployed (no resources asked, no app in serve.status())."""
    handle = serve.run(Hello.bind(Doubler.bind()), _local_testing_mode=True)
    assert isinstance(handle, serve.DeploymentHandle)
    assert handle.remote("Ray").result(timeout_s=30) == "Hello, Ray! Hello, Ray!"
    with pytest.raises(KeyError) as info:
        handle.fail.remote().result(timeout_s=30)
    assert type(info.value) is KeyError  # not a remote wrapper
    doubler = serve.run(Doubler.bind(), name="doubler", _local_testing_mode=True)
    assert list(doubler.options(stream=True).count.remote(3)) == [0, 1, 2]
    assert doubler.double.remote(doubler.double.remote("a")).result(timeout_s=30) == "a a a a"
    with pytest.raises(RayServeException, match=r"no method 'triple'; its methods: \['count', 'double', 'fail'\]"):
        doubler.triple.remote().result(timeout_s=30)
    assert serve.status().applications == {}


def test_local_testing_mode_refuses_a_generator_called_without_stream_as_rays():
    """Ray 2.60's local mode raises TypeError ("returned a generator. You must use handle.options(stream=True)"),
    as a replica does; before, result() handed back the generator object itself."""
    doubler = serve.run(Doubler.bind(), name="gen", _local_testing_mode=True)
    with pytest.raises(TypeError, match=r"Doubler.count returned a generator; .*options\(stream=True\)"):
        doubler.count.remote(3).result(timeout_s=30)
    assert list(doubler.options(stream=True).count.remote(2)) == [0, 1]


def test_run_many_takes_rays_local_testing_mode():
    """Ray 2.60's ``run_many(..., _local_testing_mode=True)`` runs the apps in this process too (muster dropped the
    flag unread and started Serve, asking for the 24 GPUs Doubler's replicas want)."""
    handles = serve.run_many([serve.RunTarget(Hello.bind(Doubler.bind()), name="local_many", route_prefix=None)],
                             _local_testing_mode=True)
    assert handles[0].remote("Ray").result(timeout_s=30) == "Hello, Ray! Hello, Ray!"
    assert serve.status().applications == {}  # nothing was deployed
