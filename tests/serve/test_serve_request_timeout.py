"""``http_options.request_timeout_s`` bounds a request end to end, as Ray 2.60's proxy bounds it: the wait for a
replica, the answer, and every chunk of a streamed answer, on both ingress servers."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import StreamingResponse

from muster import serve

from serve_helpers import serving, wait_until, write_whole

pytestmark = pytest.mark.allow_leftover_workers

TIMEOUT_S = 2


@pytest.fixture(scope="module", params=["granian", "uvicorn"])
def client(request):
    with serving(server=request.param, request_timeout_s=TIMEOUT_S) as c:
        c.server = request.param  # type: ignore[attr-defined]
        yield c


@serve.deployment(ray_actor_options={"num_cpus": 0.1})
class Ticker:
    """Streams a line every 0.2 s for 10 s and writes to ``path`` how its generator ended."""

    def __init__(self, path: str):
        self.path = path

    async def ticks(self):
        try:
            for i in range(50):
                yield f"tick{i}\n"
                await asyncio.sleep(0.2)
        except asyncio.CancelledError:
            write_whole(self.path, "cancelled")
            raise
        write_whole(self.path, "finished")

    async def __call__(self, request: Request) -> StreamingResponse:
        return StreamingResponse(self.ticks(), media_type="text/plain")


def test_a_stream_past_request_timeout_is_cut_and_its_generator_cancelled(client, tmp_path):
    """Ray 2.60 (measured): a StreamingResponse still streaming at request_timeout_s keeps its 200, is cut there
    with the connection closed mid-body (httpx: RemoteProtocolError, incomplete chunked read), and the replica's
    generator gets CancelledError. On granian the body ends at the cut (RSGI cannot abort a response). Before,
    the stream ran its 10 s to the end."""
    outcome = tmp_path / "outcome"
    serve.run(Ticker.bind(str(outcome)), name="ticker", route_prefix="/ticker")
    got = b""
    start = time.monotonic()
    with client.stream("GET", "/ticker") as r:
        assert r.status_code == 200
        if client.server == "uvicorn":
            with pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"):
                for chunk in r.iter_bytes():
                    got += chunk
        else:
            for chunk in r.iter_bytes():
                got += chunk
    took = time.monotonic() - start
    assert TIMEOUT_S - 0.2 < took < TIMEOUT_S + 3, took
    lines = got.decode().splitlines()
    assert 1 <= len(lines) < 50 and lines == [f"tick{i}" for i in range(len(lines))], got
    wait_until(outcome.exists, 20, "the generator's outcome")
    assert outcome.read_text() == "cancelled"
    assert client.get("/-/healthz").status_code == 200  # the ingress serves on
    serve.delete("ticker")


@serve.deployment(max_ongoing_requests=1, ray_actor_options={"num_cpus": 0.1})
class OneAtATime:
    async def __call__(self, request: Request) -> str:
        await asyncio.sleep(1.5)
        return "done"


def test_request_timeout_counts_the_wait_for_a_replica(client):
    """As Ray 2.60 (measured): with one request at a time taking 1.5 s, the second (queued 1.3 s) and the third
    (still queued at its deadline) get 408 at request_timeout_s. Before: 200 after 2.8 s, and a 503 saying that no
    replica had room."""
    serve.run(OneAtATime.bind(), name="one", route_prefix="/one")

    def get(delay: float) -> tuple[int, float, str]:
        time.sleep(delay)
        start = time.monotonic()
        r = client.get("/one")
        return r.status_code, time.monotonic() - start, r.text

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        first, second, third = pool.map(get, [0.0, 0.2, 0.4])
    assert first[0] == 200, first
    for status, took, text in (second, third):
        assert status == 408 and f"request_timeout_s={TIMEOUT_S}" in text, (status, text)
        assert took < TIMEOUT_S + 1.5, took
    assert client.get("/one").text == "done"
    serve.delete("one")
