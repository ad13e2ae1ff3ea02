"""An ingress whose process dies (starting, or later by a crash) runs again on the other server, on
asyncio's own event loop, and says so."""

from __future__ import annotations

import os
import signal
import time

import pytest
from _shared import output_with
from serve_helpers import serving, wait_until
from starlette.requests import Request

from muster import serve
from muster.serve._internal.controller import ServeController
from muster.serve._internal.ingress import IngressActor

pytestmark = pytest.mark.allow_leftover_workers


class DiesOnGranian(IngressActor):
    """The real ingress, except that its process takes a real SIGSEGV when asked to run granian."""

    def __init__(self, options, table, *rest):
        if options.server == "granian":
            os.kill(os.getpid(), signal.SIGSEGV)
        super().__init__(options, table, *rest)


@serve.deployment(ray_actor_options={"num_cpus": 0.1})
def hello(request: Request) -> str:
    return "hello"


def test_an_ingress_that_dies_at_start_on_granian_serves_on_uvicorn(monkeypatch, capfd):
    monkeypatch.setattr(ServeController, "ingress_class", DiesOnGranian)
    with serving() as client:
        # where it died, from the dead process's own log (relayed by a thread: give it a moment)
        out, err = output_with(capfd, "Fatal Python error: Segmentation fault", timeout=10)
        assert "[serve] the HTTP ingress died while starting on granian (" in err, err
        assert "killed by SIGSEGV" in err and "starting it on uvicorn with asyncio's own event loop" in err, err
        assert "Fatal Python error: Segmentation fault" in out, out
        assert (serve.status().http["server"], serve.status().http["loop"]) == ("uvicorn", "asyncio")
        serve.run(hello.bind(), name="hello", route_prefix="/hello")
        r = client.get("/hello")
        assert r.status_code == 200 and r.text == "hello"


@pytest.mark.parametrize("first,then", [("granian", "uvicorn"), ("uvicorn", "granian")])
def test_an_ingress_that_crashes_while_serving_is_replaced_on_the_other_server(first, then, capfd):
    from muster.serve import api

    with serving(server=first) as client:
        serve.run(hello.bind(), name="hello", route_prefix="/hello")
        port, victim = serve.status().http["port"], api._controller.ingress.pid
        assert (serve.status().http["server"], serve.status().http["loop"]) == (first, "uvloop")
        os.kill(victim, signal.SIGSEGV)  # as a crash inside the server would end it (an OOM kill keeps the server)
        wait_until(lambda: _answer(client, "/hello") == "hello", 30, "an answer from the new ingress")
        wait_until(lambda: serve.status().proxies["ingress"] == "HEALTHY", 30, "the new ingress in the status")
        assert serve.status().http == {"host": "127.0.0.1", "port": port, "server": then, "loop": "asyncio"}
        err = capfd.readouterr().err
        assert (f"[serve] the HTTP ingress crashed (killed by SIGSEGV); starting it on {then} with asyncio's own "
                "event loop instead") in err, err


def _answer(client, path: str) -> str | None:
    import httpx

    try:
        return client.get(path).text
    except httpx.TransportError:
        return None


def test_after_shutdown_handles_fail_at_once_and_lookups_say_nothing_runs():
    """A handle kept past ``serve.shutdown()`` failed only after its timeout (or never, without one)
    with "it is being replaced"; ``get_app_handle`` returned a stale handle."""
    with serving():
        handle = serve.run(hello.bind(), name="hello", route_prefix="/hello")
    t0 = time.monotonic()
    with pytest.raises(serve.exceptions.DeploymentUnavailableError, match="'hello' of app 'hello' is not running"):
        handle.remote(None).result()
    assert time.monotonic() - t0 < 5
    with pytest.raises(serve.RayServeException, match="no Serve app named 'hello' is running here"):
        serve.get_app_handle("hello")

