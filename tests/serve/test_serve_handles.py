"""Handles and composition: bound deployments arrive as handles, responses chain, streams flow,
``@serve.batch`` groups calls, ``user_config`` reaches ``reconfigure``."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import signal
import subprocess
import sys
import time
import types
import warnings
from typing import Any

import numpy as np
import pytest
from _shared import check_in_fork, output_with
from serve_helpers import alive, wait_until
from starlette.requests import Request
from starlette.responses import StreamingResponse

import muster
import muster.train as train
from muster import serve
from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.serve.config import ProxyLocation
from muster.train import RunConfig, ScalingConfig
from muster.train.torch import TorchTrainer

pytestmark = pytest.mark.allow_leftover_workers

SMALL = {"num_cpus": 0.1}


@serve.deployment(ray_actor_options=SMALL, max_ongoing_requests=32)
class Model:
    def __init__(self, scale: int):
        self.scale = scale

    def predict(self, x: int) -> int:
        return x * self.scale

    async def tokens(self, n: int):
        for i in range(n):
            await asyncio.sleep(0.01)
            yield f"tok{i}"

    @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.2)
    async def batched(self, xs: list[int]) -> list[tuple[int, int]]:
        return [(x * self.scale, len(xs)) for x in xs]


@serve.deployment(ray_actor_options=SMALL, max_ongoing_requests=32)
class Adder:
    def add(self, x: int, y: int) -> int:
        return x + y

    async def slow(self, s: float) -> str:
        await asyncio.sleep(s)
        return "finished"


@serve.deployment(ray_actor_options=SMALL)
class Ingress:
    def __init__(self, model, adder):
        self.model, self.adder = model, adder

    async def __call__(self, request: Request):
        x = int(request.query_params["x"])
        if request.url.path.endswith("/stream"):
            gen = self.model.options(stream=True).tokens.remote(x)

            async def body():
                async for t in gen:
                    yield t + "\n"

            return StreamingResponse(body(), media_type="text/plain")
        doubled = self.model.predict.remote(x)
        total = await self.adder.add.remote(doubled, 1)  # a response passed as an argument is awaited first
        return {"result": total}


@serve.deployment(ray_actor_options=SMALL, user_config={"threshold": 1})
class Configured:
    def __init__(self):
        self.threshold = None

    def reconfigure(self, config: dict) -> None:
        self.threshold = config["threshold"]
        self.calls = getattr(self, "calls", 0) + 1

    def get(self) -> int:
        return self.threshold

    def state(self) -> tuple[int, int]:
        return os.getpid(), self.calls


# a wait of 10 s: the test's 8 calls fill the batch of 8, so it costs nothing, and calls that a loaded box sends
# more than 0.2 s apart (the decorator's wait) still make one batch: the test's "more than 4" failed then
@serve.deployment(ray_actor_options=SMALL, max_ongoing_requests=16,
                  user_config={"max_batch_size": 8, "batch_wait_timeout_s": 10})
class NumpyBatch:
    """Ray's "Dynamic Request Batching" sample: returns an ndarray; reconfigure resizes the batch."""

    @serve.batch(max_batch_size=4, batch_wait_timeout_s=0.2)
    async def __call__(self, xs: list[int]) -> np.ndarray:
        return np.array([[x * 2, len(xs)] for x in xs])

    def reconfigure(self, config: dict) -> None:
        self.__call__.set_max_batch_size(config["max_batch_size"])
        self.__call__.set_batch_wait_timeout_s(config.get("batch_wait_timeout_s", 0.2))


@serve.deployment(ray_actor_options=SMALL, max_ongoing_requests=32)
class Batches:
    """Ray's other @serve.batch forms: several arguments, an async generator, batch_size_fn."""

    @serve.batch(max_batch_size=4, batch_wait_timeout_s=0.3)
    async def pairs(self, xs: list[int], ys: list[int], scale: list[int]) -> list[tuple[int, int]]:
        return [((x + y) * s, len(xs)) for x, y, s in zip(xs, ys, scale)]

    @serve.batch(max_batch_size=4, batch_wait_timeout_s=0.3)
    async def steps(self, xs: list[int]):
        for step in range(3):
            yield [StopIteration if x == 0 and step == 1 else f"{x}-{step}" for x in xs]

    @serve.batch(max_batch_size=6, batch_wait_timeout_s=0.3, batch_size_fn=lambda words: sum(map(len, words)))
    async def by_letters(self, words: list[str]) -> list[int]:
        return [len(words)] * len(words)


@serve.deployment(ray_actor_options=SMALL)
class Logs:
    def __call__(self, word: str) -> str:
        logging.getLogger("muster.serve").info("serve-logger says %s", word)  # Ray: "ray.serve"
        logging.getLogger("muster.serve.mine").info("child-logger says %s", word)
        logging.getLogger("ray.serve").info("ray-logger says %s", word)  # Ray's name, kept by a port
        return word


@serve.deployment(ray_actor_options=SMALL)
class LevelLogs:
    def __call__(self, word: str) -> str:
        log = logging.getLogger("ray.serve")
        log.debug("debug says %s", word)
        log.info("info says %s", word)
        log.warning("warning says %s", word)  # the last line: once it is seen, the others were let through or not
        return word


