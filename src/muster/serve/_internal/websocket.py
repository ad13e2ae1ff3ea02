"""WebSockets through Serve: the replica's side of a connection, and the ingress's relay to it.

The ingress hands a client's upgrade to ONE replica of the route's deployment (the router's usual
pick: the connection counts as one ongoing request there until it closes, as in Ray) by opening a
stream with ``REQ_WS``, and answers the client's handshake only once the handler has: ``WS_ACCEPT``
accepts it (with the handler's subprotocol and headers), a ``WS_CLOSE`` or an error before that
refuses it (403, or the error's own status). Then messages travel both ways as ``WS_TEXT`` /
``WS_BYTES`` frames, flow-controlled each way like a stream's chunks (``wire.STREAM_WINDOW``), and a
close as ``WS_CLOSE`` with its code: the client's reaches the handler as ``websocket.disconnect``
(Starlette's ``WebSocketDisconnect(code)``), the handler's reaches the client. A handler that raises
after accepting, or a replica that dies, closes the client's connection with 1011.
"""

from __future__ import annotations

import asyncio
from typing import Any

from muster.serve._internal import streams, wire

#: the close code a client gets when the handler raised or its replica died (RFC 6455: internal error)
INTERNAL_ERROR = 1011
_DENIAL = "websocket.http.response"  # the ASGI extension that answers a refused upgrade with an HTTP response


class ClientDisconnected(OSError):
    """A send on a WebSocket whose client has gone; Starlette turns it into ``WebSocketDisconnect(1006)``,
    as it does uvicorn's error of the same name."""


def scope_of(http_scope: dict) -> dict:
    """The ASGI ``websocket`` scope of a connection, from the HTTP scope its upgrade request makes."""
    scope = dict(http_scope, type="websocket", scheme="ws", extensions={_DENIAL: {}})
    scope.pop("method", None)
    offered = [v for k, v in scope["headers"] if k == b"sec-websocket-protocol"]
    scope["subprotocols"] = [p.strip() for v in offered for p in v.decode("latin-1").split(",") if p.strip()]
    return scope


class ReplicaSocket(wire.Window):
    """One WebSocket in a replica: the ASGI ``receive``/``send`` its app gets, fed by the caller's frames.

    It is also the stream's flow-control window (``_Conn.windows``): the caller's CREDIT lands here.
    """

    __slots__ = ("conn", "stream", "inbox", "connected", "accepted", "closed", "gone", "taken", "_denial")

    def __init__(self, conn: Any, stream: int):
        super().__init__()
        self.conn, self.stream = conn, stream  # the replica's connection to the caller (replica._Conn)
        self.inbox: asyncio.Queue[dict] = asyncio.Queue()
        self.connected = self.accepted = self.closed = False
        self.gone: dict | None = None  # the client's websocket.disconnect, once it has gone
        self.taken = 0  # messages taken since the last CREDIT
        self._denial: tuple[int, list, list] | None = None
        conn.windows[stream] = self

    def feed(self, kind: int, payload: bytes) -> None:
        """A frame from the client's side."""
        if kind == wire.WS_TEXT:
            self.inbox.put_nowait({"type": "websocket.receive", "text": payload.decode()})
        elif kind == wire.WS_BYTES:
            self.inbox.put_nowait({"type": "websocket.receive", "bytes": payload})
        elif kind == wire.WS_CLOSE and self.gone is None:
            code, reason = wire.parse_ws_close(payload)
            self.gone = {"type": "websocket.disconnect", "code": code, "reason": reason}
            self.inbox.put_nowait(self.gone)
            self.close()  # the flow-control window: a send waiting for credit goes on, to find the client gone

    async def receive(self) -> dict:
        if not self.connected:
            self.connected = True
            return {"type": "websocket.connect"}
        if self.gone is not None and self.inbox.empty():
            return self.gone
        msg = await self.inbox.get()
        if msg is not self.gone:
            self.taken += 1
            if self.taken == wire.CREDIT_EVERY:
                self.taken = 0
                self.conn.send(self.stream, wire.CREDIT)
        return msg

    async def send(self, message: Any) -> None:
        t = message["type"]
        if self.gone is not None or self.closed:
            raise ClientDisconnected(f"the WebSocket is closed; cannot send {t!r}")
        if t == "websocket.send":
            text = message.get("text")
            kind, data = (wire.WS_TEXT, text.encode()) if text is not None else \
                (wire.WS_BYTES, bytes(message.get("bytes") or b""))
            await self.take()
            if self.gone is not None:
                raise ClientDisconnected("the WebSocket's client has gone")
            self.conn.send(self.stream, kind, data)
        elif t == "websocket.accept":
            self.accepted = True
            headers = [(bytes(k), bytes(v)) for k, v in message.get("headers") or ()]
            self.conn.send(self.stream, wire.WS_ACCEPT, wire.dumps((message.get("subprotocol"), headers)))
        elif t == "websocket.close":
            self.close_socket(message.get("code") or 1000, message.get("reason") or "")
        elif t == "websocket.http.response.start":  # a refusal with an HTTP answer of the app's own
            self._denial = (message["status"], list(message.get("headers") or ()), [])
        elif t == "websocket.http.response.body" and self._denial is not None:
            self._denial[2].append(bytes(message.get("body", b"")))
            if not message.get("more_body", False):
                status, headers, body = self._denial
                self.closed = True
                self.conn.send(self.stream, wire.RESP_FULL, wire.http_response(status, headers, b"".join(body)))

    def close_socket(self, code: int, reason: str = "") -> None:
        """Close from the handler's side (before accepting: refuse the upgrade)."""
        if not self.closed:
            self.closed = True
            self.conn.send(self.stream, wire.WS_CLOSE, wire.ws_close(code, reason))

    async def run(self, app: Any, scope: dict) -> Exception | None:
        """Run the app for this connection; return what it raised that its caller should hear of (None: served).

        A handler that returns closes the connection normally (1000) if it had not; one that raises after
        accepting closes it with 1011; one that raises because its client left has served."""
        try:
            await app(scope, self.receive, self.send)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - user code: its caller hears of it, the replica lives on
            if self.gone is not None:
                return None  # the client left, and the handler ended with it (WebSocketDisconnect)
            if self.accepted:
                self.close_socket(INTERNAL_ERROR, f"{type(exc).__name__} in the WebSocket handler")
            return exc  # before accepting: the caller refuses the upgrade with the error's status
        self.close_socket(1000)
        return None


