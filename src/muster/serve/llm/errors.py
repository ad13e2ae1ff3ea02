"""Errors of the LLM server, each carrying the HTTP status and OpenAI error type it maps to.

The OpenAI wire format puts every failure in one JSON shape,
``{"error": {"message", "type", "param", "code"}}``; :func:`error_body` writes
it from any of these classes, so the status and type are decided in one place.
"""

from __future__ import annotations

from typing import Any

from muster.exceptions import MusterError


class LLMConfigError(MusterError, ValueError):
    """An ``LLMConfig`` (or the engine it names) was given a bad value."""


class LLMRequestError(MusterError):
    """Base of the errors one OpenAI request can end in.

    Attributes:
        status: the HTTP status code to answer with.
        type: OpenAI's ``error.type`` string.
        param: the request field at fault, when there is one.
        code: OpenAI's ``error.code`` string, when there is one.
    """

    status = 500
    type = "internal_server_error"

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.param = param
        self.code = code

    def __reduce__(self) -> Any:
        return (type(self), (self.args[0], self.param, self.code))


class InvalidRequestError(LLMRequestError, ValueError):
    """The request is malformed or asks for something the model cannot do (400)."""

    status = 400
    type = "invalid_request_error"


class ModelNotFoundError(LLMRequestError, LookupError):
    """The request names a model this app does not serve (404)."""

    status = 404
    type = "invalid_request_error"

    def __init__(self, message: str, param: str | None = "model", code: str | None = "model_not_found"):
        super().__init__(message, param, code)


class EngineOverloadedError(LLMRequestError):
    """The engine's queue is full; the client should retry later (503)."""

    status = 503
    type = "service_unavailable_error"


class EngineError(LLMRequestError):
    """The engine failed while generating (500)."""

    status = 500
    type = "internal_server_error"


def error_body(error: LLMRequestError) -> dict[str, Any]:
    """OpenAI's JSON error object for ``error``."""
    return {"error": {"message": str(error), "type": error.type, "param": error.param, "code": error.code}}
