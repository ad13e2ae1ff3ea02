"""What a replica sends back for what the user's code returned.

A dict (any Mapping)/list/tuple/number becomes JSON, ``str`` text, ``bytes`` raw, a Starlette
``Response`` (``StreamingResponse`` included) runs as the ASGI app it is, and
a generator streams its chunks.  Errors become a :class:`wire.RemoteError`
with the HTTP status the ingress answers with.
"""

from __future__ import annotations

import inspect
import json
import traceback
from collections.abc import Mapping
from typing import Any, MutableMapping

from muster.serve._internal import wire

_JSON_HEAD = wire.http_head(200, [(b"content-type", b"application/json")])
_TEXT_HEAD = wire.http_head(200, [(b"content-type", b"text/plain; charset=utf-8")])
_BYTES_HEAD = wire.http_head(200, [(b"content-type", b"application/octet-stream")])
_json = json.JSONEncoder(separators=(",", ":")).encode


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
    dump = getattr(result, "model_dump", None)  # pydantic models
    if callable(dump) and not isinstance(result, type):
        return _JSON_HEAD + _json(dump(mode="json")).encode()
    return None


def chunk_bytes(item: Any) -> bytes:
    if isinstance(item, (bytes, bytearray, memoryview)):
        return bytes(item)
    if isinstance(item, str):
        return item.encode()
    return json.dumps(item, separators=(",", ":")).encode()


def is_stream(result: Any) -> bool:
    return inspect.isgenerator(result) or inspect.isasyncgen(result)


def error_for(exc: BaseException, where: str) -> wire.RemoteError:
    """The RemoteError for an exception raised by user code (its own HTTP status when it chose one)."""
    from starlette.exceptions import HTTPException

    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if isinstance(exc, HTTPException):
        headers = tuple((str(k), str(v)) for k, v in (exc.headers or {}).items())
        return wire.RemoteError(exc.status_code, str(exc.detail), "", _picklable(exc), headers)
    message = f"{where} raised {type(exc).__name__}: {exc}"
    return wire.RemoteError(500, message, tb, _picklable(exc))


def _picklable(exc: BaseException) -> BaseException | None:
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return None


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
