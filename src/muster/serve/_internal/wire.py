"""The hop between callers (the HTTP ingress, handles) and replicas.

One persistent unix-socket connection per (caller process, replica) carries
many requests at once.  Every frame is a 9-byte header -- payload length,
stream id, kind -- then the payload.  Each request opens a stream (an id the
caller picks); the replica answers on the same id.  Every frame kind is listed
here, with what its payload holds:

caller -> replica
    REQ_HTTP   pickle((scope fields, body bytes))         an HTTP request
    REQ_CALL   pickle((method, args, kwargs, stream))      a handle call
    CANCEL     b""                                          the caller gave up
replica -> caller
    RESP_FULL  pickle((status, headers, body))              a whole HTTP response
    RESP_HEAD  pickle((status, headers))                    a streamed HTTP response starts
    RESP_BODY  raw bytes                                    one chunk of it
    RESP_END   b""                                          stream finished
    RESP_VALUE pickle(value)                                a handle call's return value
    RESP_ITEM  pickle(item)                                 one item of a streaming handle call
    RESP_ERROR pickle(RemoteError)                          the call failed
"""

from __future__ import annotations

import asyncio
import pickle
import struct
from dataclasses import dataclass
from typing import Any, cast

HEADER = struct.Struct("!IIB")
REQ_HTTP, REQ_CALL, CANCEL = 1, 2, 3
RESP_FULL, RESP_HEAD, RESP_BODY, RESP_END, RESP_VALUE, RESP_ITEM, RESP_ERROR = 10, 11, 12, 13, 14, 15, 16


@dataclass(frozen=True)
class RemoteError:
    """A failure inside a replica, as it crosses the socket.

    ``status`` is the HTTP status the ingress answers with; ``exc`` is the
    original exception when it pickles (handles re-raise it), else ``None``.
    """

    status: int
    message: str
    traceback: str = ""
    exc: BaseException | None = None
    headers: tuple[tuple[str, str], ...] = ()


def dumps(obj: Any) -> bytes:
    try:
        return pickle.dumps(obj, protocol=5)
    except (pickle.PicklingError, TypeError, AttributeError):
        import cloudpickle

        return cloudpickle.dumps(obj, protocol=5)


loads = pickle.loads


def frame(stream: int, kind: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(len(payload), stream, kind) + payload


class FrameProtocol(asyncio.Protocol):
    """Splits the byte stream into frames and hands each to :meth:`on_frame`."""

    transport: asyncio.Transport | None = None

    def __init__(self) -> None:
        self._buf = bytearray()
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream connection's transport

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        size = HEADER.size
        pos = 0
        end = len(buf)
        while end - pos >= size:
            n, stream, kind = HEADER.unpack_from(buf, pos)
            if end - pos - size < n:
                break
            start = pos + size
            payload = bytes(buf[start : start + n])
            pos = start + n
            self.on_frame(stream, kind, payload)
        if pos:
            del buf[:pos]

    def send(self, stream: int, kind: int, payload: bytes = b"") -> None:
        t = self.transport
        if t is not None and not self.closed:
            t.write(HEADER.pack(len(payload), stream, kind) + payload)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.on_lost(exc)

    def on_frame(self, stream: int, kind: int, payload: bytes) -> None:
        raise NotImplementedError

    def on_lost(self, exc: Exception | None) -> None:
        pass
