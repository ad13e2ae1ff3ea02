"""WebSockets with the server left out of http_options: the ingress moves from granian to uvicorn when an app with
WebSocket routes is deployed (HTTP keeps serving across the move); a server the user named is kept."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import httpx
import pytest
from fastapi import APIRouter, FastAPI, WebSocket
from serve_helpers import WEBSOCKET_UPGRADE, check_a_websocket_upgrade_is_refused_naming_it, serving, wait_until
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect
from ws_echo_app import EchoServer  # Ray's example, only the import changed

from muster import serve

pytestmark = pytest.mark.allow_leftover_workers


@serve.deployment(ray_actor_options={"num_cpus": 0.1})
class Held:
    """Answers an HTTP request once the file ``go`` exists (at most 60 s), after writing ``started``."""

    def __init__(self, folder: str):
        self.folder = folder

    async def __call__(self) -> str:
        open(os.path.join(self.folder, "started"), "w").close()
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(self.folder, "go")) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return "held"


def ws_url(client: httpx.Client) -> str:
    return str(client.base_url).replace("http://", "ws://")


def echoes(url: str) -> bool:
    with connect(url, open_timeout=10, close_timeout=5) as websocket:
        websocket.send("Eureka!")
        assert websocket.recv(timeout=10) == "Eureka!"
        websocket.send("I've found it!")
        assert websocket.recv(timeout=10) == "I've found it!"
    return True


def test_rays_websocket_example_echoes_on_the_default_config(capfd):
    with serving() as client:
        assert serve.status().http["server"] == "granian"  # HTTP only so far: the fastest server
        serve.run(EchoServer.bind())
        assert echoes(ws_url(client))
        assert serve.status().http["server"] == "uvicorn"
        err = capfd.readouterr().err
        assert err.count("has WebSocket routes, which the granian ingress cannot serve: moving") == 1, err


def test_http_serves_across_the_move_to_uvicorn_and_an_in_flight_request_completes(tmp_path, capfd):
    with serving() as client:
        serve.run(Held.bind(str(tmp_path)), name="held", route_prefix="/held")
        (tmp_path / "go").touch()
        assert client.get("/held").text == "held"  # before: on granian
        (tmp_path / "go").unlink()
        (tmp_path / "started").unlink()
        slow: dict = {}
        request = threading.Thread(target=lambda: slow.update(r=httpx.get(f"{client.base_url}/held", timeout=90)))
        request.start()
        wait_until((tmp_path / "started").exists, 30, "the held request to reach its replica")
        deploy = threading.Thread(target=lambda: slow.update(handle=serve.run(EchoServer.bind(), name="echo")))
        deploy.start()
        wait_until(lambda: serve.status().http["server"] == "uvicorn", 60, "the move to uvicorn to begin")
        # uvicorn listens beside granian, which finishes the held request: a new connection is served meanwhile
        wait_until(lambda: _echoes_now(ws_url(client)), 30, "a WebSocket served while granian drains")
        assert request.is_alive() and deploy.is_alive()
        (tmp_path / "go").touch()
        request.join(30)
        deploy.join(30)
        assert slow["r"].status_code == 200 and slow["r"].text == "held"
        assert "handle" in slow  # serve.run returned once granian had drained
        assert client.get("/held").text == "held"  # after: on uvicorn
        assert echoes(ws_url(client))
        err = capfd.readouterr().err
        assert err.count("[serve] app 'echo' has WebSocket routes") == 1, err


def _echoes_now(url: str) -> bool:
    try:
        return echoes(url)
    except (InvalidStatus, OSError):
        return False


def test_a_server_the_user_named_is_kept_and_an_upgrade_is_refused_naming_it(capfd):
    with serving(server="granian") as client:
        serve.run(EchoServer.bind())
        check_a_websocket_upgrade_is_refused_naming_it(client, "/")
        r = client.get("/", headers=WEBSOCKET_UPGRADE)
        assert "runs on granian because http_options server='granian' names it" in r.text
        assert serve.status().http["server"] == "granian"
        assert "moving" not in capfd.readouterr().err


routed_app, ws_router = FastAPI(), APIRouter(prefix="/ws")
routed_app.include_router(ws_router)


@serve.deployment(ray_actor_options={"num_cpus": 0})
@serve.ingress(routed_app)
class RoutedEcho:
    @ws_router.websocket("/echo")
    async def echo(self, ws: WebSocket) -> None:
        await _echo_twice(ws)


def test_a_websocket_route_of_an_included_router_moves_the_ingress_to_uvicorn():
    """A FastAPI app's WebSocket route may come from ``app.include_router``; the driver missed it there (the
    ingress stayed on granian, which refused the upgrade)."""
    with serving() as client:
        serve.run(RoutedEcho.bind(), name="routed", route_prefix="/routed")
        assert echoes(ws_url(client).rstrip("/") + "/routed/ws/echo") and serve.status().http["server"] == "uvicorn"


async def _echo_twice(ws) -> None:
    await ws.accept()
    for _ in range(2):
        await ws.send_text(await ws.receive_text())
    await ws.close()


def make_ws_app():
    """A plain Starlette app built in each replica (Ray's factory pattern): the driver cannot see its WebSocket
    route (and a Starlette app failed its replica's start before: it was taken for a FastAPI one)."""
    from starlette.applications import Starlette
    from starlette.routing import WebSocketRoute

    return Starlette(routes=[WebSocketRoute("/", _echo_twice)])


@serve.deployment(ray_actor_options={"num_cpus": 0})
def hello() -> str:
    return "hello"


async def raw_asgi(scope, receive, send):
    """A bare ASGI app: its routes cannot be read, so Serve cannot know whether it serves WebSockets."""
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"raw"})


def test_the_ingress_follows_the_apps_it_really_serves_to_uvicorn_and_back(capfd):
    with serving() as client:
        serve.run(serve.deployment(serve.ingress(raw_asgi)()).options(ray_actor_options={"num_cpus": 0}).bind(),
                  name="raw", route_prefix="/raw")
        assert client.get("/raw").text == "raw" and serve.status().http["server"] == "granian"  # unknown: stays
        refused = client.get("/raw", headers=WEBSOCKET_UPGRADE)
        assert refused.status_code == 501 and "'server': 'uvicorn'" in refused.text
        assert "left to choose its server and runs granian" in refused.text and "bare ASGI app" in refused.text
        serve.delete("raw")
        serve.run(hello.bind(), name="hello", route_prefix="/hello")
        serve.run(serve.deployment(serve.ingress(make_ws_app)()).options(ray_actor_options={"num_cpus": 0}).bind(),
                  name="built", route_prefix="/")
        assert serve.status().http["server"] == "uvicorn"  # granian answered this app's WebSockets 501 before
        assert echoes(ws_url(client))
        serve.delete("built")
        assert serve.status().http["server"] == "granian"  # moved back: no app has WebSocket routes now
        assert client.get("/hello").text == "hello"
        err = capfd.readouterr().err
        assert err.count("[serve] app 'built' has WebSocket routes") == 1, err
        assert err.count("no app it serves has WebSocket routes any more: moving the HTTP ingress") == 1, err

