"""HTTP through the ingress to real replica processes: routing, return types, streaming, errors."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import re
import warnings

import numpy as np
import pandas as pd
import pytest
from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, StreamingResponse

from muster import serve

from serve_helpers import (
    check_a_client_that_leaves_cancels_its_request,
    check_a_websocket_upgrade_is_refused_naming_it,
    wait_until,
    write_whole,
)

pytestmark = pytest.mark.allow_leftover_workers

SMALL = {"num_cpus": 0.1}


@serve.deployment(num_replicas=2, ray_actor_options=SMALL)
class Echo:
    def __init__(self, greeting: str):
        self.greeting = greeting
        self.pid = os.getpid()

    async def __call__(self, request: Request) -> dict:
        body = await request.body()
        return {
            "greeting": self.greeting, "path": request.url.path, "root": request.scope["root_path"],
            "method": request.method, "query": dict(request.query_params), "body": body.decode(), "pid": self.pid,
        }


@serve.deployment(ray_actor_options=SMALL)
def hello(request: Request) -> str:
    return f"hello {request.query_params.get('name', 'world')}"


@serve.deployment(ray_actor_options=SMALL)
class Kinds:
    def __call__(self, request: Request):
        kind = request.query_params["kind"]
        if kind == "bytes":
            return b"\x00\x01raw"
        if kind == "response":
            return PlainTextResponse("teapot", status_code=418, headers={"x-muster": "yes"})
        if kind == "list":
            return [1, 2, 3]
        if kind == "stream":
            def gen():
                for i in range(5):
                    yield f"chunk{i};"
            return StreamingResponse(gen(), media_type="text/plain")
        if kind == "generator":
            return (f"g{i};" for i in range(3))
        if kind == "raise":
            raise ValueError("bad input: kind=raise")
        if kind == "http":
            raise HTTPException(status_code=422, detail="you sent something odd")
        if kind == "context":
            ctx = serve.get_replica_context()
            rid = ctx.replica_id  # Ray's ReplicaID (it was a plain string)
            return {"app": ctx.app_name, "deployment": ctx.deployment, "replica": ctx.replica_tag,
                    "unique": rid.unique_id, "dep_id": [rid.deployment_id.app_name, rid.deployment_id.name],
                    "full": rid.to_full_id_str(), "str": str(rid),
                    "back": type(rid).from_full_id_str(rid.to_full_id_str()) == rid}
        if kind == "env":
            return os.environ.get("MUSTER_SERVE_TEST_VAR", "missing")
        if kind == "query":
            return request.query_params  # a Mapping, not a dict: JSON as in Ray
        if kind == "headers":
            return request.headers
        if kind == "tuple":
            return (1, "two")
        if kind == "none":
            return None
        if kind == "numpy":  # Ray encodes these as FastAPI's jsonable_encoder does, with numpy and pandas added
            return {"array": np.array([0.5, 1.5]), "ints": np.arange(3, dtype=np.int32), "scalar": np.float32(0.25),
                    "when": datetime.datetime(2024, 1, 2, 3, 4, 5), "set": {7}, "exc": ValueError("why"),
                    "frame": pd.DataFrame({"a": [1, 2], "b": ["x", "y"]})}
        if kind == "np_scalar":
            return np.int64(5)
        if kind == "no_json":
            return {"inner": object()}
        return object()  # not a response


@serve.deployment(ray_actor_options=SMALL)
class NoRequest:
    async def __call__(self) -> str:  # takes no request: Ray calls it without one
        return "no request needed"


@serve.deployment(ray_actor_options=SMALL)
def no_request_fn() -> dict:
    return {"fn": True}


api = FastAPI()


@serve.deployment(ray_actor_options=SMALL)
@serve.ingress(api)
class Api:
    def __init__(self):
        self.count = 0

    @api.get("/items/{item_id}")
    def get_item(self, item_id: int) -> dict:
        self.count += 1
        return {"item": item_id, "count": self.count}

    @api.post("/items")
    async def create(self, payload: dict) -> dict:
        if "name" not in payload:
            raise HTTPException(status_code=400, detail="name is required")
        return {"created": payload["name"]}

    @api.get("/")
    def root(self) -> str:
        return f"Hello, world! count={self.count}"

    @api.post("/{subpath}")
    def root(self, subpath: str) -> str:  # noqa: F811 - as Ray's http guide: both routes' methods are named root
        return f"Hello from {subpath}!"


@pytest.fixture(scope="module")
def apps(client):
    serve.run(Echo.bind("hi"), name="echo", route_prefix="/echo")
    serve.run(hello.bind(), name="hello", route_prefix="/hello")
    env_kinds = Kinds.options(
        ray_actor_options={**SMALL, "runtime_env": {"env_vars": {"MUSTER_SERVE_TEST_VAR": "set"}}})
    serve.run(env_kinds.bind(), name="kinds", route_prefix="/kinds")
    serve.run(Api.bind(), name="api", route_prefix="/api")
    serve.run(NoRequest.bind(), name="noreq", route_prefix="/noreq")
    serve.run(no_request_fn.bind(), name="noreqfn", route_prefix="/noreqfn")
    return client


def test_routes_by_prefix_and_spreads_over_replicas(apps):
    pids = set()
    for i in range(30):
        r = apps.post(f"/echo/sub/{i}?a=1", content=b"payload")
        assert r.status_code == 200, r.text
        j = r.json()
        assert (j["greeting"], j["path"], j["root"], j["method"]) == ("hi", f"/echo/sub/{i}", "/echo", "POST")
        assert j["query"] == {"a": "1"} and j["body"] == "payload"
        pids.add(j["pid"])
    assert len(pids) == 2  # both replicas served
    assert apps.get("/hello?name=ann").text == "hello ann"
    assert apps.get("/-/healthz").text == "success"
    assert set(apps.get("/-/routes").json()) == {"/echo", "/hello", "/kinds", "/api", "/noreq", "/noreqfn"}


def test_an_app_at_the_root_leaves_the_ingress_its_own_paths(apps):
    serve.run(hello.options(name="root_hello").bind(), name="root", route_prefix="/")
    try:
        assert apps.get("/anything?name=bo").text == "hello bo"
        assert apps.get("/-/healthz").text == "success"
        assert apps.get("/-/routes").json()["/"] == "root"
    finally:
        serve.delete("root")
    assert apps.get("/anything").status_code == 404


def test_status_reports_request_metrics(apps):
    for _ in range(10):
        assert apps.get("/hello").status_code == 200
    assert apps.get("/kinds", params={"kind": "raise"}).status_code == 500

    def metrics(app: str, dep: str) -> dict:
        return serve.status().applications[app].deployments[dep].metrics

    m = wait_until(lambda: (lambda m: m if m.get("served", 0) >= 10 else None)(metrics("hello", "hello")), 30,
                   "hello's metrics")
    assert m["p50_ms"] is not None and m["p99_ms"] >= m["p50_ms"] and m["errors"] == 0
    wait_until(lambda: metrics("kinds", "Kinds").get("errors", 0) >= 1, 30, "the error to be counted")
    st = serve.status().applications["echo"]
    assert st.status == "RUNNING" and st.deployments["Echo"].replica_states == {"RUNNING": 2}
    assert st.deployments["Echo"].status == "HEALTHY"


def test_return_types(apps):
    r = apps.get("/kinds", params={"kind": "bytes"})
    assert r.content == b"\x00\x01raw"
    r = apps.get("/kinds", params={"kind": "response"})
    assert (r.status_code, r.text, r.headers["x-muster"]) == (418, "teapot", "yes")
    assert apps.get("/kinds", params={"kind": "list"}).json() == [1, 2, 3]
    ctx = apps.get("/kinds", params={"kind": "context"}).json()
    assert ctx["app"] == "kinds" and ctx["deployment"] == "Kinds" and ctx["dep_id"] == ["kinds", "Kinds"]
    # Ray's: replica_tag is the unique id alone (it was app#deployment#id); the full id string has Ray's prefix
    assert ctx["replica"] == ctx["unique"] and re.fullmatch(r"\w+", ctx["unique"])
    assert ctx["full"] == f"SERVE_REPLICA::kinds#Kinds#{ctx['unique']}" and ctx["back"] is True
    assert ctx["str"] == f"Replica(id='{ctx['unique']}', deployment='Kinds', app='kinds')"
    assert apps.get("/kinds", params={"kind": "env"}).text == "set"
    r = apps.get("/kinds", params={"kind": "none"})  # as Ray: an empty text body (it was "null", JSON)
    assert (r.status_code, r.content, r.headers["content-type"].split(";")[0]) == (200, b"", "text/plain")


def test_handlers_without_a_request_parameter_and_mapping_returns(apps):
    assert apps.get("/noreq").text == "no request needed"
    assert apps.get("/noreqfn").json() == {"fn": True}
    assert apps.get("/kinds?kind=query&a=b&c=d").json() == {"kind": "query", "a": "b", "c": "d"}
    assert apps.get("/kinds?kind=headers", headers={"x-custom": "v"}).json()["x-custom"] == "v"
    assert apps.get("/kinds?kind=tuple").json() == [1, "two"]


def test_x_request_id_is_echoed_or_generated(apps):
    r = apps.get("/hello", headers={"X-Request-ID": "my-id-123"})
    assert r.status_code == 200 and r.headers["x-request-id"] == "my-id-123"
    seen = apps.get("/kinds?kind=headers").json()["x-request-id"]  # a generated id reaches the replica too
    ids = {apps.get("/hello").headers["x-request-id"] for _ in range(3)} | {seen}
    assert len(ids) == 4 and all(len(i) == 36 for i in ids)  # uuid4, one per request
    assert apps.get("/kinds?kind=raise", headers={"x-request-id": "e1"}).headers["x-request-id"] == "e1"
    with apps.stream("GET", "/kinds", params={"kind": "stream"}, headers={"x-request-id": "s1"}) as r:
        assert r.headers["x-request-id"] == "s1"


def test_numpy_pandas_datetimes_and_sets_are_json_as_in_ray(apps):
    """Ray's model-serving samples return ``{"prediction": ndarray}``; muster answered 500 ("Object of type
    ndarray is not JSON serializable", and "not an HTTP response" for a bare numpy scalar)."""
    r = apps.get("/kinds", params={"kind": "numpy"})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json", r.text
    assert r.json() == {"array": [0.5, 1.5], "ints": [0, 1, 2], "scalar": 0.25, "when": "2024-01-02T03:04:05",
                        "set": [7], "exc": "why", "frame": [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]}
    r = apps.get("/kinds", params={"kind": "np_scalar"})
    assert r.status_code == 200 and r.json() == 5