@serve.deployment(ray_actor_options=SMALL, max_ongoing_requests=2)
class Starved:
    """Batches of up to 4, but the replica takes 2 calls at once: Ray warns that they never fill."""

    @serve.batch(max_batch_size=4, batch_wait_timeout_s=0.2)
    async def __call__(self, xs: list[int]) -> list[int]:
        return [len(xs)] * len(xs)


@serve.deployment(ray_actor_options=SMALL)
class Finder:
    """Looks up other apps by name from its methods, as Ray's multi-app guide does in ``async __call__``."""

    async def find(self) -> tuple[str, int]:
        app = serve.get_app_handle("graph")  # on the Serve loop: it raised "a blocking Serve call" before
        return app.deployment_name, await serve.get_deployment_handle("Adder", "graph").add.remote(1, 2)

    def find_in_a_thread(self) -> tuple[str, int]:
        app = serve.get_app_handle("graph")
        return app.deployment_name, serve.get_deployment_handle("Adder", "graph").add.remote(3, 4).result()


@serve.deployment(ray_actor_options=SMALL)
class Raises:
    def __call__(self, key: str) -> None:
        raise KeyError(f"no {key}")


@serve.deployment(ray_actor_options=SMALL)
class PassesOn:
    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, key: str) -> None:
        return await self.inner.remote(key)


@muster.remote
def _plus_one(x):
    return x + 1


@pytest.fixture(scope="module")
def graph(client):
    handle = serve.run(Ingress.bind(Model.bind(3), Adder.bind()), name="graph", route_prefix="/graph")
    return handle


def test_composition_over_http_and_handles(client, graph):
    assert client.get("/graph", params={"x": 5}).json() == {"result": 16}
    h = serve.get_deployment_handle("Model", "graph")
    assert h.predict.remote(7).result(timeout_s=10) == 21
    chained = serve.get_deployment_handle("Adder", "graph").add.remote(h.predict.remote(2), 10)
    assert chained.result(timeout_s=10) == 16
    # Ray's DeploymentResponse -> ObjectRef, handed to a task (before: no such attribute)
    ref = h.predict.remote(4)._to_object_ref_sync()
    assert muster.get(ref, timeout=10) == 12 and muster.get(_plus_one.remote(ref), timeout=10) == 13
    failed = h.predict.remote("x")._to_object_ref_sync()  # "x" * 3 works; a missing method raises
    assert muster.get(failed, timeout=10) == "xxx"
    with pytest.raises(Exception, match="no_such"):
        muster.get(h.no_such.remote()._to_object_ref_sync(), timeout=10)
    # a top-level ObjectRef argument arrives as its value, as in Ray (the callee got the ref); nested ones stay refs
    assert serve.get_deployment_handle("Adder", "graph").add.remote(muster.put(5), y=ref).result(timeout_s=10) == 17
    # Ray's older docs write ray.get(handle.remote()); Ray 2.60 refuses it too, and the message said to call
    # .remote(), which the code had just done
    with pytest.raises(TypeError, match=r"got DeploymentResponse; take its value with response.result\(\)"):
        muster.get(h.predict.remote(1))


def test_a_replica_finds_apps_and_deployments_by_name_from_async_and_sync_methods(graph):
    h = serve.run(Finder.bind(), name="finder", route_prefix=None)
    try:
        assert h.find.remote().result(timeout_s=30) == ("Ingress", 3)
        assert h.find_in_a_thread.remote().result(timeout_s=30) == ("Ingress", 7)
    finally:
        serve.delete("finder")


def test_a_replicas_error_reaches_the_caller_as_rays_task_error_of_it(client):
    """Ray raises RayTaskError(KeyError): ``except KeyError`` and ``except RayTaskError`` both catch it. muster
    re-raised the bare KeyError, so a ported ``except RayTaskError`` missed it. Through a replica that passes
    the error on, it is still the first replica's."""
    h = serve.run(PassesOn.bind(Raises.bind()), name="raises", route_prefix="/raises")
    try:
        for handle in (serve.get_deployment_handle("Raises", "raises"), h):
            with pytest.raises(KeyError) as info:
                handle.remote("k").result(timeout_s=30)
            err = info.value
            assert isinstance(err, muster.exceptions.RayTaskError) and isinstance(err.cause, KeyError)
            assert str(err).startswith("KeyError: 'no k'\n") and "Raised in deployment 'Raises'" in str(err)
            if handle is h:  # passed on: both replicas named, the first one's traceback in the second's
                assert "Raised in deployment 'PassesOn'" in str(err) and "in __call__" in err.traceback_str
                continue
            frames = [ln for ln in err.traceback_str.splitlines() if ln.startswith("  File ")]
            assert len(frames) == 1 and frames[0].endswith("in __call__"), err.traceback_str  # the user's only
        r = client.get("/raises")  # over HTTP, the passed-on error names its own type and message
        assert r.status_code == 500 and "deployment 'PassesOn'" in r.text and "raised KeyError: 'no " in r.text
    finally:
        serve.delete("raises")


