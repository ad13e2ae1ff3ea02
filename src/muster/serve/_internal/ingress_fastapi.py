"""``@serve.ingress(fastapi_app)``: a FastAPI app whose routes are methods of the deployment class."""

from __future__ import annotations

from typing import Any


def bind_routes(app: Any, cls: type, instance: Any) -> Any:
    """Return a copy of ``app`` whose routes defined on ``cls`` call ``instance``'s bound methods; any other ASGI
    app (a Starlette one, a bare callable) as it is, as Ray serves it."""
    try:
        from fastapi import FastAPI
        from fastapi.routing import APIRoute, APIWebSocketRoute
    except ImportError:  # no FastAPI installed: no FastAPI app either
        return app
    if not isinstance(app, FastAPI):
        return app

    prefix = cls.__qualname__ + "."
    bound = FastAPI(
        title=app.title, version=app.version, openapi_url=app.openapi_url, docs_url=app.docs_url,
        redoc_url=app.redoc_url, exception_handlers=dict(app.exception_handlers),
    )
    bound.user_middleware = list(app.user_middleware)
    bound.state = app.state
    routes: list[Any] = app.router.routes
    for route in routes:
        endpoint = getattr(route, "endpoint", None)
        name = getattr(endpoint, "__name__", "")
        mine = endpoint is not None and getattr(endpoint, "__qualname__", "").startswith(prefix)
        if mine and isinstance(route, APIWebSocketRoute):
            bound.router.add_api_websocket_route(route.path, getattr(instance, name), name=route.name,
                                                 dependencies=route.dependencies)
        elif mine and isinstance(route, APIRoute):
            method = getattr(instance, name)
            bound.router.add_api_route(
                route.path, method, methods=sorted(route.methods or ()), response_model=route.response_model,
                status_code=route.status_code, name=route.name, response_class=route.response_class,
                dependencies=route.dependencies, summary=route.summary, tags=route.tags,
            )
        elif route.path not in ("/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"):
            bound.router.routes.append(route)
    return bound