def test_streaming_responses_arrive_in_chunks(apps):
    with apps.stream("GET", "/kinds", params={"kind": "stream"}) as r:
        assert r.status_code == 200
        assert "".join(r.iter_text()) == "".join(f"chunk{i};" for i in range(5))
    assert apps.get("/kinds", params={"kind": "generator"}).text == "g0;g1;g2;"


def test_bad_input(apps):
    r = apps.get("/nowhere")
    assert r.status_code == 404 and "/echo" in r.text
    r = apps.get("/kinds", params={"kind": "raise"})
    assert r.status_code == 500 and "ValueError" in r.text and "bad input: kind=raise" in r.text
    r = apps.get("/kinds", params={"kind": "http"})
    assert r.status_code == 422 and "something odd" in r.text
    r = apps.get("/kinds", params={"kind": "other"})
    assert r.status_code == 500 and "not an HTTP response" in r.text
    r = apps.get("/kinds", params={"kind": "no_json"})
    assert r.status_code == 500 and "holds a builtins.object" in r.text and "has no JSON form" in r.text
    # the deployment keeps serving after its errors
    assert apps.get("/kinds", params={"kind": "list"}).json() == [1, 2, 3]


def test_a_route_prefix_another_app_serves_is_refused_as_rays_serve_exception(apps):
    """Ray raises RayServeException; muster's was only an InvalidArgumentError, so a ported except missed it."""
    with pytest.raises(serve.RayServeException, match=r"app 'echo' already serves that prefix") as info:
        serve.run(hello.bind(), name="second-echo", route_prefix="/echo")
    assert isinstance(info.value, ValueError)  # the value given is the fault
    assert "second-echo" not in serve.status().applications and apps.get("/echo/x").status_code == 200