def test_a_missing_method_raises_rays_error_naming_the_methods_there_are(client, graph):
    """Ray raises RayServeException listing the class's methods (muster raised a bare AttributeError); a likely
    typo's match comes first."""
    h = serve.get_deployment_handle("Model", "graph")
    with pytest.raises(serve.RayServeException, match=r"no method 'no_such'; its methods are \['batched', "
                                                      r"'predict', 'tokens'\]. Fix: call one of them"):
        h.no_such.remote().result(timeout_s=10)
    with pytest.raises(serve.RayServeException, match=r"no method 'predcit'; did you mean 'predict'\? its methods "
                                                      r"are \['predict', 'batched', 'tokens'\]"):
        h.predcit.remote(1).result(timeout_s=10)
    with pytest.raises(serve.RayServeException, match=r"no method '__call__'.*Fix: define __call__"):
        h.remote().result(timeout_s=10)
    fn = serve.run(echo_fn.bind(), name="echo-fn", route_prefix=None)
    assert fn.anything.remote(3).result(timeout_s=10) == ["fn", 3]  # as Ray's: a function runs for any method
    serve.delete("echo-fn")


def test_result_refuses_a_negative_or_non_number_timeout_as_rays_broadcast_does(graph):
    """Ray's broadcast ``results()`` refuses ``timeout_s < 0``; its ``result()`` timed out at once or waited
    forever (muster's timed out, or returned a finished call's value); a string failed deep in threading, and
    ``float("inf")`` overflowed."""
    h = serve.get_deployment_handle("Adder", "graph")
    response = h.add.remote(1, 2)
    with pytest.raises(InvalidArgumentError, match=r"DeploymentResponse.result\(timeout_s=-1\): use a number of "
                                                   r"seconds >= 0 \(0: do not wait\), or None"):
        response.result(timeout_s=-1)
    with pytest.raises(InvalidTypeError, match=r"DeploymentResponse.result\(timeout_s='5'\)"):
        response.result(timeout_s="5")
    assert response.result(timeout_s=float("inf")) == 3 and response.result(timeout_s=np.int64(0)) == 3
    with pytest.raises(InvalidArgumentError, match=r"DeploymentBroadcastResponse.results\(timeout_s=-0.5\)"):
        h.broadcast("add", 1, 2).results(timeout_s=-0.5)


@serve.deployment(ray_actor_options=SMALL)
def echo_fn(x):
    return ["fn", x]


def test_status_compares_equal_to_rays_status_enums(client, graph):
    """Ray's wait loops compare with ray.serve.schema's enums (an UnsupportedRayImportError before)."""
    from muster.serve.schema import ApplicationStatus, DeploymentStatus, ProxyStatus

    st = serve.status()
    assert st.applications["graph"].status == ApplicationStatus.RUNNING
    assert st.applications["graph"].deployments["Model"].status == DeploymentStatus.HEALTHY
    assert st.proxies and all(p == ProxyStatus.HEALTHY for p in st.proxies.values())
    assert ApplicationStatus("DEPLOY_FAILED") is ApplicationStatus.DEPLOY_FAILED


def test_streaming_through_a_handle(client, graph):
    h = serve.get_deployment_handle("Model", "graph").options(stream=True)
    assert list(h.tokens.remote(4)) == ["tok0", "tok1", "tok2", "tok3"]

    async def consume() -> list[str]:
        return [t async for t in h.tokens.remote(3)]

    assert asyncio.run(consume()) == ["tok0", "tok1", "tok2"]
    with client.stream("GET", "/graph/stream", params={"x": 5}) as r:
        lines = [line for line in r.iter_lines() if line]
    assert lines == [f"tok{i}" for i in range(5)]
    with pytest.raises(TypeError, match="not a generator"):
        list(h.predict.remote(1))


def test_batch_groups_concurrent_calls(graph):
    h = serve.get_deployment_handle("Model", "graph")
    responses = [h.batched.remote(i) for i in range(8)]
    results = [r.result(timeout_s=10) for r in responses]
    assert [v for v, _ in results] == [i * 3 for i in range(8)]
    assert max(size for _, size in results) > 1  # calls were grouped
    assert all(size <= 8 for _, size in results)


def test_batch_of_several_arguments_of_a_generator_and_by_a_size_function(client):
    """Each was refused or broken: a second argument was dropped, keywords raised, an async generator
    was refused, batch_size_fn was unknown, max_concurrent_batches=0 hung every call."""
    h = serve.run(Batches.bind(), name="batches", route_prefix=None)
    try:
        got = [r.result(timeout_s=30) for r in [h.pairs.remote(i, 1, scale=10) for i in range(4)]]
        assert [v for v, _ in got] == [10, 20, 30, 40] and max(n for _, n in got) > 1  # batched together
        streams = [h.options(stream=True).steps.remote(x) for x in range(3)]
        assert [list(s) for s in streams] == [["0-0"], ["1-0", "1-1", "1-2"], ["2-0", "2-1", "2-2"]]
        sizes = [r.result(timeout_s=30) for r in [h.by_letters.remote("abc") for _ in range(4)]]
        assert max(sizes) == 2  # 3 letters each: two fill the 6 that batch_size_fn counts
    finally:
        serve.delete("batches")
    with pytest.raises(ValueError, match="max_concurrent_batches=0"):
        serve.batch(max_concurrent_batches=0)


def test_batch_returning_an_ndarray_and_resized_by_reconfigure(client):
    def sizes(h) -> set[int]:
        rows = [r.result(timeout_s=10).tolist() for r in [h.remote(i) for i in range(8)]]
        assert [v for v, _ in rows] == [i * 2 for i in range(8)]
        return {n for _, n in rows}

    h = serve.run(NumpyBatch.bind(), name="npbatch", route_prefix=None)
    assert max(sizes(h)) > 4  # user_config's 8 replaced the decorator's 4
    h = serve.run(NumpyBatch.options(user_config={"max_batch_size": 2}).bind(), name="npbatch", route_prefix=None)
    assert max(sizes(h)) <= 2
    serve.delete("npbatch")


