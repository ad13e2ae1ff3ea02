"""The OpenAI ``/v1`` routes: a small routing table over per-model callers, as an ASGI app or a Serve app.

:class:`OpenAIRouter` maps ``(method, path)`` to plain functions and turns the
parts an :class:`~muster.serve.llm.server.LLMServer` yields into an HTTP
response. Where the parts come from is a *caller* per model id: an in-process
``LLMServer.handle`` (:func:`openai_asgi_app`, for uvicorn/granian without
Serve) or a Serve deployment handle (:func:`build_openai_app`).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from muster.serve.llm import protocol as p
from muster.serve.llm.config import LLMConfig
from muster.serve.llm.errors import (
    EngineError,
    EngineOverloadedError,
    LLMConfigError,
    InvalidRequestError,
    LLMRequestError,
    ModelNotFoundError,
    error_body,
)
from muster.serve.llm.server import ResponseHead

Caller = Callable[[str, Any], AsyncIterator[Any]]  # (route, body) -> ResponseHead, then body strings

_POST_ROUTES = ("chat/completions", "completions", "embeddings")


def model_card(config: LLMConfig, created: int) -> dict[str, Any]:
    """``/v1/models`` entry of one configured model."""
    return p.ModelCard(id=config.model_id, created=created, root=config.model_source).model_dump()


class OpenAIRouter:
    """Answers OpenAI ``/v1`` requests by routing on path and on the body's ``model``.

    Args:
        cards: model id -> its ``/v1/models`` entry, in listing order.
        callers: model id -> the function that answers that model's requests.
    """

    def __init__(self, cards: Mapping[str, dict[str, Any]], callers: Mapping[str, Caller]):
        self.cards = dict(cards)
        self.callers = dict(callers)

    async def __call__(self, request: Any) -> Any:
        """Answer a starlette ``Request`` with a starlette ``Response``."""
        path = request.url.path
        route = path.split("/v1/", 1)[1].strip("/") if "/v1/" in path else path.strip("/")
        try:
            if request.method == "GET" and route == "models":
                return _json(200, p.ModelList(data=[p.ModelCard(**c) for c in self.cards.values()]).model_dump())
            if request.method == "GET" and route.startswith("models/"):
                return _json(200, self._card(route.removeprefix("models/")))
            if request.method == "GET" and route in ("health", ""):
                return _json(200, {"status": "ok", "models": list(self.cards)})
            if request.method == "POST" and route in _POST_ROUTES:
                return await self._generate(route, request)
            raise ModelNotFoundError(f"no route {request.method} {path}; this server answers GET /v1/models, "
                                     f"GET /v1/models/{{id}} and POST /v1/{{{','.join(_POST_ROUTES)}}}",
                                     param=None, code="not_found")
        except LLMRequestError as exc:
            return _json(exc.status, error_body(exc))

    def _card(self, model: str) -> dict[str, Any]:
        if model not in self.cards:
            raise ModelNotFoundError(f"The model `{model}` does not exist. Models served here: {sorted(self.cards)}.")
        return self.cards[model]

    async def _generate(self, route: str, request: Any) -> Any:
        try:
            body = json.loads(await request.body() or b"null")
        except ValueError as exc:
            raise InvalidRequestError(f"the request body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise InvalidRequestError(p.body_not_an_object(body))
        model = body.get("model")
        if not isinstance(model, str):
            raise InvalidRequestError(f"`model` must name one of {sorted(self.cards)}, got {model!r}", param="model")
        self._card(model)
        parts = self.callers[model](route, body)
        try:
            head = await anext(aiter(parts))
        except Exception as exc:
            await _close(parts)
            raise _transport_error(exc, model) from None
        if not isinstance(head, ResponseHead):
            await _close(parts)
            raise EngineError(f"model {model!r} answered {head!r} where a response head was expected")
        if head.streaming:
            from starlette.responses import StreamingResponse

            return StreamingResponse(_body(parts), status_code=head.status, media_type="text/event-stream",
                                     headers={"cache-control": "no-cache"})
        from starlette.responses import Response

        text = "".join([part async for part in _body(parts)])
        return Response(text, status_code=head.status, media_type="application/json")


async def _body(parts: AsyncIterator[Any]) -> AsyncIterator[str]:
    """The body strings after the head; closing it (client gone) closes the model's stream too."""
    try:
        async for part in parts:
            yield part
    finally:
        await _close(parts)


async def _close(parts: Any) -> None:
    aclose = getattr(parts, "aclose", None)
    if aclose is not None:
        await aclose()
    elif hasattr(parts, "cancel"):
        parts.cancel()


def _transport_error(exc: Exception, model: str) -> LLMRequestError:
    if isinstance(exc, LLMRequestError):
        return exc
    if type(exc).__name__ == "BackPressureError":
        return EngineOverloadedError(f"model {model!r} is overloaded: {exc}", code="overloaded")
    return EngineError(f"model {model!r} failed: {type(exc).__name__}: {exc}")


def _json(status: int, body: Any) -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse(body, status_code=status)


def _check_unique(configs: Sequence[LLMConfig]) -> None:
    ids = [c.model_id for c in configs]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise LLMConfigError(f"model ids {dupes} appear in more than one llm_config; give each model its own model_id")


def openai_asgi_app(servers: Sequence[Any]) -> Any:
    """A Starlette app serving the OpenAI routes for in-process ``LLMServer`` objects (no Serve needed).

    Run it with any ASGI server (uvicorn, granian). The caller owns the servers and
    shuts them down.
    """
    from starlette.applications import Starlette
    from starlette.routing import Route

    _check_unique([s.config for s in servers])
    router = OpenAIRouter({s.model_id: s.model_card() for s in servers}, {s.model_id: s.handle for s in servers})

    async def endpoint(request: Any) -> Any:
        return await router(request)

    # every method reaches the router, so a wrong one gets OpenAI's error shape (as under Serve), not Starlette's
    # plain-text 405
    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
    return Starlette(routes=[Route("/{path:path}", endpoint, methods=methods)])


def deployment_name(model_id: str) -> str:
    """The Serve deployment name of a model's ``LLMServer``."""
    return "LLMServer:" + re.sub(r"[^A-Za-z0-9_.-]", "_", model_id)
