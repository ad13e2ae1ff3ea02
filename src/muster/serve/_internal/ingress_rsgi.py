"""The ingress on granian's native interface (RSGI): the same routing as the ASGI path, fewer copies.

Granian hands RSGI apps the request as one object and takes the response in
one call, instead of ASGI's message dicts; measured here it leaves more CPU
for the hop.  Header names and values stay ``str`` on this side and are
encoded in the replica (see ``replica._scope``).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Callable

from muster.serve import multiplex
from muster.serve._internal import router, streams, wire
from muster.serve.exceptions import BackPressureError, DeploymentUnavailableError

_TEXT = [("content-type", "text/plain; charset=utf-8")]


def refusal(exc: Exception) -> tuple[int, str | None]:
    """The status and ``Retry-After`` of a request no replica could take: the deployment's
    ``backpressure_config`` for a full queue, 503 and 1 s for a deployment that is not running."""
    if isinstance(exc, BackPressureError):
        return exc.status_code, exc.retry_after
    return 503, "1"


def websocket_refusal(path: str, named: bool) -> str:
    """The 501's text for a WebSocket upgrade on granian (the uvicorn ingress serves them); ``named``: the user's
    http_options name granian (left out, Serve moves to uvicorn for the apps whose WebSocket routes it sees)."""
    why = (" This ingress runs on granian because http_options server='granian' names it." if named else
           " Serve was left to choose its server and runs granian, as no app it serves is known to have WebSocket "
           "routes (those of a bare ASGI app, or of an app wrapped in middleware, cannot be read).")
    return (f"the request to {path} asks to upgrade to a WebSocket, which the ingress serves on uvicorn only: "
            "granian's RSGI interface (granian 2.8) cannot pass a close code or a subprotocol on, and never tells the "
            f"app that a client closed cleanly.{why} Fix: serve.start(http_options={{'server': 'uvicorn'}}) (or "
            "http_options: {server: uvicorn} in the config file).")


def _plain(proto: Any, status: int, text: str, headers: list | None = None) -> None:
    proto.response_str(status, _TEXT + (headers or []), text)


#: A body over the limit is still read (and dropped) up to this size before the 413, so the client, still
#: sending, gets the answer instead of a reset connection; past it the connection just closes.
DISCARD_MAX = 64 * 1024 * 1024
#: A 413 ends its connection, said in the answer: a client must not send its next request on a
#: connection whose last body was cut off (it raced the server's close, and lost, in CI).
_CLOSE = [("connection", "close")]


async def _discard(proto: Any, size: int) -> None:
    if size > DISCARD_MAX:
        return
    try:
        async for _ in proto:
            pass
    except Exception:  # noqa: BLE001 - the client went away: nothing to answer
        pass


def _str_headers(headers: list) -> list[tuple[str, str]]:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers]


async def handle(app: Any, scope: Any, proto: Any) -> None:
    """Serve one RSGI request for ``app`` (an ``IngressApp``)."""
    if scope.proto != "http":
        proto.close(1003)
        return
    path = scope.path
    hit = app.match(path)
    if hit is None:
        status, headers, body = app.special(path)
        proto.response_bytes(status, _str_headers(headers), body)
        return
    prefix, app_name, dep = hit
    hdrs = scope.headers
    if "upgrade" in hdrs and hdrs.get("upgrade", "").lower() == "websocket":
        _plain(proto, 501, websocket_refusal(path, app.named), _CLOSE)
        return
    limit = app.options.max_body_bytes
    declared = hdrs.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        await _discard(proto, int(declared))
        _plain(proto, 413, f"request body of {declared} bytes is over the limit of {limit} bytes "
                           "(http_options max_body_bytes).", _CLOSE)
        return
    if declared is not None:
        body = await proto() if declared != "0" else b""
    elif "transfer-encoding" not in hdrs:
        body = b""  # HTTP/1.1: no length and no chunked encoding means no body
    else:
        chunks, size = [], 0
        async for chunk in proto:
            size += len(chunk)
            if size > limit:
                await _discard(proto, DISCARD_MAX)
                _plain(proto, 413, f"request body is over the limit of {limit} bytes (http_options max_body_bytes).",
                       _CLOSE)
                return
            chunks.append(chunk)
        body = b"".join(chunks)
    items = hdrs.items()
    rid = hdrs.get("x-request-id")
    if rid is None:  # echoed on the answer (see ingress.request_id), and passed on to the replica
        rid = str(uuid.uuid4())
        items = [*items, ("x-request-id", rid)]
    echo = [("x-request-id", rid)]
    fields = (scope.method, path, "" if prefix == "/" else prefix, scope.query_string, items,
              scope.client, scope.server)
    timeout = app.options.request_timeout_s
    deadline = streams.deadline_for(timeout)
    r = router.registry.router(app_name, dep)
    payload = wire.http_request(fields, body)
    model = multiplex.rsgi_model_id(hdrs) if r.multiplexed else ""  # routed to a replica holding it
    got = r.open_now(wire.REQ_HTTP, payload, model)  # the common case: a replica has room, no await
    if got is None:
        try:
            got = await r.open_stream(wire.REQ_HTTP, payload, timeout or 30.0, model)
        except (BackPressureError, DeploymentUnavailableError) as exc:
            if streams.past(deadline):  # still waiting for a replica at request_timeout_s: 408, as Ray's proxy
                _plain(proto, 408, streams.timeout_message(timeout), echo)
                return
            status, retry = refusal(exc)
            _plain(proto, status, str(exc), [*([("retry-after", retry)] if retry else []), *echo])
            return
    replica, stream = got
    late.add(stream, lambda: _watch_granian(proto, stream))
    try:
        await _relay(stream, proto, timeout, deadline, echo)
    finally:
        late.remove(stream)
        r.release(replica)


def _watch_granian(proto: Any, stream: streams.Stream) -> Callable[[], None]:
    """Abandon ``stream`` if the client leaves (granian resolves the future then); returns the undo."""
    gone = proto.client_disconnect()
    gone.add_done_callback(stream.abandon)
    return lambda: gone.remove_done_callback(stream.abandon)


class LateWatch:
    """Watches for the client leaving only once a request has run past one tick (0.1-0.2 s).

    Cancelling what a gone client asked for matters for slow requests; watching costs each request
    about 40 us on granian (a future its runtime resolves), 12% of the requests per second at one
    connection (benchmarks/serve_bench.py), which fast requests should not pay. A request is put in
    ``young``; each tick arms the watch of those in ``old`` and ages ``young`` to ``old``; one that ends
    first is only dropped from its dict.
    """

    TICK_S = 0.1

    def __init__(self) -> None:
        self.young: dict[Any, Callable[[], Callable[[], None]]] = {}
        self.old: dict[Any, Callable[[], Callable[[], None]]] = {}
        self.armed: dict[Any, Callable[[], None]] = {}
        self.ticking = False

    def add(self, key: Any, arm: Callable[[], Callable[[], None]]) -> None:
        """Watch ``key``'s request from the next tick but one: ``arm()`` starts the watch, its result ends it."""
        self.young[key] = arm
        if not self.ticking:
            self.ticking = True
            asyncio.get_running_loop().call_later(self.TICK_S, self._tick)

    def remove(self, key: Any) -> None:
        if self.young.pop(key, None) is None and self.old.pop(key, None) is None:
            disarm = self.armed.pop(key, None)
            if disarm is not None:
                disarm()

    def _tick(self) -> None:
        for key, arm in self.old.items():
            try:
                self.armed[key] = arm()
            except Exception:  # noqa: BLE001 - a connection already closed: nothing to watch
                pass
        self.old, self.young = self.young, {}
        if self.old or self.armed:
            asyncio.get_running_loop().call_later(self.TICK_S, self._tick)
        else:
            self.ticking = False


