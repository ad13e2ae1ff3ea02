"""Which server the HTTP ingress runs on, when the user left ``http_options.server`` out.

Granian's RSGI interface is the fastest here for HTTP, but cannot relay WebSockets faithfully (see
``ingress_rsgi.websocket_refusal``); uvicorn serves both.  So an ingress left to choose starts on
granian, or on uvicorn when the first app it serves has WebSocket routes, and a granian one moves to
uvicorn (``ServeController`` does it) when such an app is deployed later.  A server the user named
is kept whatever the apps: then an upgrade on granian gets the 501 that names the fix.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from muster.serve.config import HTTPOptions

DEFAULT = "granian"
WEBSOCKETS = "uvicorn"


def resolve(options: HTTPOptions, websockets: bool) -> HTTPOptions:
    """``options`` with a server named: the user's, else the one that serves the apps (``websockets``: some
    app has WebSocket routes)."""
    if options.server is not None:
        return options
    return dataclasses.replace(options, server=WEBSOCKETS if websockets else DEFAULT)


def serves_websockets(target: Any) -> bool:
    """Whether a deployment's class serves WebSocket routes over HTTP: a ``@serve.ingress`` Starlette/FastAPI
    app with an ``@app.websocket`` route (also under a mounted sub-app).  An app built by a factory in each
    replica, or a bare ASGI callable, cannot be looked into here: False (the user chooses uvicorn)."""
    app = getattr(target, "__serve_asgi_app__", None)
    return app is not None and _has_websocket_route(getattr(app, "routes", None), 0)


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
    return False


def moving_message(app: str, host: str, port: int) -> str:
    """The one line said when a granian ingress moves to uvicorn."""
    return (f"[serve] app {app!r} has WebSocket routes, which the granian ingress cannot serve: moving the HTTP "
            f"ingress on {host}:{port} to uvicorn (granian finishes its in-flight requests first; name the server "
            "with http_options={'server': 'granian'|'uvicorn'} to keep one).")
