"""An ingress app's ASGI lifespan, in each replica: startup as the replica starts, shutdown as it stops.

This is how a FastAPI ``lifespan=`` function and ``@app.on_event("startup"/"shutdown")`` handlers run, as in
Ray (which runs them in every replica of the ingress deployment). The replica plays the server's part of the
ASGI lifespan protocol: it sends ``lifespan.startup`` (and waits for the app's answer), and at the end
``lifespan.shutdown``. An app that does not speak the protocol (it raises on the ``lifespan`` scope, or
returns at once) runs without one, as the ASGI spec asks of servers.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from muster.serve.exceptions import RayServeException


class AppLifespan:
    """One app's lifespan on the Serve loop. ``state`` is what its lifespan yielded (Starlette's lifespan
    state), copied into every request's scope. Call :meth:`start` once, then :meth:`stop` (any number of times)."""

    def __init__(self, app: Any, where: str):
        self.app, self.where = app, where
        self.state: dict[str, Any] = {}
        self._inbox: asyncio.Queue[dict] = asyncio.Queue()
        self._started: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._stopped: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task: asyncio.Task | None = None

    async def _send(self, message: dict) -> None:
        kind = message.get("type")
        if kind == "lifespan.startup.complete" and not self._started.done():
            self._started.set_result(True)
        elif kind == "lifespan.startup.failed" and not self._started.done():
            self._started.set_exception(RayServeException(
                f"{self.where}: its app's lifespan startup failed (a FastAPI lifespan function or startup "
                f"handler raised):\n{message.get('message', '')}\nFix the startup code; the replica does not "
                "serve until it succeeds."))
        elif kind in ("lifespan.shutdown.complete", "lifespan.shutdown.failed") and not self._stopped.done():
            if kind == "lifespan.shutdown.failed":
                print(f"[serve] {self.where}: its app's lifespan shutdown failed:\n{message.get('message', '')}",
                      file=sys.stderr, flush=True)
            self._stopped.set_result(None)

    async def _run(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": self.state}
        try:
            await self.app(scope, self._inbox.get, self._send)
        except BaseException:  # noqa: BLE001 - before startup: no lifespan support; after: its failure was sent
            pass
        finally:
            if not self._started.done():  # returned or raised without answering: the app has no lifespan
                self._started.set_result(False)
            if not self._stopped.done():
                self._stopped.set_result(None)

    async def start(self) -> None:
        """Run the app's startup; raises ``RayServeException`` (with the app's traceback) when it fails."""
        self._inbox.put_nowait({"type": "lifespan.startup"})
        self._task = asyncio.ensure_future(self._run())
        await self._started

    async def stop(self, timeout_s: float) -> None:
        """Run the app's shutdown, waiting at most ``timeout_s`` for it."""
        if self._task is None or self._task.done() or self._started.exception() or not self._started.result():
            return
        self._inbox.put_nowait({"type": "lifespan.shutdown"})
        try:
            await asyncio.wait_for(asyncio.shield(self._stopped), timeout_s)
        except asyncio.TimeoutError:
            print(f"[serve] {self.where}: its app's lifespan shutdown took over {timeout_s:.1f} s; stopping it.",
                  file=sys.stderr, flush=True)
            self._task.cancel()


async def started(app: Any, where: str) -> AppLifespan:
    """``app``'s lifespan, its startup done (made on the Serve loop, which its futures belong to)."""
    lifespan = AppLifespan(app, where)
    await lifespan.start()
    return lifespan