def test_batches_bigger_than_max_ongoing_requests_are_warned_of_as_rays(client, capfd):
    h = serve.run(Starved.bind(), name="starved", route_prefix=None)
    assert max(r.result(timeout_s=10) for r in [h.remote(i) for i in range(6)]) <= 2
    text = "".join(output_with(capfd, "max_ongoing_requests (2), so a batch never holds more than 2"))
    assert "Fix: set @serve.deployment(max_ongoing_requests=4)" in text
    assert text.count("so a batch never holds") == 1  # once, not per batch
    serve.delete("starved")


def test_info_from_the_serve_logger_reaches_the_replica_output(client, capfd):
    h = serve.run(Logs.bind(), name="logs", route_prefix=None)
    assert h.remote("kiwi").result(timeout_s=10) == "kiwi"
    # the runtime relays worker output to the driver's stdout
    text = "".join(output_with(capfd, *(f"{who}-logger says kiwi" for who in ("serve", "child", "ray"))))
    line = next(x for x in text.splitlines() if "serve-logger says kiwi" in x)
    assert "INFO" in line and "Logs" in line
    serve.delete("logs")


def test_a_logging_config_sets_the_replicas_log_level(client, capfd):
    """Ray's LoggingConfig(log_level=...), per deployment or as serve.run's default for an app: it was accepted
    with a warning that it did nothing (every replica logged INFO and up), and schema.LoggingConfig did not import."""
    from muster.serve.schema import LoggingConfig

    debug = serve.run(LevelLogs.options(logging_config=LoggingConfig(log_level="DEBUG")).bind(), name="debug",
                      route_prefix=None, logging_config={"log_level": "ERROR"})  # the deployment's own wins
    quiet = serve.run(LevelLogs.bind(), name="quiet", route_prefix=None, logging_config={"log_level": "WARNING"})
    assert (debug.remote("fig").result(timeout_s=10), quiet.remote("lime").result(timeout_s=10)) == ("fig", "lime")
    text = "".join(output_with(capfd, "warning says fig", "warning says lime"))
    assert "debug says fig" in text and "info says fig" in text
    assert "debug says lime" not in text and "info says lime" not in text
    serve.delete("debug")
    serve.delete("quiet")
    with pytest.raises(ValueError, match=r"LoggingConfig\(log_level='LOUD'\): use one of"):
        LoggingConfig(log_level="LOUD")
    assert LoggingConfig(encoding="json", log_level=logging.DEBUG).log_level == "DEBUG"
    with pytest.warns(UserWarning, match=r"Serve already runs with an HTTP ingress; proxy_location='Disabled'"):
        serve.start(proxy_location="Disabled")  # Serve runs: it applies to a new start (test_serve_lifecycle)
    with pytest.warns(UserWarning, match=r"proxy_location='Disabled'"):
        serve.start(ProxyLocation.Disabled)  # Ray's enum, first positional as in Ray
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        serve.start(proxy_location=ProxyLocation.HeadOnly)  # what muster does
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        serve.start(proxy_location=ProxyLocation.EveryNode)  # Ray's default: on one node what muster does
    with pytest.warns(UserWarning, match=r"serve.start: logging_config sets the logs of Ray's controller"):
        serve.start(logging_config={"log_level": "DEBUG"})


def test_handle_calls_from_many_threads(graph):
    h = serve.get_deployment_handle("Adder", "graph")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        out = list(pool.map(lambda i: h.add.remote(i, i).result(timeout_s=10), range(64)))
    assert out == [2 * i for i in range(64)]


def test_a_handle_used_in_a_forked_child_opens_connections_of_its_own(graph):
    """A child forked after the parent used a handle (a DataLoader worker, a pool process) must not
    use the parent's connections: their loop does not run in the child, and the parent reads them."""
    h = serve.get_deployment_handle("Adder", "graph")
    assert h.add.remote(1, 1).result(timeout_s=10) == 2  # the parent's router holds a live connection

    def child_calls() -> bool:
        return [h.add.remote(i, 1).result(timeout_s=10) for i in range(20)] == [i + 1 for i in range(20)]

    assert check_in_fork(child_calls, timeout=30) == "passed"
    assert [h.add.remote(i, 2).result(timeout_s=10) for i in range(20)] == [i + 2 for i in range(20)]


def _deploy_configured(deployment: dict) -> None:
    """What ``muster serve deploy`` does for one app of a config file (``schema.deploy`` would also delete
    the module's other apps, as Ray's ``serve deploy`` does)."""
    from muster.serve import api

    api._run(Configured.options(**deployment).bind(), name="cfg", route_prefix=None,
             config={"name": "cfg", "deployments": [{"name": "Configured", **deployment}]})


def _configured_status() -> Any:
    return serve.status().applications["cfg"].deployments["Configured"]


