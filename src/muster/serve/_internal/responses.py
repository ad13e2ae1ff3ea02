"""What a replica sends back for what the user's code returned.

A dict (any Mapping)/list/tuple/number becomes JSON, ``str`` text, ``bytes`` raw, a Starlette
``Response`` (``StreamingResponse`` included) runs as the ASGI app it is, and
a generator streams its chunks.  Errors become a :class:`wire.RemoteError`
with the HTTP status the ingress answers with.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import decimal
import enum
import inspect
import json
import os
import pathlib
import traceback
import uuid
from collections.abc import Mapping
from typing import Any, MutableMapping

from muster.exceptions import InvalidTypeError, TaskError
from muster.serve._internal import wire

_JSON_HEAD = wire.http_head(200, [(b"content-type", b"application/json")])
_TEXT_HEAD = wire.http_head(200, [(b"content-type", b"text/plain; charset=utf-8")])
_BYTES_HEAD = wire.http_head(200, [(b"content-type", b"application/octet-stream")])


def _jsonable(value: Any) -> Any:
    """What JSON writes for a value ``json`` does not know, as Ray Serve's encoder does (FastAPI's
    ``jsonable_encoder`` with numpy and pandas added): arrays and numpy scalars as numbers, a DataFrame as
    its records, dates and times in ISO 8601, sets as lists, an exception as its message. Anything else
    fails naming its type and the fix."""
    kind = type(value)
    module = kind.__module__.partition(".")[0]
    if module == "numpy":
        if hasattr(value, "tolist"):  # ndarray, and numpy scalars (np.float32(0.5).tolist() is 0.5)
            return value.tolist()
    elif module == "pandas" and hasattr(value, "to_dict"):
        return value.to_dict(orient="records") if kind.__name__ == "DataFrame" else value.to_dict()
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, (set, frozenset, collections.deque)):
        return list(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (uuid.UUID, pathlib.PurePath)):
        return str(value)
    if isinstance(value, BaseException):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    dump = getattr(value, "model_dump", None)  # pydantic models
    if callable(dump) and not isinstance(value, type):
        return dump(mode="json")
    raise _NotJSON(value)


class _NotJSON(InvalidTypeError):
    """A value in a response that has no JSON form; ``value`` is it."""

    def __init__(self, value: Any):
        kind = type(value)
        super().__init__(
            f"the response holds a {kind.__module__}.{kind.__qualname__} ({value!r:.80}), which has no JSON form: "
            "return dicts, lists, str, numbers, numpy arrays, datetimes, pydantic models... or a starlette "
            "Response you encode yourself."
        )
        self.value = value


_json = json.JSONEncoder(separators=(",", ":"), default=_jsonable).encode


def simple_body(result: Any) -> bytes | None:
    """The RESP_FULL payload for a plain value, or ``None`` when it needs the ASGI path (as Ray's:
    ``None`` is an empty text body, a str text, bytes as they are, other values JSON)."""
    if result is None:
        return _TEXT_HEAD
    if isinstance(result, (dict, list, tuple, int, float, bool)):
        return _JSON_HEAD + _json(result).encode()
    if isinstance(result, Mapping):  # Starlette's QueryParams/Headers and other read-only mappings, as Ray
        return _JSON_HEAD + _json(dict(result)).encode()
    if isinstance(result, str):
        return _TEXT_HEAD + result.encode()
    if isinstance(result, (bytes, bytearray, memoryview)):
        return _BYTES_HEAD + bytes(result)
    if is_stream(result) or _is_response(result):
        return None
    try:
        return _JSON_HEAD + _json(result).encode()  # an array, a DataFrame, a datetime, a pydantic model...
    except _NotJSON as exc:
        if exc.value is result:
            return None  # no response at all: the caller says what is one
        raise


def _is_response(result: Any) -> bool:
    """Whether ``result`` is a Starlette ``Response`` (without importing Starlette for every reply)."""
    return any(k.__name__ == "Response" and k.__module__.startswith("starlette") for k in type(result).__mro__)


def chunk_bytes(item: Any) -> bytes:
    if isinstance(item, (bytes, bytearray, memoryview)):
        return bytes(item)
    if isinstance(item, str):
        return item.encode()
    return _json(item).encode()


def is_stream(result: Any) -> bool:
    return inspect.isgenerator(result) or inspect.isasyncgen(result)


def error_for(exc: BaseException, where: str) -> wire.RemoteError:
    """The RemoteError for an exception raised by user code (its own HTTP status when it chose one). A
    handle re-raises its ``exc``: a ``TaskError`` carrying the original, as Ray's ``RayTaskError``."""
    from starlette.exceptions import HTTPException

    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if isinstance(exc, HTTPException):
        headers = tuple((str(k), str(v)) for k, v in (exc.headers or {}).items())
        return wire.RemoteError(exc.status_code, str(exc.detail), "", _task_error(exc, where), headers)
    err = _task_error(exc, where)
    kind, text = (err.cause_type.rpartition(".")[2], err.message) if isinstance(exc, TaskError) else (
        type(exc).__name__, str(exc))  # a downstream replica's error, passed on: its own type and message
    return wire.RemoteError(500, f"{where} raised {kind}: {text}", tb, err)


def _task_error(exc: BaseException, where: str) -> TaskError:
    """``exc`` as it crosses to a handle's caller: a ``TaskError`` naming ``where``, which the caller raises as
    an instance of ``exc``'s class too (a downstream call's error passed on: of its original class)."""
    from muster.core.local.wire import capture_error

    return capture_error(exc, where, os.getpid(), "")


class FrameSender:
    """An ASGI ``send`` that turns response messages into frames on one stream."""

    __slots__ = ("_conn", "_send", "_stream", "_start", "state")

    def __init__(self, conn: Any, stream: int):
        self._conn, self._send, self._stream = conn, conn.send, stream  # a replica's connection (_Conn)
        self._start: tuple[int, list] = (200, [])
        self.state = 0  # 0: nothing sent, 1: head sent, 2: finished

    @property
    def status(self) -> int:
        """The HTTP status the response started with (200 until it says)."""
        return self._start[0]

    async def __call__(self, message: MutableMapping[str, Any]) -> None:
        t = message["type"]
        if t == "http.response.start":
            self._start = (message["status"], list(message.get("headers") or ()))
            return
        if t != "http.response.body" or self.state == 2:
            return
        body = message.get("body", b"")
        more = message.get("more_body", False)
        if self.state == 0 and not more:
            status, headers = self._start
            self._send(self._stream, wire.RESP_FULL, wire.http_response(status, headers, bytes(body)))
            self.state = 2
            return
        if self.state == 0:
            self._send(self._stream, wire.RESP_HEAD, wire.dumps(self._start))
            self.state = 1
        if body:
            await self._conn.send_chunk(self._stream, wire.RESP_BODY, bytes(body))
        if not more:
            self._send(self._stream, wire.RESP_END, b"")
            self.state = 2
