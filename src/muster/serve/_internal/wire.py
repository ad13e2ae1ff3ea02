"""The hop between callers (the HTTP ingress, handles) and replicas.

One persistent unix-socket connection per (caller process, replica) carries
many requests at once.  Every frame is a 9-byte header -- payload length,
stream id, kind -- then the payload.  Each request opens a stream (an id the
caller picks); the replica answers on the same id.  Every frame kind is listed
here, with what its payload holds:

caller -> replica
    REQ_HTTP   u32 n, pickle(scope fields) (n bytes), body  an HTTP request (see :func:`http_request`)
    REQ_CALL   pickle((method, args, kwargs, stream))      a handle call
    CANCEL     b""                                          the caller gave up
    CREDIT     b""                                          it took CREDIT_EVERY more chunks of a stream
    MODELS     b""                                          which models do you hold? (answered with RESP_VALUE)
    REQ_WS     as REQ_HTTP, no body                         a WebSocket connection opens (see websocket.py)
replica -> caller
    RESP_FULL  u16 status, u32 n, header block, body        a whole HTTP response (see :func:`http_response`)
    RESP_HEAD  pickle((status, headers))                    a streamed HTTP response starts
    RESP_BODY  raw bytes                                    one chunk of it
    RESP_END   b""                                          stream finished
    RESP_VALUE pickle(value)                                a handle call's return value
    RESP_ITEM  pickle(item)                                 one item of a streaming handle call
    RESP_ERROR pickle(RemoteError)                          the call failed
    MODELS     pickle(tuple of model ids), on stream 0      the multiplexed models it holds now (after each change)
    WS_ACCEPT  pickle((subprotocol, headers))               the WebSocket handler accepted the connection
both ways, on a WebSocket's stream
    WS_TEXT    utf-8 text                                   one text message
    WS_BYTES   raw bytes                                    one binary message
    WS_CLOSE   u16 code, utf-8 reason                       closed: by the client (to the replica) or the handler
                                                            (to the caller; before WS_ACCEPT it refuses the upgrade)
    CREDIT     b""                                          the other side took CREDIT_EVERY more messages

Streams are flow-controlled: a replica sends at most ``STREAM_WINDOW`` chunks
(``RESP_BODY`` or ``RESP_ITEM``) beyond what the caller has taken, and the
caller sends a ``CREDIT`` each time it has taken ``CREDIT_EVERY`` more, so a
slow client pauses the generator instead of filling the ingress's memory.
A WebSocket's messages are flow-controlled the same way in both directions.

HTTP request bodies and response bodies travel raw after a small binary head
(no pickling of the body); a header block is ``name\0value\0...`` in latin-1
(HTTP header names and values never hold NUL), which both ingress flavours
turn into their header lists with one split.  Frames are not written one by
one: :meth:`FrameProtocol.send` queues them and one write per loop turn
carries every frame queued in it (many concurrent requests share a syscall).
"""

from __future__ import annotations

import asyncio
import pickle
import struct
from dataclasses import dataclass
from typing import Any, cast

HEADER = struct.Struct("!IIB")
_U32 = struct.Struct("!I")
_RESP_HEAD = struct.Struct("!HI")
REQ_HTTP, REQ_CALL, CANCEL, CREDIT, MODELS, REQ_WS = 1, 2, 3, 4, 5, 6
#: chunks of one stream a replica sends ahead of its caller; the caller grants more CREDIT_EVERY at a time
STREAM_WINDOW, CREDIT_EVERY = 64, 16
RESP_FULL, RESP_HEAD, RESP_BODY, RESP_END, RESP_VALUE, RESP_ITEM, RESP_ERROR = 10, 11, 12, 13, 14, 15, 16
WS_ACCEPT, WS_TEXT, WS_BYTES, WS_CLOSE = 20, 21, 22, 23
_U16 = struct.Struct("!H")


def ws_close(code: int, reason: object = "") -> bytes:
    """A WS_CLOSE payload. The reason should be a str, but FastAPI gives a list (its validation errors): as text."""
    return _U16.pack(code) + str(reason).encode()[:123]  # a close frame's reason holds at most 123 bytes


def parse_ws_close(payload: bytes) -> tuple[int, str]:
    """``(code, reason)`` of a WS_CLOSE payload."""
    return _U16.unpack_from(payload)[0], payload[2:].decode(errors="replace")