def test_user_config_reaches_reconfigure_and_redeploy_updates_it(client):
    h = serve.run(Configured.bind(), name="cfg", route_prefix=None)
    assert h.get.remote().result(timeout_s=10) == 1
    pid, _ = h.state.remote().result(timeout_s=10)
    # as Ray's serve.run, which versions the code anew each time: its redeploy replaces the replicas
    h = serve.run(Configured.options(user_config={"threshold": 7}).bind(), name="cfg", route_prefix=None)
    assert h.get.remote().result(timeout_s=10) == 7
    new_pid, calls = h.state.remote().result(timeout_s=10)
    assert new_pid != pid and calls == 1
    assert _configured_status().status_trigger == "CONFIG_UPDATE_COMPLETED"
    # a config file's deploy makes Ray's lightweight updates: user_config alone keeps the replica
    _deploy_configured({"user_config": {"threshold": 7}})
    pid, calls = h.state.remote().result(timeout_s=10)
    _deploy_configured({"user_config": {"threshold": 8}})
    assert h.get.remote().result(timeout_s=10) == 8
    assert h.state.remote().result(timeout_s=10) == (pid, calls + 1)  # reconfigured in place, as Ray: same replica
    _deploy_configured({"user_config": {"threshold": 8}})
    assert h.state.remote().result(timeout_s=10) == (pid, calls + 1)  # unchanged: left alone
    # a new replica count keeps the live replica and adds one (then drains it)
    _deploy_configured({"user_config": {"threshold": 8}, "num_replicas": 2})
    assert _configured_status().replica_states == {"RUNNING": 2}
    pids = {h.state.remote().result(timeout_s=10)[0] for _ in range(20)}
    assert pid in pids and len(pids) == 2
    _deploy_configured({"user_config": {"threshold": 8}, "num_replicas": 1})
    wait_until(lambda: _configured_status().replica_states == {"RUNNING": 1}, what="drained to one replica")
    _deploy_configured({"user_config": {"threshold": 9}, "max_ongoing_requests": 3})
    assert h.get.remote().result(timeout_s=10) == 9
    assert h.state.remote().result(timeout_s=10)[0] != pid  # another option changed: replicas replaced
    serve.delete("cfg")


@serve.deployment(ray_actor_options=SMALL, user_config={"ok": True})
class Picky:
    def reconfigure(self, config: dict) -> None:
        if not config["ok"]:
            raise ValueError(f"refusing user_config {config}")

    def pid(self) -> int:
        return os.getpid()


def test_a_redeploy_whose_reconfigure_raises_fails_as_rays(client):
    """It raised a plain RayServeException (Ray's: RuntimeError) and the app stayed RUNNING; Ray marks it
    DEPLOY_FAILED. The previous version keeps serving."""
    h = serve.run(Picky.bind(), name="picky", route_prefix=None)
    pid = h.pid.remote().result(timeout_s=10)
    with pytest.raises(RuntimeError) as info:
        serve.run(Picky.options(user_config={"ok": False}).bind(), name="picky", route_prefix=None)
    assert isinstance(info.value, serve.RayServeException)
    assert "'Picky'" in str(info.value) and "ValueError: refusing user_config {'ok': False}" in str(info.value)
    app = serve.status().applications["picky"]
    dep = app.deployments["Picky"]
    assert (app.status, dep.status, dep.status_trigger) == ("DEPLOY_FAILED", "DEPLOY_FAILED", "REPLICA_STARTUP_FAILED")
    assert "refusing user_config" in app.message and "refusing user_config" in dep.message
    assert dep.replica_states == {"RUNNING": 1} and h.pid.remote().result(timeout_s=10) == pid  # still serving
    serve.run(Picky.bind(), name="picky", route_prefix=None)  # a deploy that succeeds clears it
    app = serve.status().applications["picky"]
    assert (app.status, app.deployments["Picky"].status_trigger) == ("RUNNING", "CONFIG_UPDATE_COMPLETED")
    serve.delete("picky")


def test_a_first_deploy_whose_reconfigure_raises_fails_as_rays(client):
    with pytest.raises(RuntimeError, match="'Picky'.*ValueError: refusing user_config"):
        serve.run(Picky.options(user_config={"ok": False}).bind(), name="picky1", route_prefix=None)
    app = serve.status().applications["picky1"]
    dep = app.deployments["Picky"]
    assert (app.status, dep.status, dep.status_trigger) == ("DEPLOY_FAILED", "DEPLOY_FAILED", "REPLICA_STARTUP_FAILED")
    serve.delete("picky1")


def test_a_cancelled_call_raises_request_cancelled_as_rays(graph):
    """It raised concurrent.futures.CancelledError; Ray's is RequestCancelledError, a TaskCancelledError."""
    h = serve.get_deployment_handle("Adder", "graph")
    r = h.slow.remote(30)
    time.sleep(0.3)  # it reached the replica
    r.cancel()
    with pytest.raises(serve.exceptions.RequestCancelledError) as info:
        r.result(timeout_s=10)
    assert isinstance(info.value, muster.exceptions.TaskCancelledError)

    async def cancelled_then_awaited():
        r = h.slow.remote(30)
        r.cancel()
        with pytest.raises(serve.exceptions.RequestCancelledError):
            await r

    asyncio.run(cancelled_then_awaited())
    assert h.slow.remote(0).result(timeout_s=10) == "finished"


def test_a_result_past_its_timeout_raises_rays_get_timeout_error(graph):
    """As Ray 2.60 (measured): ``except ray.exceptions.GetTimeoutError`` catches a ``result(timeout_s=)`` that ran
    out, and so does ``except TimeoutError``. It raised a plain TimeoutError, which the first let through."""
    r = serve.get_deployment_handle("Adder", "graph").slow.remote(3)
    with pytest.raises(muster.exceptions.GetTimeoutError, match=r"timeout_s=0.2") as info:
        r.result(timeout_s=0.2)
    assert isinstance(info.value, TimeoutError)
    assert r.result(timeout_s=10) == "finished"  # the call goes on; a later wait gets its value