def test_fastapi_ingress(apps):
    assert apps.get("/api/items/7").json()["item"] == 7
    assert apps.post("/api/items", json={"name": "x"}).json() == {"created": "x"}
    r = apps.post("/api/items", json={})
    assert r.status_code == 400 and "name is required" in r.text
    assert apps.delete("/api/items/7").status_code == 405
    assert apps.get("/api/items/notanint").status_code == 422


def test_fastapi_routes_on_two_methods_of_one_name_both_serve(apps):
    """Ray's HTTP guide routes ``GET /`` and ``POST /{subpath}`` to two methods both named ``root``: Ray finds a
    class's routes by their qualified name, so the first, shadowed in the class, still serves with ``self``
    bound (muster answered it 422, asking for ``self`` as a query parameter)."""
    r = apps.get("/api/")
    assert r.status_code == 200 and r.json().startswith("Hello, world! count="), r.text
    assert apps.post("/api/Serve").json() == "Hello from Serve!"
    assert apps.post("/api/items", json={"name": "x"}).json() == {"created": "x"}  # the earlier route still wins


def make_api():
    """Ray's FastAPI factory pattern: the app is built in each replica."""
    built = FastAPI()

    @built.get("/ping")
    def ping() -> dict:
        return {"pong": os.getpid()}

    return built


