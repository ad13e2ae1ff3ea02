"""Helpers shared by the Serve tests."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import os
import threading
import time

import httpx
import pytest
from _shared import engine_workers

from muster import serve


def wait_until(cond, timeout_s: float = 30.0, what: str = "condition"):
    """Poll ``cond`` (bounded); return its truthy value or fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}")


@contextlib.contextmanager
def loaded(client: httpx.Client, path: str, threads: int = 4):
    """Keep ``threads`` clients requesting ``path`` back to back until the block ends."""
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            client.get(path)

    started = [threading.Thread(target=load) for _ in range(threads)]
    for t in started:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in started:
            t.join(10)


def alive(pid: int) -> bool:
    """Whether process ``pid`` still exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _workers() -> set[int]:
    """Worker processes of this test process's engine."""
    return {p.pid for p in engine_workers()}


@contextlib.contextmanager
def serving(**http_options):
    """Serve on a free port; yield an httpx client; then shut Serve down and check its processes are gone."""
    before = _workers()
    serve.start(http_options={"host": "127.0.0.1", "port": 0, **http_options})
    port = serve.status().http["port"]
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
            yield c
    finally:
        serve.shutdown()
    from muster.core.api import _runtime

    if _runtime is not None and hasattr(_runtime, "retire_idle_workers"):
        _runtime.retire_idle_workers()  # warm task workers (tasks that called Serve) are a cache, not Serve's
    wait_until(lambda: not (_workers() - before), 15, "Serve's replica and ingress processes to exit")


def check_a_client_that_leaves_cancels_its_request(client: httpx.Client, tmp_path) -> None:
    """The replica's handler gets ``CancelledError`` once the HTTP client has gone, as in Ray (before, only
    streamed responses were stopped: a plain one ran to its end for no one)."""
    outcome = tmp_path / "outcome"
    serve.run(_SlowToAnswer.bind(str(outcome)), name="slow", route_prefix="/slow")
    with pytest.raises(httpx.ReadTimeout):
        client.get("/slow", timeout=1.0)
    wait_until(outcome.exists, 40, "the request's outcome")
    assert outcome.read_text() == "cancelled"
    serve.delete("slow")


@serve.deployment(ray_actor_options={"num_cpus": 0.1})
class _SlowToAnswer:
    """Answers after 30 s, and writes to ``path`` how its request ended: "finished" or "cancelled". (Long enough
    that a loaded machine's slow cancel still comes first: at 4 s, one under load wrote "finished".)"""

    def __init__(self, path: str):
        self.path = path

    async def __call__(self) -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            write_whole(self.path, "cancelled")
            raise
        write_whole(self.path, "finished")
        return "late"


def write_whole(path: str, text: str) -> None:
    """Whole or absent: a test polls for the file, and a plain write let it read "" between create and write."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


WEBSOCKET_UPGRADE = {"upgrade": "websocket", "connection": "Upgrade", "sec-websocket-version": "13",
                     "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ=="}


def check_a_websocket_upgrade_is_refused_naming_it(client: httpx.Client, path: str) -> None:
    """The granian ingress serves no WebSockets (its RSGI interface cannot relay them faithfully): an upgrade gets a
    501 naming the server that does."""
    r = client.get(path, headers=WEBSOCKET_UPGRADE)
    assert r.status_code == 501 and "upgrade to a WebSocket" in r.text and "'server': 'uvicorn'" in r.text


CHUNK = b"x" * 65536


@serve.deployment(ray_actor_options={"num_cpus": 0.1})
class Flood:
    """Streams up to 4,000 chunks of 64 KiB (250 MiB), from a generator or a StreamingResponse, or items
    through a handle, and counts what it has made."""

    def __init__(self):
        self.made = 0

    def _chunks(self, n: int):
        for _ in range(n):
            self.made += 1
            yield CHUNK

    def __call__(self, request):
        if request.query_params.get("kind") == "starlette":
            from starlette.responses import StreamingResponse

            return StreamingResponse(self._chunks(4000), media_type="application/octet-stream")
        return self._chunks(4000)

    async def items(self, n: int):
        for i in range(n):
            self.made += 1
            yield i

    def count(self) -> int:
        return self.made

    def reset(self) -> None:
        self.made = 0


def check_a_slow_reader_pauses_the_stream(client, kind: str) -> None:
    """A client that stops reading a streamed response pauses the replica's generator (the socket buffers and
    the replica's window of 64 chunks fill, then it waits); reading again resumes it, to the end."""
    import socket

    handle = serve.run(Flood.bind(), name="flood", route_prefix="/flood")
    handle.reset.remote().result(timeout_s=10)
    with socket.create_connection(("127.0.0.1", client.base_url.port)) as s:
        s.sendall(f"GET /flood?kind={kind} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert s.recv(65536).startswith(b"HTTP/1.1 200")
        wait_until(lambda: handle.count.remote().result(timeout_s=10) > 0, 10, "the stream to start")
        time.sleep(1.0)  # not reading
        stalled = handle.count.remote().result(timeout_s=10)
        time.sleep(0.3)
        assert handle.count.remote().result(timeout_s=10) == stalled < 1000, stalled  # 4000 before
        got = 0
        while handle.count.remote().result(timeout_s=10) < 4000 or got < 1000 * len(CHUNK):
            data = s.recv(1 << 20)
            assert data, got
            got += len(data)
    assert handle.count.remote().result(timeout_s=10) == 4000
    serve.delete("flood")


@serve.deployment(num_replicas=3, ray_actor_options={"num_cpus": 0.1}, max_ongoing_requests=8)
class Counted:
    """One model per replica; answers its pid, the model and every load it has done."""

    def __init__(self):
        self.loads: list[str] = []

    @serve.multiplexed(max_num_models_per_replica=1)
    async def get_model(self, model_id: str):
        self.loads.append(model_id)
        await asyncio.sleep(0.05)
        return model_id

    async def __call__(self, *args) -> tuple:
        model = await self.get_model(serve.get_multiplexed_model_id())
        return os.getpid(), model, list(self.loads)

    async def slow(self, seconds: float = 2.5) -> tuple:
        got = await self.__call__()
        await asyncio.sleep(seconds)
        return got


def check_models_routed(answers: list[tuple], models: list[str]) -> None:
    """Each model was served by one replica and loaded once, in all the replicas together."""
    by_model = collections.defaultdict(set)
    last_loads: dict[int, list[str]] = {}
    for pid, model, loads in answers:
        by_model[model].add(pid)
        if len(loads) >= len(last_loads.get(pid, [])):
            last_loads[pid] = loads
    for m in models:
        assert len(by_model[m]) == 1, f"model {m} served by replicas {by_model[m]}"
        assert sum(loads.count(m) for loads in last_loads.values()) == 1, f"{m} loaded more than once: {last_loads}"


def check_http_requests_go_to_the_replica_holding_their_model(client: httpx.Client) -> None:
    """The ingress routes by the serve_multiplexed_model_id header (both servers), also named with hyphens."""
    serve.run(Counted.bind(), name="mux_http", route_prefix="/mux_http")
    answers = []
    for m in ["x"] * 6 + ["y"] * 6 + ["x"] * 4:
        name = "serve-multiplexed-model-id" if m == "y" else "serve_multiplexed_model_id"
        r = client.get("/mux_http", headers={name: m})
        assert r.status_code == 200, r.text
        answers.append(tuple(r.json()))
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        answers += [tuple(r.json()) for r in pool.map(
            lambda _: client.get("/mux_http", headers={"serve_multiplexed_model_id": "z"}), range(6))]
    check_models_routed(answers, ["x", "y", "z"])
    serve.delete("mux_http")
