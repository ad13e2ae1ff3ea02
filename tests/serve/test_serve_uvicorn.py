"""The ingress on uvicorn (``http_options={"server": "uvicorn"}``): the ASGI path end to end."""

from __future__ import annotations

import pytest
from serve_helpers import (
    check_a_client_that_leaves_cancels_its_request,
    check_a_slow_reader_pauses_the_stream,
    check_http_requests_go_to_the_replica_holding_their_model,
    serving,
)
from starlette.requests import Request
from starlette.responses import StreamingResponse

from muster import serve

pytestmark = pytest.mark.allow_leftover_workers


@serve.deployment(ray_actor_options={"num_cpus": 0.1})
class Mixed:
    async def __call__(self, request: Request):
        kind = request.query_params.get("kind")
        if kind == "stream":
            return StreamingResponse((f"{i};" for i in range(4)), media_type="text/plain")
        if kind == "raise":
            raise KeyError("missing-key")
        return {"body": (await request.body()).decode(), "path": request.url.path}


@pytest.fixture(scope="module")
def client():
    with serving(server="uvicorn", max_body_bytes=1000) as c:
        yield c


def test_uvicorn_ingress(client):
    serve.run(Mixed.bind(), name="mixed", route_prefix="/m")
    assert client.post("/m/a", content=b"hi").json() == {"body": "hi", "path": "/m/a"}
    with client.stream("GET", "/m", params={"kind": "stream"}) as r:
        assert "".join(r.iter_text()) == "0;1;2;3;"
    r = client.get("/m", params={"kind": "raise"}, headers={"x-request-id": "abc"})
    assert r.status_code == 500 and "KeyError" in r.text and r.headers["x-request-id"] == "abc"
    assert len(client.get("/m").headers["x-request-id"]) == 36  # generated when the client sent none
    assert client.post("/m", content=b"x" * 2000).status_code == 413
    assert client.get("/elsewhere").status_code == 404


def test_a_client_that_leaves_cancels_its_request_on_uvicorn(client, tmp_path):
    check_a_client_that_leaves_cancels_its_request(client, tmp_path)


@pytest.mark.parametrize("kind", ["generator", "starlette"])
def test_a_slow_reader_pauses_the_stream_on_uvicorn(client, kind):
    """Before: the replica made all 4,000 chunks (250 MiB) for a client that read none, and the ingress held
    them. (On granian the ingress still takes every chunk: its RSGI stream has no backpressure.)"""
    check_a_slow_reader_pauses_the_stream(client, kind)


def test_uvicorn_ingress_routes_by_model(client):
    check_http_requests_go_to_the_replica_holding_their_model(client)
