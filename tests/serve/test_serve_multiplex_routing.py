"""Model multiplexing routes a request to the replica that holds its model (Ray Serve's behaviour)."""

from __future__ import annotations

import asyncio
import os
import time

import cloudpickle

import pytest
from serve_helpers import Counted, check_http_requests_go_to_the_replica_holding_their_model, check_models_routed

from muster import serve
from muster.serve import multiplex
from muster.core import settings
from muster.exceptions import InvalidArgumentError

pytestmark = pytest.mark.allow_leftover_workers  # Serve lives across the module (the client fixture checks its end)


def test_handle_requests_go_to_the_replica_holding_their_model(client):
    handle = serve.run(Counted.bind(), name="mux_handles", route_prefix="/mux_handles")

    def call(model_id: str) -> tuple:
        return handle.options(multiplexed_model_id=model_id).remote().result(timeout_s=30)

    answers = [call(m) for m in ["a"] * 6 + ["b"] * 6 + ["a"] * 4]
    together = [handle.options(multiplexed_model_id="c").remote() for _ in range(6)]  # a new model, at once
    answers += [r.result(timeout_s=30) for r in together]
    check_models_routed(answers, ["a", "b", "c"])
    assert len({pid for pid, _, _ in answers}) == 3  # each model on its own replica (one model per replica)
    serve.delete("mux_handles")


def test_http_requests_go_to_the_replica_holding_their_model(client):
    check_http_requests_go_to_the_replica_holding_their_model(client)


def test_a_function_deployment_calling_a_loader_is_routed_by_model(client):
    """A function deployment calling a module-level loader (Ray allows it), both defined here so they travel by
    value, as a script's do. Before, such a loader could not be pickled, and such a deployment was not routed;
    the header with hyphens was not read."""
    loads: list[str] = []

    @serve.multiplexed(max_num_models_per_replica=1)
    async def get_model(model_id: str) -> str:
        loads.append(model_id)
        await asyncio.sleep(0.05)
        return model_id

    @serve.deployment(num_replicas=3, ray_actor_options={"num_cpus": 0.1}, max_ongoing_requests=8)
    async def answer(*args) -> tuple:
        return os.getpid(), await get_model(serve.get_multiplexed_model_id()), list(loads)

    handle = serve.run(answer.bind(), name="mux_fn", route_prefix="/mux_fn")
    answers = [handle.options(multiplexed_model_id=m).remote().result(timeout_s=30) for m in ["a"] * 6 + ["b"] * 6]
    for m in ["c"] * 6 + ["a"] * 3:  # Ray takes the header's name with hyphens too (what nginx passes on)
        name = "serve_multiplexed_model_id" if m == "c" else "serve-multiplexed-model-id"
        r = client.get("/mux_fn", headers={name: m})
        assert r.status_code == 200, r.text
        answers.append(tuple(r.json()))
    check_models_routed(answers, ["a", "b", "c"])
    serve.delete("mux_fn")


def test_any_deployment_reads_the_model_its_http_request_names(client):
    """As in Ray, also one with no loader (an ingress passing the model on); it read "" before."""

    @serve.deployment(ray_actor_options={"num_cpus": 0.1})
    def model_of() -> str:
        return serve.get_multiplexed_model_id()

    serve.run(model_of.bind(), name="mux_plain", route_prefix="/mux_plain")
    assert client.get("/mux_plain", headers={"serve_multiplexed_model_id": "m1"}).text == "m1"
    assert client.get("/mux_plain").text == ""
    serve.delete("mux_plain")


def test_a_loader_of_a_class_defined_in_a_script_travels_empty():
    """A class pickled by value (a script's) with its loader: it pickled a weakref and failed; now each copy
    keeps its own models and reports them."""

    class Local:
        @serve.multiplexed(max_num_models_per_replica=2)
        async def get_model(self, model_id: str) -> str:
            return model_id * 2

    Copy = cloudpickle.loads(cloudpickle.dumps(Local))
    assert multiplex.is_multiplexed(Copy)
    assert asyncio.run(Copy().get_model("m")) == "mm" and "m" in multiplex.held()


