"""Which server the HTTP ingress runs on, when the user left ``http_options.server`` out.

Granian's RSGI interface is the fastest here for HTTP, but cannot relay WebSockets faithfully (see
``ingress_rsgi.websocket_refusal``); uvicorn serves both.  So an ingress left to choose starts on
granian, or on uvicorn when the first app it serves has WebSocket routes; a granian one moves to
uvicorn when such an app is deployed later, and back to granian once no app it serves may have any
(:func:`follow_apps` decides, :func:`move_ingress` moves).  Whether an app has them is
read from its app as the driver sees it and, unless that says yes, as a replica built it (routes a
factory or ``__init__`` adds); an app neither can look into (a bare ASGI callable, one wrapped in
middleware) is "unknown": it neither moves the ingress to uvicorn nor lets it move back.  A server the
user named is kept whatever the apps: then an upgrade on granian gets the 501 that names the fix.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING, Any, Callable

from muster.serve._internal import ingress_life
from muster.serve.config import HTTPOptions

if TYPE_CHECKING:
    from muster.serve._internal.controller import ServeController
    from muster.serve._internal.state import DeploymentState

DEFAULT = "granian"
WEBSOCKETS = "uvicorn"


def resolve(options: HTTPOptions, websockets: bool) -> HTTPOptions:
    """``options`` with a server named: the user's, else the one that serves the apps (``websockets``: some
    app has WebSocket routes)."""
    if options.server is not None:
        return options
    return dataclasses.replace(options, server=WEBSOCKETS if websockets else DEFAULT)


def serves_websockets(target: Any) -> bool:
    """Whether a deployment's class is seen to serve WebSocket routes over HTTP: a ``@serve.ingress``
    Starlette/FastAPI app with a WebSocket route (also under a mounted sub-app)."""
    return app_websockets(getattr(target, "__serve_asgi_app__", None)) is True


def app_websockets(app: Any) -> bool | None:
    """Whether an ingress's ASGI app has WebSocket routes; None when its routes cannot be read (a bare ASGI
    callable, an app wrapped in middleware, a factory not yet called). No app (a plain deployment): False."""
    if app is None:
        return False
    routes = getattr(app, "routes", None)
    return _has_websocket_route(routes, 0) if isinstance(routes, list) else None


def websockets_of(route_prefix: str | None, target: Any, ask_replica: Callable[[], bool | None]) -> bool | None:
    """Whether an app serves WebSockets over HTTP: never without a route prefix; yes when its ingress class's
    app shows such a route; else what a replica says of the app it built (``ask_replica``)."""
    if route_prefix is None:
        return False
    return True if serves_websockets(target) else ask_replica()


def wanted(server: str, moved_for_websockets: bool, apps: list[bool | None]) -> str | None:
    """The server to move an ingress left to choose to, given each app's :func:`websockets_of` (None: stay).
    Back to granian only from a move this made (not from a crash's fallback), once every app is known to
    have no WebSocket routes."""
    if server == DEFAULT and any(w is True for w in apps):
        return WEBSOCKETS
    if server == WEBSOCKETS and moved_for_websockets and all(w is False for w in apps):
        return DEFAULT
    return None


def _has_websocket_route(routes: Any, depth: int) -> bool:
    if not isinstance(routes, list) or depth > 8:
        return False
    try:
        from starlette.routing import WebSocketRoute
    except ImportError:  # no Starlette: no Starlette app either
        return False
    for route in routes:
        if isinstance(route, WebSocketRoute):
            return True
        if _has_websocket_route(getattr(route, "routes", None), depth + 1):  # Mount and Host: a sub-app's routes
            return True
        included = getattr(route, "original_router", None)  # FastAPI's app.include_router(router)
        if included is not None and _has_websocket_route(getattr(included, "routes", None), depth + 1):
            return True
    return False


def moving_message(app: str | None, server: str, host: str, port: int) -> str:
    """The one line said when an ingress left to choose moves (``app``: the app deployed that made it)."""
    if server == WEBSOCKETS:
        why = f"app {app!r} has WebSocket routes, which the granian ingress cannot serve"
    else:
        why = "no app it serves has WebSocket routes any more"
    return (f"[serve] {why}: moving the HTTP ingress on {host}:{port} to {server} (the "
            f"{'granian' if server == WEBSOCKETS else 'uvicorn'} one finishes its in-flight requests first; name "
            "the server with http_options={'server': 'granian'|'uvicorn'} to keep one).")


def follow_apps(ctl: "ServeController", name: str | None = None) -> None:
    """Keep an ingress the user left to choose on the server its apps need (:func:`wanted`): uvicorn while
    one serves WebSockets over HTTP, granian again once none may. ``name``: the app just deployed, whose
    routes are read first."""
    if ctl.chosen or not ctl.proxy:
        return
    with ctl.lock:
        app = ctl.apps.get(name) if name is not None else None
    if app is not None:
        d = app.deployments.get(app.ingress)
        app.websockets = websockets_of(
            app.route_prefix, d.plan.target if d is not None else None, lambda: _replica_websockets(d))
    with ctl.lock:
        seen = [a.websockets for a in ctl.apps.values()]
    server = wanted(ctl.options.server or DEFAULT, ctl.moved_for_websockets, seen)
    if server is not None:
        move_ingress(ctl, server, name)


def _replica_websockets(d: "DeploymentState | None") -> bool | None:
    """Whether the app a running replica of ``d`` built has WebSocket routes (None: unknown, or no replica)."""
    if d is None:
        return None
    actors = [r.actor for r in d.running() if r.actor is not None]
    if not actors:  # none running (scaled to zero): what the driver sees
        return app_websockets(getattr(d.plan.target, "__serve_asgi_app__", None))
    try:
        return actors[0].call("websocket_routes").result(10)
    except Exception:  # noqa: BLE001 - dying or slow: unknown, the ingress stays where it is
        return None


def move_ingress(ctl: "ServeController", server: str, app: str | None) -> None:
    """Start an ingress on ``server`` beside the running one on the same port (both bind with ``SO_REUSEPORT``),
    then stop the old one gracefully: it stops listening and finishes its in-flight requests (up to the longest
    ``graceful_shutdown_timeout_s``, at least 5 s), so no request is refused or cut on the way."""
    with ctl.ingress_lock:
        if ctl.options.server == server or ctl._stop.is_set():
            return  # another deploy moved it meanwhile, or Serve is shutting down
        print(moving_message(app, server, ctl.host, ctl.port), file=sys.stderr, flush=True)
        before, ctl.options = ctl.options, dataclasses.replace(ctl.options, server=server)
        new: Any = None
        try:
            new = ingress_life.start(ctl, dataclasses.replace(ctl.options, port=ctl.port))
            new.call("address").result(30)
        except Exception as exc:  # noqa: BLE001 - the old one serves on; said, with what to do
            ctl.options = before
            if new is not None and ctl.local:
                ctl.runtime.kill(new, grace_s=1.0)
            print(f"[serve] {server} did not start ({type(exc).__name__}: {exc}); the {before.server} ingress "
                  f"serves on{' and refuses WebSockets (501)' if server == WEBSOCKETS else ''}. Name the server: "
                  f"http_options={{'server': {server!r}}}.", file=sys.stderr, flush=True)
            return
        ctl.moved_for_websockets = server == WEBSOCKETS
        old, ctl.ingress = ctl.ingress, new
        with ctl.lock:
            grace = max([5.0] + [d.plan.config.graceful_shutdown_timeout_s for a in ctl.apps.values()
                                 for d in a.deployments.values()])
        try:
            old.call("stop", grace).result(grace + 5)
        except BaseException:  # noqa: BLE001 - it is killed next anyway
            pass
        if ctl.local:
            ctl.runtime.kill(old, grace_s=1.0)
    ctl._push()  # whatever changed while it started