@serve.deployment(ray_actor_options=SMALL)
class Sub:
    def __call__(self) -> str:
        return "from the sub-deployment"


def test_fastapi_factory_pattern(apps):
    """serve.deployment(serve.ingress(factory)()) (Ray's HTTP guide). Before: a bare TypeError; bound to a
    sub-deployment (Ray's ingress docstring), "ASGIIngress() takes no arguments"."""
    serve.run(serve.deployment(ray_actor_options=SMALL)(serve.ingress(make_api)()).bind(Sub.bind()),
              name="factory", route_prefix="/factory")
    try:
        r = apps.get("/factory/ping")
        assert r.status_code == 200 and r.json()["pong"] != os.getpid()
        # Ray's name for it, which a config file's deployment overrides use (muster's was "ASGIIngress")
        assert set(serve.status().applications["factory"].deployments) == {"ASGIIngressDeployment", "Sub"}
    finally:
        serve.delete("factory")


def _token(x_token: str = Header(default="")) -> str:
    if not x_token:
        raise HTTPException(status_code=401, detail="x-token header missing")
    return x_token


def test_fastapi_apps_including_routers(apps):
    """``app.include_router`` (prefixes, tags, dependencies; the class's own methods on a router too), as Ray serves
    it. Before: a class defined here could not be sent to its replicas (FastAPI's included router holds a lock),
    and one imported failed in its replica ("'_IncludedRouter' object has no attribute 'path'")."""
    routed = FastAPI()
    pings = APIRouter(prefix="/r", tags=["r"])

    @pings.get("/ping")
    def ping(tok: str = Depends(_token)) -> dict:
        return {"pong": True, "tok": tok}

    routed.include_router(pings, prefix="/v1", tags=["v1"], dependencies=[Depends(_token)])
    counts = APIRouter(prefix="/m")
    routed.include_router(counts)  # before its routes are declared: FastAPI includes them all the same

    @serve.deployment(ray_actor_options=SMALL)
    @serve.ingress(routed)
    class Routed:  # defined in a function: sent to its replicas by value
        def __init__(self):
            self.n = 0

        @counts.get("/count")
        def count(self) -> int:
            self.n += 1
            return self.n

    serve.run(Routed.bind(), name="routed", route_prefix="/routed")
    try:
        r = apps.get("/routed/v1/r/ping", headers={"x-token": "T"})
        assert r.status_code == 200 and r.json() == {"pong": True, "tok": "T"}
        assert apps.get("/routed/v1/r/ping").status_code == 401  # the inclusion's dependency
        assert [apps.get("/routed/m/count").json() for _ in range(2)] == [1, 2]  # the instance's own method
        assert apps.get("/routed/openapi.json").json()["paths"]["/v1/r/ping"]["get"]["tags"] == ["v1", "r"]
    finally:
        serve.delete("routed")


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI):
    app.state.started_in = os.getpid()
    yield {"greeting": "hello"}  # Starlette's lifespan state: request.state.greeting
    write_whole(os.environ["MUSTER_TEST_STOPPED_FILE"], "lifespan")


lifespanned = FastAPI(lifespan=_lifespan)
hooked = FastAPI()


async def _started() -> None:
    hooked.state.started_in = os.getpid()


