"""``@serve.ingress(fastapi_app)``: a FastAPI app whose routes are methods of the deployment class."""

from __future__ import annotations

import copyreg
import inspect
from typing import Any

_DOCS_PATHS = ("/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc")


def bind_routes(app: Any, cls: type, instance: Any) -> Any:
    """Return a copy of ``app`` whose routes defined on ``cls`` call ``instance``'s bound methods; any other ASGI
    app (a Starlette one, a bare callable) as it is, as Ray serves it.

    Routes of routers the app includes (``app.include_router``, with their prefixes, tags and dependencies) are
    kept; those among them that are ``cls``'s methods are bound too. The copy runs the app's lifespan and its
    startup/shutdown handlers (the replica drives them, see :mod:`asgi_lifespan`)."""
    try:
        from fastapi import FastAPI
    except ImportError:  # no FastAPI installed: no FastAPI app either
        return app
    if not isinstance(app, FastAPI):
        return app

    bound = FastAPI(
        title=app.title, version=app.version, openapi_url=app.openapi_url, docs_url=app.docs_url,
        redoc_url=app.redoc_url, exception_handlers=dict(app.exception_handlers),
    )
    bound.user_middleware = list(app.user_middleware)
    bound.state = app.state
    bound.router.lifespan_context = app.router.lifespan_context  # runs the app's own on_startup handlers too
    _bind_into(bound.router, app.router.routes, _Methods(cls), instance, top=True)
    return bound


class _Methods:
    """Which route endpoints are methods of the deployment class, and the bound method each route calls."""

    def __init__(self, cls: type):
        self.by_id: dict[int, str] = {}  # the functions the class (and its bases) has, with their attribute names
        for klass in reversed(cls.__mro__[:-1]):  # a subclass's override wins; not object's
            for name, value in vars(klass).items():
                fn = getattr(value, "__func__", value)
                if inspect.isfunction(fn):
                    self.by_id[id(fn)] = name
        self.qualnames = {klass.__qualname__ for klass in cls.__mro__[:-1]}

    def of(self, endpoint: Any) -> bool:
        """Whether ``endpoint`` is the class's: one it has, or one written in its body under a name a later
        ``def`` took (Ray's guide routes ``GET /`` and ``POST /{subpath}`` to two methods named ``root``, and Ray
        finds a class's routes by their qualified name)."""
        if id(endpoint) in self.by_id:
            return True
        owner, _, name = getattr(endpoint, "__qualname__", "").rpartition(".")
        return inspect.isfunction(endpoint) and owner in self.qualnames and name == endpoint.__name__

    def bound(self, endpoint: Any, instance: Any) -> Any:
        """What the route calls: ``instance``'s method of that name, or the shadowed function bound to it."""
        name = self.by_id.get(id(endpoint))
        return getattr(instance, name) if name is not None else endpoint.__get__(instance, type(instance))


def _bind_into(router: Any, routes: list[Any], methods: _Methods, instance: Any, top: bool = False) -> None:
    """Add ``routes`` to ``router``: those whose endpoint is one of the class's ``methods`` calling ``instance``'s
    bound method, the rest as they are (but the docs routes of the ``top`` app, which ``router``'s own app
    serves)."""
    from fastapi.routing import APIRoute, APIWebSocketRoute

    for route in routes:
        endpoint = getattr(route, "endpoint", None)
        mine = methods.of(endpoint)
        if mine and isinstance(route, APIWebSocketRoute):
            router.add_api_websocket_route(route.path, methods.bound(endpoint, instance), name=route.name,
                                           dependencies=route.dependencies)
        elif mine and isinstance(route, APIRoute):
            router.add_api_route(
                route.path, methods.bound(endpoint, instance), methods=sorted(route.methods or ()),
                response_model=route.response_model, status_code=route.status_code, name=route.name,
                response_class=route.response_class, dependencies=route.dependencies, summary=route.summary,
                tags=route.tags,
            )
        elif hasattr(route, "original_router") and hasattr(route, "include_context"):
            router.routes.append(_bound_include(route, methods, instance))
        elif not (top and getattr(route, "path", None) in _DOCS_PATHS):
            router.routes.append(route)


def _bound_include(included: Any, methods: _Methods, instance: Any) -> Any:
    """An ``app.include_router(router)`` entry (FastAPI's ``_IncludedRouter``: the router and how it was
    included), as it is when no route under it is the class's; else the same inclusion of a copy of the router
    whose class routes are bound to ``instance``."""
    if not _has_class_routes(included.original_router.routes, methods):
        return included
    from fastapi import APIRouter

    copy = APIRouter()
    _bind_into(copy, included.original_router.routes, methods, instance)
    return type(included)(original_router=copy, include_context=included.include_context)


def _has_class_routes(routes: list[Any], methods: _Methods) -> bool:
    for route in routes:
        if hasattr(route, "original_router"):
            if _has_class_routes(route.original_router.routes, methods):
                return True
        elif methods.of(getattr(route, "endpoint", None)):
            return True
    return False


def register_pickling() -> None:
    """Tell ``copyreg`` how FastAPI's ``_IncludedRouter`` (what ``app.include_router`` adds) pickles: as its
    router and inclusion, leaving out its lock and route caches (rebuilt on first use). Without it a class whose
    FastAPI app includes a router cannot be sent to its replicas by value."""
    try:
        from fastapi import routing
    except ImportError:
        return
    included = getattr(routing, "_IncludedRouter", None)  # FastAPI >= 0.13x; older ones copy the routes in
    if included is not None:
        copyreg.pickle(included, _reduce_included)


def _reduce_included(included: Any) -> tuple:
    return type(included), (included.original_router, included.include_context)