def test_a_busy_holder_falls_back_after_rays_matching_timeout(client, monkeypatch):
    """The holder at max_ongoing_requests: the request waits T..2T (Ray's environment variable, read where the
    request is routed: here the driver), then loads the model elsewhere. It waited a fixed 1 s before."""
    monkeypatch.setenv("RAY_SERVE_MULTIPLEXED_MODEL_ID_MATCHING_TIMEOUT_S", "1.5")
    handle = serve.run(Counted.options(num_replicas=2, max_ongoing_requests=1).bind(), name="mux_busy",
                       route_prefix="/mux_busy")
    a = handle.options(multiplexed_model_id="a")
    busy = a.slow.remote(6.0)
    time.sleep(0.5)  # it holds its replica's only slot for 6 s
    t0 = time.monotonic()
    pid, model, loads = a.remote().result(timeout_s=30)
    waited = time.monotonic() - t0
    slow_pid = busy.result(timeout_s=30)[0]
    assert pid != slow_pid and model == "a" and loads == ["a"]
    # waited 1.5-3 s for the holder, then its call's time: not the fixed 1 s of before, nor the holder's 6 s
    # request. A load can only lengthen the wait, so the old 1 s is told apart by the lower bound; with 0.2 s and
    # an upper bound of 0.85 s, the call's own time on a loaded box could cross it.
    assert 1.45 < waited < 5.0, waited
    serve.delete("mux_busy")


def test_the_matching_timeout_is_read_as_ray_reads_it(monkeypatch):
    name = "RAY_SERVE_MULTIPLEXED_MODEL_ID_MATCHING_TIMEOUT_S"
    monkeypatch.delenv(name, raising=False)
    assert settings.serve_model_matching_timeout_s() == 1.0  # Ray's default
    monkeypatch.setenv(name, "0")
    assert settings.serve_model_matching_timeout_s() == 0.0
    for bad in ("-1", "soon", "nan"):
        monkeypatch.setenv(name, bad)
        with pytest.raises(InvalidArgumentError, match=f"{name}='{bad}'"):
            settings.serve_model_matching_timeout_s()


@serve.deployment(max_ongoing_requests=16, ray_actor_options={"num_cpus": 0.1})
class _BatchedByModel:
    """Batches calls across models; each batch says the model ``get_multiplexed_model_id`` gave it."""

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.5)
    async def predict(self, xs: list[str]) -> list[str]:
        model = serve.get_multiplexed_model_id()
        callers = serve.context._get_serve_batch_request_context()  # this part's callers only
        named = "/".join(sorted({c.multiplexed_model_id for c in callers}))
        return [f"{model}:{x}:{len(xs)}:{len(callers)}:{named}" for x in xs]

    async def __call__(self, x: str) -> str:
        return await self.predict(x)


def test_a_batch_is_split_by_the_model_its_calls_name(client):
    """As in Ray, calls for different multiplexed models never share a batch, and each part reads its own
    model (before, one batch mixed them and every call read the model of the first request the replica
    batched)."""
    handle = serve.run(_BatchedByModel.bind(), name="mux_batch", route_prefix=None)
    models = ["m0", "m1", "m0", "m2", "m1", "m0"]
    responses = [handle.options(multiplexed_model_id=m).remote(f"x{i}") for i, m in enumerate(models)]
    answers = [r.result(timeout_s=30) for r in responses]
    for i, (m, a) in enumerate(zip(models, answers)):
        model, x, size, callers, named = a.split(":")
        assert (model, x, callers, named) == (m, f"x{i}", size, m)
        assert int(size) <= models.count(m)  # a batch holds only its own model's calls
    serve.delete("mux_batch")


def test_an_evicted_models_async_del_is_awaited_before_the_next_model_loads(client):
    """Ray's multiplexer awaits an evicted model's ``async def __del__`` before it loads the next one (the memory
    it frees is the new model's); muster only dropped the model, so the coroutine Python's collector made was
    never awaited and the cleanup never ran. A plain ``__del__`` still runs once, when Python frees the model."""

    class SyncModel:
        def __init__(self, mid: str, log: list):
            self.mid, self.log = mid, log

        def __del__(self):
            self.log.append(f"del {self.mid}")

    class AsyncModel(SyncModel):
        async def __del__(self):
            await asyncio.sleep(0.05)
            self.log.append(f"async del {self.mid}")

    @serve.deployment(ray_actor_options={"num_cpus": 0.1})
    class Mux:
        def __init__(self):
            self.log: list[str] = []

        @serve.multiplexed(max_num_models_per_replica=1)
        async def get_model(self, model_id: str):
            self.log.append(f"load {model_id}")
            return (AsyncModel if model_id.startswith("a") else SyncModel)(model_id, self.log)

        async def __call__(self) -> str:
            return (await self.get_model(serve.get_multiplexed_model_id())).mid

        def events(self) -> list[str]:
            return list(self.log)

    handle = serve.run(Mux.bind(), name="mux_del", route_prefix=None)
    for m in ["a1", "a2", "s1", "s2"]:
        assert handle.options(multiplexed_model_id=m).remote().result(timeout_s=30) == m
    assert handle.events.remote().result(timeout_s=30) == [
        "load a1", "async del a1", "load a2", "async del a2", "load s1", "del s1", "load s2"]
    serve.delete("mux_del")