class Window:
    """One stream's chunks sent ahead of what the other side has credited, and the sender waiting for credit."""

    __slots__ = ("ahead", "waiter", "open")

    def __init__(self) -> None:
        self.ahead = 0
        self.waiter: asyncio.Future | None = None
        self.open = True

    async def take(self) -> None:
        """Wait until one more chunk may go (``STREAM_WINDOW`` ahead at most), and count it; at once once closed."""
        while self.open and self.ahead >= STREAM_WINDOW:
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
        self.ahead += 1

    def credit(self) -> None:
        """The other side took ``CREDIT_EVERY`` more: wake the sender."""
        self.ahead -= CREDIT_EVERY
        self._wake()

    def close(self) -> None:
        """Nobody will take more: a waiting sender goes on (to find the stream gone)."""
        self.open = False
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


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
    """pickle, fast, for what every process can import; cloudpickle for the rest: what plain pickle refuses
    (lambdas, local classes) and what it would name in the sender's ``__main__`` (a class the driver's script
    defined after the replicas started: by reference it would not resolve there)."""
    try:
        data = pickle.dumps(obj, protocol=5)
    except (pickle.PicklingError, TypeError, AttributeError):
        data = b"__main__"
    if b"__main__" not in data:  # a scan at memory speed; a false hit only costs the slower pickler
        return data
    import cloudpickle

    return cloudpickle.dumps(obj, protocol=5)


loads = pickle.loads


def frame(stream: int, kind: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(len(payload), stream, kind) + payload


def http_request(fields: tuple, body: bytes) -> bytes:
    """A REQ_HTTP payload: the pickled scope fields, then the raw body."""
    meta = pickle.dumps(fields, protocol=5)
    return _U32.pack(len(meta)) + meta + body if body else _U32.pack(len(meta)) + meta


def parse_http_request(payload: bytes) -> tuple[tuple, bytes]:
    """``(fields, body)`` of a REQ_HTTP payload."""
    n = _U32.unpack_from(payload)[0]
    return pickle.loads(payload[4 : 4 + n]), payload[4 + n :]


def header_block(headers: Any) -> bytes:
    """``[(name, value), ...]`` (bytes or str) as a ``name\0value\0...`` block."""
    parts: list[bytes] = []
    for k, v in headers:
        parts.append(k if isinstance(k, bytes) else k.encode("latin-1"))
        parts.append(v if isinstance(v, bytes) else str(v).encode("latin-1"))
    return b"\0".join(parts)


def http_head(status: int, headers: Any) -> bytes:
    """The fixed part of a RESP_FULL payload (status and header block): prepend it to the body."""
    block = header_block(headers)
    return _RESP_HEAD.pack(status, len(block)) + block


def http_response(status: int, headers: Any, body: bytes) -> bytes:
    """A RESP_FULL payload."""
    return http_head(status, headers) + body


def parse_http_response(payload: bytes) -> tuple[int, bytes, bytes]:
    """``(status, header block, body)`` of a RESP_FULL payload."""
    status, n = _RESP_HEAD.unpack_from(payload)
    end = 6 + n
    return status, payload[6:end], payload[end:]


def split_block(block: bytes) -> list[tuple[bytes, bytes]]:
    """A header block as ``[(name, value), ...]`` of bytes (ASGI's form)."""
    if not block:
        return []
    it = iter(block.split(b"\0"))
    return list(zip(it, it))


_STR_HEADERS: dict[bytes, list[tuple[str, str]]] = {}


def split_block_str(block: bytes) -> list[tuple[str, str]]:
    """A header block as ``[(name, value), ...]`` of str (RSGI's form); the common blocks are cached."""
    got = _STR_HEADERS.get(block)
    if got is None:
        it = iter(block.decode("latin-1").split("\0")) if block else iter(())
        got = list(zip(it, it))
        if len(_STR_HEADERS) < 256 and b"content-length" not in block:
            _STR_HEADERS[block] = got
    return got


class FrameProtocol(asyncio.Protocol):
    """Splits the byte stream into frames and hands each to :meth:`on_frame`."""

    transport: asyncio.Transport | None = None

    def __init__(self) -> None:
        self._buf = bytearray()
        self._out: list[bytes] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream connection's transport
        self._loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        if buf:
            buf += data
            src: bytes | bytearray = buf
        else:  # the common case: whole frames in one read, sliced straight out of ``data``
            src = data
        size = HEADER.size
        pos = 0
        end = len(src)
        on_frame = self.on_frame
        while end - pos >= size:
            n, stream, kind = HEADER.unpack_from(src, pos)
            start = pos + size
            if end - start < n:
                break
            pos = start + n
            on_frame(stream, kind, bytes(src[start:pos]))  # a copy out of ``buf``; a plain slice of ``data``
        if src is buf:
            if pos:
                del buf[:pos]
        elif pos < end:
            buf += data[pos:]

    def send(self, stream: int, kind: int, payload: bytes = b"") -> None:
        """Queue one frame; everything queued in this loop turn goes out in one write (on the loop only)."""
        if self.transport is None or self.closed:
            return
        out = self._out
        if not out:
            cast(asyncio.AbstractEventLoop, self._loop).call_soon(self._flush)
        out.append(HEADER.pack(len(payload), stream, kind))
        if payload:
            out.append(payload)

    def _flush(self) -> None:
        out = self._out
        t = self.transport
        if out and t is not None and not self.closed:
            t.write(out[0] if len(out) == 1 else b"".join(out))
        out.clear()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.on_lost(exc)

    def on_frame(self, stream: int, kind: int, payload: bytes) -> None:
        raise NotImplementedError

    def on_lost(self, exc: Exception | None) -> None:
        pass