late = LateWatch()  # the ingress process's one (its server runs on one loop)


async def _relay(stream: streams.Stream, proto: Any, timeout: float | None, deadline: float | None,
                 echo: list) -> None:
    kind, payload = await (stream.next() if deadline is None else stream.next_before(deadline))
    if kind == streams.GONE[0]:
        return  # the client left; the replica was told to stop
    if kind == wire.RESP_FULL:
        status, block, body = wire.parse_http_response(payload)
        proto.response_bytes(status, wire.split_block_str(block) + echo, body)
        return
    if (kind, payload) == streams.TIMED_OUT:
        _plain(proto, 408, streams.timeout_message(timeout), echo)
        return
    if kind == wire.RESP_ERROR:
        err: wire.RemoteError = wire.loads(payload)
        _plain(proto, err.status, err.message, [*err.headers, *echo])
        return
    if kind != wire.RESP_HEAD:
        _plain(proto, 500, f"the replica answered with frame kind {kind}, not an HTTP response.", echo)
        return
    status, headers = wire.loads(payload)
    transport = proto.response_stream(status, _str_headers(headers) + echo)
    try:
        while True:
            kind, payload = await (stream.next() if deadline is None else stream.next_before(deadline))
            if kind != wire.RESP_BODY:
                # The end, or the replica failed mid-stream, or request_timeout_s passed (the replica was told
                # to stop): the response ends there. Ray's proxy closes the connection mid-body at the timeout;
                # RSGI cannot abort a response, so granian ends the body where it was cut (uvicorn: as Ray).
                return
            await transport.send_bytes(payload)
    except BaseException:
        stream.cancel()  # the client went away: stop the replica's generator
        raise