# -- the ingress's side (ASGI) ------------------------------------------------------------------


async def deny(scope: dict, send: Any, status: int, text: str, headers: list | None = None) -> None:
    """Refuse a client's upgrade: with an HTTP answer where the server can send one, else a bare 403."""
    try:
        if _DENIAL in (scope.get("extensions") or {}):
            await send({"type": "websocket.http.response.start", "status": status,
                        "headers": [(b"content-type", b"text/plain; charset=utf-8"), *(headers or ())]})
            await send({"type": "websocket.http.response.body", "body": text.encode()})
        else:
            await send({"type": "websocket.close", "code": 1008})
    except OSError:
        pass  # the client has gone already


async def relay(stream: streams.Stream, scope: dict, receive: Any, send: Any, timeout: float | None,
                echo: list) -> None:
    """Serve one client's WebSocket through the replica answering on ``stream``, until either side closes."""
    kind, payload = await stream.next(timeout)
    if kind != wire.WS_ACCEPT:
        await _refuse(kind, payload, scope, send, timeout, echo)
        return
    subprotocol, headers = wire.loads(payload)
    await send({"type": "websocket.accept", "subprotocol": subprotocol, "headers": [*headers, *echo]})
    up = wire.Window()
    pump = asyncio.ensure_future(_client_to_replica(receive, stream, up))
    try:
        await _replica_to_client(stream, send, up)
    finally:
        pump.cancel()


async def _refuse(kind: int, payload: bytes, scope: dict, send: Any, timeout: float | None, echo: list) -> None:
    """The handler did not accept: say how to the client."""
    if kind == wire.WS_CLOSE:  # the handler (or Starlette's router, with no such route) closed first
        await send({"type": "websocket.close", "code": wire.parse_ws_close(payload)[0]})
    elif (kind, payload) == streams.TIMED_OUT:
        await deny(scope, send, 408, streams.timeout_message(timeout), echo)
    elif kind == wire.RESP_ERROR:
        err: wire.RemoteError = wire.loads(payload)
        await deny(scope, send, err.status, err.message, [(k.encode(), v.encode()) for k, v in err.headers] + echo)
    elif kind == wire.RESP_FULL:
        status, block, body = wire.parse_http_response(payload)
        await deny(scope, send, status, body.decode(errors="replace"), wire.split_block(block) + echo)
    else:
        await deny(scope, send, 500, f"the replica answered a WebSocket with frame kind {kind}.", echo)


async def _client_to_replica(receive: Any, stream: streams.Stream, window: wire.Window) -> None:
    while True:
        msg = await receive()
        if msg["type"] == "websocket.receive":
            text = msg.get("text")
            await window.take()  # the replica has not taken STREAM_WINDOW messages yet: stop reading the client
            if text is not None:
                stream.conn.send(stream.id, wire.WS_TEXT, text.encode())
            else:
                stream.conn.send(stream.id, wire.WS_BYTES, msg.get("bytes") or b"")
        elif msg["type"] == "websocket.disconnect":
            stream.conn.send(stream.id, wire.WS_CLOSE, wire.ws_close(msg.get("code") or 1005, msg.get("reason") or ""))
            return


async def _replica_to_client(stream: streams.Stream, send: Any, window: wire.Window) -> None:
    """Pass the replica's messages on until it closes (or dies); a client that has gone is not sent to, but the
    replica's end is still waited for, so its ongoing count stays until its handler has finished."""
    client = True
    while True:
        kind, payload = await stream.next()
        if kind == wire.CREDIT:
            window.credit()
            continue
        if kind == wire.WS_TEXT:
            msg: dict = {"type": "websocket.send", "text": payload.decode()}
        elif kind == wire.WS_BYTES:
            msg = {"type": "websocket.send", "bytes": payload}
        elif kind == wire.WS_CLOSE:
            code, reason = wire.parse_ws_close(payload)
            msg = {"type": "websocket.close", "code": code, "reason": reason}
        else:  # RESP_ERROR: the replica died (or the hop broke) mid-connection
            msg = {"type": "websocket.close", "code": INTERNAL_ERROR, "reason": "the replica serving it failed"}
        if client:
            try:
                await send(msg)
            except OSError:
                client = False
        if msg["type"] == "websocket.close":
            return