def _stopped() -> None:
    write_whole(os.environ["MUSTER_TEST_STOPPED_FILE"], "on_event")


with warnings.catch_warnings():  # FastAPI deprecates on_event, which ported Ray apps still use
    warnings.simplefilter("ignore", DeprecationWarning)
    hooked.on_event("startup")(_started)
    hooked.on_event("shutdown")(_stopped)


@serve.deployment(ray_actor_options=SMALL)
@serve.ingress(lifespanned)
class Lifespanned:
    @lifespanned.get("/state")
    def state(self, request: Request) -> dict:
        return {"pid": os.getpid(), "started_in": request.app.state.started_in,
                "greeting": request.state.greeting}


@serve.deployment(ray_actor_options=SMALL)
@serve.ingress(hooked)
class Hooked:
    @hooked.get("/state")
    def state(self, request: Request) -> dict:
        return {"pid": os.getpid(), "started_in": request.app.state.started_in, "greeting": "hello"}


def test_fastapi_lifespan_and_startup_shutdown_handlers_run_in_each_replica(apps, tmp_path):
    """As Ray: an ingress app's ``lifespan=`` and ``@app.on_event`` handlers run in each replica, startup before it
    serves and shutdown when it stops. Before: they never ran (``request.app.state`` had nothing set)."""
    for name, dep in (("lifespan", Lifespanned), ("on_event", Hooked)):
        out = tmp_path / name
        env = {"runtime_env": {"env_vars": {"MUSTER_TEST_STOPPED_FILE": str(out)}}}
        serve.run(dep.options(ray_actor_options={**SMALL, **env}).bind(), name=name, route_prefix=f"/{name}")
        try:
            got = apps.get(f"/{name}/state").json()
            assert got["started_in"] == got["pid"] != os.getpid() and got["greeting"] == "hello"
        finally:
            serve.delete(name)
        wait_until(out.exists, 10, f"the {name} shutdown to write {out}")
        assert out.read_text() == name


def test_body_over_limit_is_413():
    # a second ingress would need a second Serve; the limit lives in HTTPOptions, so check it with a fresh one
    from muster.serve._internal.ingress import IngressApp
    from muster.serve.config import HTTPOptions

    app = IngressApp(HTTPOptions(max_body_bytes=10))
    app.prefixes = [("/", "a", "d")]
    sent: list[dict] = []

    async def go(body: bytes, declared: bool) -> None:
        headers = [(b"content-length", str(len(body)).encode())] if declared else []
        scope = {"type": "http", "method": "POST", "path": "/x", "headers": headers, "query_string": b""}
        msgs = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> dict:
            return msgs.pop(0)

        async def send(m: dict) -> None:
            sent.append(m)

        await app(scope, receive, send)

    asyncio.run(go(b"x" * 11, True))
    assert sent[0]["status"] == 413
    sent.clear()
    asyncio.run(go(b"x" * 11, False))
    assert sent[0]["status"] == 413


def test_handles(apps):
    h = serve.get_app_handle("echo")
    assert h.remote is not None
    api_handle = serve.get_deployment_handle("Api", "api")
    assert api_handle.get_item.remote(3).result(timeout_s=10) == {"item": 3, "count": api_handle.get_item.remote(3)
                                                                  .result(timeout_s=10)["count"] - 1}

    async def via_await() -> str:
        return await serve.get_deployment_handle("Kinds", "kinds").remote(_FakeRequest("list"))

    assert asyncio.run(via_await()) == [1, 2, 3]
    with pytest.raises(ValueError, match="bad input"):
        serve.get_deployment_handle("Kinds", "kinds").remote(_FakeRequest("raise")).result(timeout_s=10)
    with pytest.raises(serve.RayServeException, match="no Serve app named 'nope'"):
        serve.get_app_handle("nope")


class _FakeRequest:
    """What a handle caller passes where HTTP would pass a Request (only query_params is read)."""

    def __init__(self, kind: str):
        self.query_params = {"kind": kind}


def test_a_client_that_leaves_cancels_its_request(apps, tmp_path):
    check_a_client_that_leaves_cancels_its_request(apps, tmp_path)


def test_a_websocket_upgrade_is_refused_naming_it(apps):
    check_a_websocket_upgrade_is_refused_naming_it(apps, "/hello")