def test_replica_context_and_result_timeout(graph):
    h = serve.get_deployment_handle("Model", "graph").options(stream=True)
    gen = h.tokens.remote(200)
    assert next(iter(gen)) == "tok0"
    gen.cancel()
    with pytest.raises(serve.RayServeException, match="only works inside"):
        serve.get_replica_context()
    assert os.getpid()  # the driver is not a replica


def test_handles_to_what_is_not_running_fail_at_once(client):
    """Ray's lookups raise for a deployment that does not exist; a handle whose app was deleted
    fails its calls at once (both waited until the call's timeout, or for ever without one)."""
    with pytest.raises(KeyError, match="'Nope' does not exist in app 'graph'.*'Adder'"):
        serve.get_deployment_handle("Nope", app_name="graph")
    with pytest.raises(serve.RayServeException, match=r"needs the app's name: get_deployment_handle\('Adder'"):
        serve.get_deployment_handle("Adder")
    handle = serve.run(Where.bind(), name="short-lived", route_prefix=None)
    assert handle.pid.remote().result(timeout_s=10) > 0
    serve.delete("short-lived")
    t0 = time.monotonic()
    with pytest.raises(serve.exceptions.DeploymentUnavailableError, match="'Where' of app 'short-lived' is not"):
        handle.pid.remote().result()
    assert time.monotonic() - t0 < 5
    with pytest.raises(KeyError, match="app 'short-lived' is not running here"):
        serve.get_deployment_handle("Where", app_name="short-lived")


@serve.deployment(ray_actor_options=SMALL)
class Where:
    def pid(self) -> int:
        return os.getpid()


@muster.remote(num_cpus=0)
def pids_through(handle, n: int) -> list[int]:
    return [handle.pid.remote().result(timeout_s=10) for _ in range(n)]


@muster.remote(num_cpus=0)
def pid_by_name() -> int:
    return serve.get_deployment_handle("Where", "elsewhere").pid.remote().result(timeout_s=10)


@muster.remote(num_cpus=0)
class Caller:
    def __init__(self, handle):
        self.handle = handle

    def pid(self) -> int:
        return self.handle.pid.remote().result(timeout_s=10)


def loop_calls_serve(config):
    train.report({"pid": serve.get_deployment_handle("Where", "elsewhere").pid.remote().result(timeout_s=10)})


def test_handles_work_in_tasks_actors_and_training_loops_and_follow_a_replacement(tmp_path):
    """Serve pushes route tables to its ingress and replicas only; any other worker asks the
    driver for the table (before, a handle passed to a task timed out, and a lookup by name said
    no app was running)."""
    handle = serve.run(Where.bind(), name="elsewhere", route_prefix=None)
    first = handle.pid.remote().result(timeout_s=10)
    assert muster.get(pids_through.remote(handle, 3), timeout=60) == [first] * 3
    assert muster.get(pid_by_name.remote(), timeout=60) == first
    result = TorchTrainer(loop_calls_serve, scaling_config=ScalingConfig(num_workers=1),
                          run_config=RunConfig(storage_path=str(tmp_path), verbose=0)).fit()
    assert result.metrics["pid"] == first
    caller = Caller.remote(handle)
    assert muster.get(caller.pid.remote(), timeout=60) == first  # the actor now holds the old route
    os.kill(first, signal.SIGKILL)

    def replaced() -> bool:
        d = serve.status().applications["elsewhere"].deployments["Where"]
        return d.replica_states.get("RUNNING", 0) == 1 and d.restarts >= 1

    wait_until(replaced, 60, "the killed replica's replacement")
    second = handle.pid.remote().result(timeout_s=10)
    assert second != first
    assert muster.get(caller.pid.remote(), timeout=60) == second  # it pulled the new table
    muster.kill(caller)
    serve.delete("elsewhere")
    with pytest.raises(muster.exceptions.TaskError, match="not running"):
        muster.get(pid_by_name.remote(), timeout=60)


@muster.remote
def doubled(x: int) -> int:
    return 2 * x


@muster.remote
class Counter:
    def __init__(self):
        self.n = 0

    def add(self, x: int) -> int:
        self.n += x
        return self.n

    def pid(self) -> int:
        return os.getpid()


@serve.deployment(ray_actor_options=SMALL)
class UsesCore:
    def __init__(self):
        self.counter = Counter.remote()

    async def __call__(self, x: int) -> list:
        task, call = doubled.remote(x), self.counter.add.remote(x)  # both ObjectRefs, awaitable as in Ray
        return [await task, await call, muster.get(self.counter.pid.remote(), timeout=30)]


def test_a_replica_runs_tasks_and_actors_and_its_actors_die_with_it():
    """Before, ``.remote()`` in a replica returned None and never ran: nothing on the driver served its requests."""
    handle = serve.run(UsesCore.bind(), name="core", route_prefix=None)
    assert handle.remote(3).result(timeout_s=30)[:2] == [6, 3]
    total, _, pid = handle.remote(4).result(timeout_s=30)
    assert total == 8
    serve.delete("core")
    wait_until(lambda: not alive(pid), 30, "the replica's actor to die with it")


