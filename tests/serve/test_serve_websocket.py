"""WebSockets through the ingress (on uvicorn) to real replica processes, with a real client (``websockets``)."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import httpx
import pytest
from fastapi import FastAPI, WebSocket, WebSocketDisconnect
from serve_helpers import serving, wait_until, write_whole
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from muster import serve

pytestmark = pytest.mark.allow_leftover_workers

app = FastAPI()


@serve.deployment(num_replicas=2, max_ongoing_requests=40, ray_actor_options={"num_cpus": 0.1})
@serve.ingress(app)
class Chat:
    """Echoes text and bytes; ``close`` closes with 4001, ``raise`` raises, ``pid`` names its process; writes the
    code a client left with to ``<outcomes>/<tag>``."""

    def __init__(self, outcomes: str):
        self.outcomes = outcomes

    @app.websocket("/echo")
    async def echo(self, ws: WebSocket) -> None:
        await ws.accept(subprotocol=ws.scope["subprotocols"][0] if ws.scope["subprotocols"] else None)
        try:
            while True:
                msg = await ws.receive()
                if msg["type"] == "websocket.disconnect":
                    raise WebSocketDisconnect(msg["code"])
                text = msg.get("text")
                if text is None:
                    await ws.send_bytes(msg["bytes"])
                elif text == "close":
                    await ws.close(4001, "bye")
                    return
                elif text == "raise":
                    raise RuntimeError("boom")
                else:
                    await ws.send_text(str(os.getpid()) if text == "pid" else text)
        except WebSocketDisconnect as gone:
            write_whole(os.path.join(self.outcomes, ws.query_params.get("tag", "untagged")), str(gone.code))

    @app.get("/hello")
    def hello(self) -> str:
        return "hi"

    @app.websocket("/typed")
    async def typed(self, ws: WebSocket, n: int) -> None:  # FastAPI refuses a missing n: its reason is a list
        await ws.accept()
        await ws.send_text(str(n * 2))
        await ws.close()

    @app.websocket("/flood")
    async def flood(self, ws: WebSocket) -> None:
        """Sends 4,000 messages of 64 KiB (250 MiB), counting them in ``self.sent``."""
        await ws.accept()
        self.sent = 0
        for _ in range(4000):
            await ws.send_bytes(CHUNK)
            self.sent += 1
        await ws.close()

    @app.websocket("/sink")
    async def sink(self, ws: WebSocket) -> None:
        """Accepts, then reads nothing until told to over HTTP (``/drain``), then everything."""
        await ws.accept()
        self.draining = asyncio.Event()
        await self.draining.wait()
        while (await ws.receive())["type"] != "websocket.disconnect":
            pass

    @app.get("/sent")
    def sent_so_far(self) -> int:
        return getattr(self, "sent", 0)

    @app.get("/drain")
    def drain(self) -> None:
        self.draining.set()


Narrow = Chat.options(name="Narrow", num_replicas=1, max_ongoing_requests=2)  # holds two connections at once
CHUNK = b"x" * 65536


@serve.deployment(ray_actor_options={"num_cpus": 0.1})
class Plain:
    def __call__(self) -> str:
        return "plain"


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    outcomes = tmp_path_factory.mktemp("ws-outcomes")
    with serving(server="uvicorn") as c:
        serve.run(Chat.bind(str(outcomes)), name="chat", route_prefix="/chat")
        yield str(c.base_url).replace("http://", "ws://"), outcomes


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def closed_with(ws) -> tuple[int, str]:
    """The code and reason the server closed ``ws`` with (its next receive must find it closed, within 10 s)."""
    with pytest.raises(ConnectionClosed) as closed:
        await asyncio.wait_for(ws.recv(), 10)
    return closed.value.rcvd.code, closed.value.rcvd.reason


async def echo_once(base: str, text: str) -> str:
    async with connect(f"{base}/chat/echo") as ws:
        await ws.send(text)
        return await ws.recv()


def test_text_and_bytes_round_trip_and_the_handlers_close_code_reaches_the_client(url):
    base, _ = url

    async def go():
        async with connect(f"{base}/chat/echo", subprotocols=["chat.v1"]) as ws:
            assert ws.subprotocol == "chat.v1"
            assert ws.response.headers["x-request-id"]
            await ws.send("hello")
            assert await ws.recv() == "hello"
            await ws.send(b"\x00\x01\xff")
            assert await ws.recv() == b"\x00\x01\xff"
            await ws.send("close")
            assert await closed_with(ws) == (4001, "bye")

    run(go())


def test_a_client_that_leaves_is_seen_by_the_handler_with_its_close_code(url):
    base, outcomes = url

    async def go():
        async with connect(f"{base}/chat/echo?tag=left") as ws:
            await ws.send("x")
            assert await ws.recv() == "x"
            await ws.close(4100, "leaving")

    run(go())
    wait_until((outcomes / "left").exists, 15, "the handler to see the client leave")
    assert (outcomes / "left").read_text() == "4100"


def test_a_websocket_no_handler_serves_is_refused_at_once(url):
    base, _ = url
    serve.run(Plain.bind(), name="plain", route_prefix="/plain")

    async def refused(path: str) -> InvalidStatus:
        with pytest.raises(InvalidStatus) as got:
            async with connect(f"{base}{path}", open_timeout=10):
                pass
        return got.value

    t0 = time.monotonic()
    assert run(refused("/chat/nowhere")).response.status_code == 403  # the app has no such route
    plain = run(refused("/plain"))
    assert plain.response.status_code == 403 and b"serves no WebSocket" in plain.response.body
    assert run(refused("/unknown")).response.status_code == 404
    assert time.monotonic() - t0 < 10
    serve.delete("plain")


def test_fastapis_refusal_of_a_bad_query_reaches_the_client(url):
    """FastAPI closes with a list as the reason when a WebSocket's parameters fail validation; the relay must
    still carry that close (before: it failed to encode the reason and the client heard nothing clear)."""
    base, _ = url

    async def go():
        t0 = time.monotonic()
        with pytest.raises(InvalidStatus) as refused:
            async with connect(f"{base}/chat/typed", open_timeout=10):
                pass
        assert refused.value.response.status_code == 403 and time.monotonic() - t0 < 10
        async with connect(f"{base}/chat/typed?n=21") as ws:
            assert await ws.recv() == "42"

    run(go())


def test_a_handler_that_raises_closes_with_1011_and_the_deployment_serves_on(url):
    base, _ = url

    async def go():
        async with connect(f"{base}/chat/echo") as ws:
            await ws.send("raise")
            assert (await closed_with(ws))[0] == 1011
        assert await echo_once(base, "again") == "again"

    run(go())


def test_many_connections_at_once_use_both_replicas(url):
    base, _ = url
    n, rounds = 40, 10

    async def one(i: int) -> str:
        async with connect(f"{base}/chat/echo") as ws:
            for j in range(rounds):
                await ws.send(f"{i}:{j}")
                assert await ws.recv() == f"{i}:{j}"
            await ws.send("pid")
            return await ws.recv()

    async def go():
        return await asyncio.gather(*(one(i) for i in range(n)))

    t0 = time.monotonic()
    pids = run(go())
    assert len(pids) == n and len(set(pids)) == 2  # power of two choices over both replicas
    assert time.monotonic() - t0 < 30


def test_an_open_connection_counts_as_an_ongoing_request(url):
    """A replica at max_ongoing_requests=2 open connections takes a third only once one closes."""
    base, outcomes = url
    serve.run(Narrow.bind(str(outcomes)), name="narrow", route_prefix="/narrow")

    async def go():
        a = await connect(f"{base}/narrow/echo")
        b = await connect(f"{base}/narrow/echo")
        third = asyncio.ensure_future(connect(f"{base}/narrow/echo", open_timeout=20))
        await asyncio.sleep(1.0)
        assert not third.done()  # queued in the ingress's router: no room
        await a.close()
        c = await third
        await c.send("in")
        assert await c.recv() == "in"
        await b.close()
        await c.close()

    run(go())
    serve.delete("narrow")


def test_a_replica_killed_mid_connection_closes_it_with_1011_and_serving_goes_on(url):
    base, _ = url

    async def go():
        async with connect(f"{base}/chat/echo") as ws:
            await ws.send("pid")
            pid = int(await ws.recv())
            os.kill(pid, signal.SIGKILL)
            assert (await closed_with(ws))[0] == 1011

    run(go())
    assert run(echo_once(base, "after")) == "after"  # the other replica serves on
    wait_until(lambda: serve.status().applications["chat"].deployments["Chat"].replica_states.get("RUNNING") == 2,
               30, "the killed replica's replacement")


def test_a_client_that_stops_reading_pauses_the_handlers_sends(url):
    """Flow control from the replica to the client: the handler's sends wait once the client stops reading (the
    window of 64 messages and the socket buffers fill); reading again resumes them, to the end. (Uncompressed:
    permessage-deflate would shrink the 250 MiB of ``x`` to what the socket buffers hold.)"""
    base, outcomes = url
    serve.run(Narrow.bind(str(outcomes)), name="narrow", route_prefix="/narrow")
    http = base.replace("ws://", "http://")

    def sent() -> int:
        return httpx.get(f"{http}/narrow/sent", timeout=10).json()

    async def go():
        async with connect(f"{base}/narrow/flood", max_size=None, max_queue=4, compression=None) as ws:
            await ws.recv()
            await asyncio.sleep(1.5)  # not reading
            stalled = await asyncio.to_thread(sent)
            await asyncio.sleep(0.5)
            assert await asyncio.to_thread(sent) == stalled < 1000, stalled  # 4000 before
            got = 1
            while got < 4000:
                assert await ws.recv() == CHUNK
                got += 1
            assert await asyncio.to_thread(sent) == 4000

    run(go())
    serve.delete("narrow")


def test_a_handler_that_stops_reading_stops_the_ingress_reading_its_client(url):
    """Flow control from the client to the replica: once the handler has left 64 messages unread (and the socket
    buffers are full) the client's sends wait, instead of the replica queueing all it is sent."""
    base, outcomes = url
    serve.run(Narrow.bind(str(outcomes)), name="narrow", route_prefix="/narrow")
    http = base.replace("ws://", "http://")

    async def go():
        async with connect(f"{base}/narrow/sink", max_size=None, compression=None) as ws:
            done = 0

            async def send_all():
                nonlocal done
                for _ in range(4000):
                    await ws.send(CHUNK)
                    done += 1

            sending = asyncio.ensure_future(send_all())
            await asyncio.sleep(1.5)
            stalled = done
            await asyncio.sleep(0.5)
            assert done == stalled < 1000 and not sending.done(), stalled
            await asyncio.to_thread(httpx.get, f"{http}/narrow/drain", timeout=10)
            await asyncio.wait_for(sending, 30)  # reading again lets every send through

    run(go())
    serve.delete("narrow")