@serve.deployment(ray_actor_options=SMALL)
class Field:
    def __call__(self, obj: Any) -> Any:
        return obj.x

    async def awaited(self, refs: list) -> list:
        return [await ref for ref in refs]

    def items(self):
        yield 1


def test_an_argument_the_replica_cannot_unpickle_fails_the_call_naming_why(tmp_path, monkeypatch):
    """Before, the replica only logged the error and ``.result()`` waited for ever."""
    handle = serve.run(Field.bind(), name="field", route_prefix=None)
    (tmp_path / "driver_only_types.py").write_text("class Point:\n    def __init__(self, x):\n        self.x = x\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # on the driver's path only: the replica started before
    import driver_only_types

    with pytest.raises(muster.exceptions.MusterError, match="could not read the call's arguments.*driver_only_types"):
        handle.remote(driver_only_types.Point(1)).result(timeout_s=30)
    serve.delete("field")


SCRIPT = """
from muster import serve

@serve.deployment(ray_actor_options={"num_cpus": 0.1})
def field(obj):
    return obj.x

handle = serve.run(field.bind(), route_prefix=None)

class DefinedLater:  # after the replica started: it exists in the driver's __main__ only
    def __init__(self, x):
        self.x = x

print("got", handle.remote(DefinedLater(7)).result(timeout_s=30))
serve.shutdown()
"""


def test_a_class_the_script_defines_after_serve_run_travels_by_value(tmp_path):
    script = tmp_path / "late_class.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "got 7" in done.stdout


@serve.deployment(ray_actor_options=SMALL)
class AsyncBuilt:
    async def __init__(self, greeting: str):  # awaited on the replica's loop, as in Ray
        await asyncio.sleep(0)
        self.greeting = greeting
        self.loop = asyncio.get_running_loop()

    async def __call__(self) -> str:
        return f"{self.greeting} {self.loop is asyncio.get_running_loop()}"


def test_a_replicas_constructor_runs_on_its_loop_and_may_be_async():
    """Before, an ``async def __init__`` failed the replica's start, and so did ``get_running_loop()``."""
    handle = serve.run(AsyncBuilt.bind("hello"), name="built", route_prefix=None)
    assert handle.remote().result(timeout_s=30) == "hello True"
    serve.delete("built")


def test_a_response_nested_in_an_argument_or_a_stream_is_refused_naming_the_fix():
    """Only top-level responses are resolved, as in Ray; a nested one said "cannot pickle '_asyncio.Future'"."""
    handle = serve.run(Field.bind(), name="nested", route_prefix=None)
    inner = handle.remote(types.SimpleNamespace(x=1))
    with pytest.raises(serve.RayServeException, match="only a top-level argument of a handle call is passed on"):
        handle.remote([inner]).result(timeout_s=30)
    assert inner.result(timeout_s=30) == 1
    # Ray's way to pass one by reference, which the message names: an ObjectRef, awaited by the callee
    assert handle.awaited.remote([inner._to_object_ref_sync()]).result(timeout_s=30) == [1]
    stream = handle.items.options(stream=True).remote()
    with pytest.raises(serve.RayServeException, match="cannot be passed to another handle call.*iterate it"):
        handle.remote(stream).result(timeout_s=30)  # it named a fix that fails the same way (an argument of its own)
    serve.delete("nested")


@serve.deployment(num_replicas=2, ray_actor_options=SMALL)
class Ranked:
    def __call__(self) -> tuple:
        context = serve.get_replica_context()
        return context.rank.rank, context.world_size, os.getpid()


def test_replicas_have_ranks_and_a_replacement_takes_the_rank_it_replaces():
    """Ray's ReplicaContext.rank and world_size (they were missing)."""
    handle = serve.run(Ranked.bind(), name="ranked", route_prefix=None)

    def seen() -> dict:
        out: dict = {}
        for _ in range(40):
            rank, world, pid = handle.remote().result(timeout_s=30)
            out[rank] = (world, pid)
            if len(out) == 2:
                break
        return out

    first = seen()
    assert sorted(first) == [0, 1] and {w for w, _ in first.values()} == {2}
    os.kill(first[1][1], signal.SIGKILL)
    wait_until(lambda: serve.status().applications["ranked"].deployments["Ranked"].restarts >= 1, 60, "a replacement")
    wait_until(lambda: serve.status().applications["ranked"].deployments["Ranked"].replica_states.get("RUNNING") == 2,
               60, "two running replicas")
    again = seen()
    assert sorted(again) == [0, 1] and again[0][1] == first[0][1] and again[1][1] != first[1][1]
    serve.delete("ranked")


@serve.deployment(ray_actor_options=SMALL, max_ongoing_requests=16)
class Models:
    """Ray's multiplexing: a loader whose 2 last-used models each replica keeps."""

    def __init__(self):
        self.loads: list[str] = []

    @serve.multiplexed(max_num_models_per_replica=2)
    async def get_model(self, model_id: str):
        self.loads.append(model_id)
        await asyncio.sleep(0.05)
        if model_id == "broken":
            raise KeyError(model_id)
        return f"model {model_id}"

    async def __call__(self, *args) -> tuple:
        model = await self.get_model(serve.get_multiplexed_model_id())
        return model, list(self.loads)


def test_multiplexed_models_load_once_and_the_least_recently_used_goes(client):
    """They were refused; the handle option and the HTTP header both name the model."""
    handle = serve.run(Models.bind(), name="models", route_prefix="/models")

    def call(model_id: str) -> tuple:
        return handle.options(multiplexed_model_id=model_id).remote().result(timeout_s=30)

    assert call("a") == ("model a", ["a"])
    assert call("b")[1] == ["a", "b"]
    assert call("a")[1] == ["a", "b"]  # kept
    assert call("c")[1] == ["a", "b", "c"]  # b, the least recently used, goes
    assert call("a")[1] == ["a", "b", "c"]
    assert call("b")[1] == ["a", "b", "c", "b"]  # loaded again
    together = [handle.options(multiplexed_model_id="z").remote() for _ in range(4)]
    assert [r.result(timeout_s=30)[1].count("z") for r in together] == [1, 1, 1, 1]  # one load, shared
    with pytest.raises(KeyError):
        call("broken")
    with pytest.raises(KeyError):
        call("broken")  # a failed load is not kept: it is tried again
    r = client.get("/models", headers={"serve_multiplexed_model_id": "h"})
    assert r.json()[0] == "model h"
    serve.delete("models")


def test_multiplexed_refuses_what_is_not_an_async_loader():
    with pytest.raises(TypeError, match="decorate `async def get_model"):
        serve.multiplexed(lambda self, model_id: None)
    with pytest.raises(ValueError, match="max_num_models_per_replica=0"):
        serve.multiplexed(max_num_models_per_replica=0)


@serve.deployment(num_replicas=3, ray_actor_options=SMALL)
class Cached:
    def __init__(self):
        self.cache = {"k": 1}

    def reset(self, value: int) -> tuple[int, int]:
        self.cache = {"k": value}
        return os.getpid(), value

    def get(self) -> int:
        return self.cache["k"]

    def fail(self) -> None:
        raise KeyError("nothing cached")


def test_broadcast_calls_every_replica(client):
    """Ray 2.60's ``handle.broadcast(method, *args)``: one call on each running replica (a TypeError before:
    ``handle.broadcast`` was taken for a handle to a method named "broadcast")."""
    handle = serve.run(Cached.bind(), name="cached", route_prefix=None)
    answers = handle.broadcast("reset", 7).results(timeout_s=30)
    assert len(answers) == 3 and len({pid for pid, _ in answers}) == 3 and {v for _, v in answers} == {7}
    assert {handle.get.remote().result(timeout_s=10) for _ in range(12)} == {7}  # every replica was reset
    with pytest.raises(KeyError, match="nothing cached"):
        handle.broadcast("fail").results(timeout_s=30)
    errors = handle.broadcast("fail").results(timeout_s=30, return_exceptions=True)
    assert len(errors) == 3 and all(isinstance(e, KeyError) for e in errors)

    async def in_async_code() -> list:
        return await handle.broadcast("reset", 8).results_async(timeout_s=30)

    assert sorted(v for _, v in asyncio.run(in_async_code())) == [8, 8, 8]
    serve.delete("cached")


def test_a_handle_is_initialized_by_its_first_use_and_shutdown_is_rays(graph):
    """Ray's ``is_initialized``, ``running_replicas_populated()``, ``shutdown()``/``shutdown_async()``, ``handle_id``
    and ``deployment_id`` (``handle.shutdown`` was taken for a handle to a method named "shutdown" before)."""
    import pickle

    h = serve.get_deployment_handle("Adder", "graph")
    assert not h.is_initialized and not h.running_replicas_populated()
    assert h.deployment_id == serve.context.DeploymentID("Adder", "graph")
    add = h.add  # options() initializes the handle it is called on; the handles it makes share that, and the id
    assert h.is_initialized and add.is_initialized and add.handle_id == h.handle_id
    wait_until(h.running_replicas_populated, 10, "the router to learn of Adder's replicas")
    assert h.shutdown() is None and asyncio.run(h.shutdown_async()) is None
    assert add.remote(1, 2).result(timeout_s=10) == 3  # as Ray's, a handle still routes after shutdown
    sent = pickle.loads(pickle.dumps(h))  # a copy in another process starts afresh, as Ray's
    assert not sent.is_initialized and sent.handle_id != h.handle_id
    fresh = serve.get_deployment_handle("Model", "graph")
    fresh.broadcast("predict", 1).results(timeout_s=10)
    assert fresh.is_initialized


@serve.deployment(ray_actor_options=SMALL, num_replicas=2)
class Versioned:
    def __init__(self, tag: str):
        self.tag = tag

    def __call__(self) -> tuple:
        ctx = serve.get_replica_context()
        return os.getpid(), ctx.code_version, ctx.gang_context


def test_replica_context_has_rays_code_version_shared_by_the_replicas_of_one_deploy(client):
    """Ray's ``ReplicaContext.code_version`` and ``gang_context`` were missing."""
    handle = serve.run(Versioned.bind("a"), name="versioned", route_prefix=None)
    seen = {handle.remote().result(timeout_s=10) for _ in range(16)}
    assert len({pid for pid, _, _ in seen}) == 2, seen
    (version,) = {v for _, v, _ in seen}
    assert isinstance(version, str) and version and {g for _, _, g in seen} == {None}
    handle = serve.run(Versioned.bind("b"), name="versioned", route_prefix=None)  # replaces the replicas
    new = {handle.remote().result(timeout_s=10)[1] for _ in range(8)}
    assert len(new) == 1 and version not in new, new
    serve.delete("versioned")
