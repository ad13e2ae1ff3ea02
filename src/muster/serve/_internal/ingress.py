"""The HTTP ingress: one process, a production ASGI server, a small routing table.

:class:`IngressApp` is a plain ASGI app: it matches the longest route prefix,
reads the body (up to ``max_body_bytes``, else 413), picks a replica of the
app's ingress deployment through its :class:`Router`, and relays the answer
-- whole or streamed.  Nothing in it waits on one replica while serving
others: every request is its own task on the server's loop.
:class:`IngressActor` hosts it in an actor, on granian (measured fastest
here, see docs/benchmarks.md) or uvicorn.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.client
import json
import logging
import socket
import sys
import time
import uuid
from typing import Any, Coroutine

from muster.serve import multiplex
from muster.serve._internal import eventloop, ingress_rsgi, router, streams, websocket, wire
from muster.serve.config import HTTPOptions
from muster.serve.exceptions import BackPressureError, DeploymentUnavailableError, RayServeException

_TEXT = [(b"content-type", b"text/plain; charset=utf-8")]
RESERVED_PATHS = ("/-/healthz", "/-/routes")
_CLOSE = [(b"connection", b"close")]  # a 413 ends its connection (see ingress_rsgi._CLOSE)


async def _plain(send: Any, status: int, text: str, headers: list | None = None) -> None:
    await send({"type": "http.response.start", "status": status, "headers": _TEXT + (headers or [])})
    await send({"type": "http.response.body", "body": text.encode()})


async def _discard(receive: Any, size: int) -> None:
    """Read and drop a body that is over the limit (up to ``DISCARD_MAX``), so the client gets the 413."""
    if size > ingress_rsgi.DISCARD_MAX:
        return
    while True:
        msg = await receive()
        if msg["type"] != "http.request" or not msg.get("more_body", False):
            return


def request_id(headers: list) -> tuple[bytes, list]:
    """The request's ``X-Request-ID`` (a new uuid when it sent none) and its headers, carrying it for the replica.

    Every answer to a routed request echoes it in ``x-request-id``, as Ray Serve's proxy does."""
    for k, v in headers:
        if k == b"x-request-id":
            return v, headers
    rid = str(uuid.uuid4()).encode()
    return rid, [*headers, (b"x-request-id", rid)]


class IngressApp:
    """Routes HTTP requests to the replicas of each app's ingress deployment."""

    def __init__(self, options: HTTPOptions, named: bool = False):
        self.options = options
        self.named = named  # the user named the server (the 501 to a WebSocket on granian says so)
        self.prefixes: list[tuple[str, str, str]] = []  # (prefix, app, deployment), longest first

    def apply(self, table: router.RouteTable) -> None:
        router.registry.apply(table)
        rows = [(a.route_prefix, a.name, a.ingress) for a in table.apps.values() if a.route_prefix]
        self.prefixes = sorted(rows, key=lambda r: len(r[0]), reverse=True)

    def match(self, path: str) -> tuple[str, str, str] | None:
        if path in RESERVED_PATHS:  # the ingress's own, whatever the apps' prefixes (as Ray Serve's proxy)
            return None
        for prefix, app, dep in self.prefixes:
            if prefix == "/" or path == prefix or path.startswith(prefix + "/"):
                return prefix, app, dep
        return None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            while True:
                msg = await receive()
                await send({"type": msg["type"] + ".complete"})
                if msg["type"] == "lifespan.shutdown":
                    return
        if kind == "websocket":
            await self._websocket(scope, receive, send)
            return
        path = scope["path"]
        hit = self.match(path)
        if hit is None:
            await self._special(path, send)
            return
        prefix, app, dep = hit
        body = await self._body(scope, receive, send)
        if body is None:
            return
        rid, headers = request_id(scope.get("headers", []))
        echo = [(b"x-request-id", rid)]
        fields = (scope["method"], path, "" if prefix == "/" else prefix, scope.get("query_string", b""),
                  headers, scope.get("client"), scope.get("server"))
        timeout = self.options.request_timeout_s
        deadline = streams.deadline_for(timeout)
        r = router.registry.router(app, dep)
        model = multiplex.header_model_id(headers) if r.multiplexed else ""  # routed to a replica holding it
        try:
            replica, stream = await r.open_stream(wire.REQ_HTTP, wire.http_request(fields, body), timeout or 30.0,
                                                  model)
        except (BackPressureError, DeploymentUnavailableError) as exc:
            if streams.past(deadline):  # still waiting for a replica at request_timeout_s: 408, as Ray's proxy
                await _plain(send, 408, streams.timeout_message(timeout), echo)
                return
            status, retry = ingress_rsgi.refusal(exc)
            await _plain(send, status, str(exc), [*([(b"retry-after", retry.encode())] if retry else []), *echo])
            return
        ingress_rsgi.late.add(stream, lambda: _watch_asgi(receive, stream))  # only once it runs long
        try:
            await self._relay(stream, send, timeout, deadline, echo)
        finally:
            ingress_rsgi.late.remove(stream)
            r.release(replica)

    async def _websocket(self, scope: dict, receive: Any, send: Any) -> None:
        """One WebSocket connection, relayed to one replica of the route's deployment for its lifetime."""
        path = scope["path"]
        hit = self.match(path)
        if hit is None:
            status, _, text = self.special(path)
            await websocket.deny(scope, send, 404, text.decode() if status == 404 else f"{path} is no WebSocket.")
            return
        prefix, app, dep = hit
        if (await receive())["type"] != "websocket.connect":
            return
        rid, headers = request_id(scope.get("headers", []))
        echo = [(b"x-request-id", rid)]
        fields = ("GET", path, "" if prefix == "/" else prefix, scope.get("query_string", b""), headers,
                  scope.get("client"), scope.get("server"))
        timeout = self.options.request_timeout_s  # for the handler to accept; an open connection has none
        r = router.registry.router(app, dep)
        model = multiplex.header_model_id(headers) if r.multiplexed else ""
        try:
            replica, stream = await r.open_stream(wire.REQ_WS, wire.http_request(fields, b""), timeout or 30.0, model)
        except (BackPressureError, DeploymentUnavailableError) as exc:
            status, retry = ingress_rsgi.refusal(exc)
            await websocket.deny(scope, send, status, str(exc), [*([(b"retry-after", retry.encode())] if retry else []),
                                                                 *echo])
            return
        try:
            await websocket.relay(stream, scope, receive, send, timeout, echo)
        finally:
            r.release(replica)

    async def _relay(self, stream: streams.Stream, send: Any, timeout: float | None, deadline: float | None,
                     echo: list) -> None:
        kind, payload = await (stream.next() if deadline is None else stream.next_before(deadline))
        if kind == streams.GONE[0]:
            return  # the client left; the replica was told to stop
        if (kind, payload) == streams.TIMED_OUT:
            await _plain(send, 408, streams.timeout_message(timeout), echo)
            return
        if kind == wire.RESP_FULL:
            status, block, body = wire.parse_http_response(payload)
            await send({"type": "http.response.start", "status": status, "headers": wire.split_block(block) + echo})
            await send({"type": "http.response.body", "body": body})
            return
        if kind == wire.RESP_ERROR:
            err: wire.RemoteError = wire.loads(payload)
            hdrs = [(k.encode(), v.encode()) for k, v in err.headers]
            await _plain(send, err.status, err.message, hdrs + echo)
            return
        if kind != wire.RESP_HEAD:
            await _plain(send, 500, f"the replica answered with frame kind {kind}, not an HTTP response.", echo)
            return
        status, headers = wire.loads(payload)
        try:
            await send({"type": "http.response.start", "status": status, "headers": [*headers, *echo]})
            while True:
                kind, payload = await (stream.next() if deadline is None else stream.next_before(deadline))
                if kind == wire.RESP_BODY:
                    await send({"type": "http.response.body", "body": payload, "more_body": True})
                elif kind == wire.RESP_END:
                    await send({"type": "http.response.body", "body": b""})
                    return
                elif (kind, payload) == streams.TIMED_OUT:
                    # Past request_timeout_s mid-stream, as Ray's proxy: the replica was told to stop and the
                    # response is left unfinished, so the server closes the connection mid-body (the client
                    # sees an incomplete body, not a complete short one).
                    return
                else:  # the replica failed or died mid-stream: end the response there
                    await send({"type": "http.response.body", "body": b""})
                    return
        except BaseException:
            stream.cancel()  # the client went away: stop the replica's generator
            raise

    async def _body(self, scope: dict, receive: Any, send: Any) -> bytes | None:
        limit = self.options.max_body_bytes
        for k, v in scope.get("headers", ()):
            if k == b"content-length" and v.isdigit() and int(v) > limit:
                await _discard(receive, int(v))
                await _plain(send, 413, f"request body of {int(v)} bytes is over the limit of {limit} bytes "
                                        "(http_options max_body_bytes).", _CLOSE)
                return None
        chunks: list[bytes] = []
        size = 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return None
            chunk = msg.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    if msg.get("more_body", False):
                        await _discard(receive, 0)
                    await _plain(send, 413, f"request body is over the limit of {limit} bytes "
                                            "(http_options max_body_bytes).", _CLOSE)
                    return None
                chunks.append(chunk)
            if not msg.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _special(self, path: str, send: Any) -> None:
        status, headers, body = self.special(path)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def special(self, path: str) -> tuple[int, list, bytes]:
        """Paths no app serves: ``/-/healthz``, ``/-/routes``, else 404 listing the prefixes."""
        if path == "/-/healthz":
            return 200, _TEXT, b"success"
        if path == "/-/routes":
            return 200, [(b"content-type", b"application/json")], \
                json.dumps({p: a for p, a, _ in self.prefixes}).encode()
        routes = ", ".join(p for p, _, _ in self.prefixes) or "none (no app is running)"
        return 404, _TEXT, f"no application serves path {path!r}; route prefixes: {routes}.".encode()

    def __rsgi__(self, scope: Any, proto: Any) -> Coroutine[Any, Any, None]:
        return ingress_rsgi.handle(self, scope, proto)  # no wrapping coroutine: granian awaits this one


def _watch_asgi(receive: Any, stream: streams.Stream) -> Any:
    """Abandon ``stream`` if the client leaves (ASGI says so only through ``receive()``); returns the undo."""
    watch = asyncio.ensure_future(_disconnect(receive))
    watch.add_done_callback(lambda w: None if w.cancelled() else stream.abandon())
    return watch.cancel


async def _disconnect(receive: Any) -> None:
    """Return once the client has gone (the request's body was read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass


_CUT = "ASGI callable returned without completing response."


def _quiet_cut(record: logging.LogRecord) -> bool:
    """Drop uvicorn's error line for a response the ingress leaves unfinished on purpose: a stream cut at
    ``request_timeout_s`` (see ``IngressApp._relay``), whose connection uvicorn then closes, as Ray's proxy does."""
    return record.msg != _CUT


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class _BindFailed(Exception):
    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


def listening(host: str, port: int) -> bool:
    """Whether a socket listens on ``port`` (Linux: the kernel's own table; elsewhere a probe)."""
    rows = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows += f.read().splitlines()[1:]
        except OSError:
            continue
    if rows:  # columns: sl local_address rem_address st ...; st 0A is LISTEN
        want = f":{port:04X}"
        return any(c[1].endswith(want) and c[3] == "0A" for c in (r.split() for r in rows) if len(c) > 3)
    try:
        with socket.create_connection((host, port), timeout=0.5) as s:
            return bool(s.getsockname() != s.getpeername())  # not a connect that met itself
    except OSError:
        return False


def probe_host(host: str) -> str:
    """Where a client on this machine reaches a server bound to ``host`` (any-address: loopback)."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def answers(host: str, port: int, timeout_s: float = 2.0, tls: bool = False) -> bool:
    """Whether the ingress at ``host:port`` answers ``GET /-/healthz`` with 200 (over HTTPS with ``tls``: its
    certificate is not checked, the probe only asks whether it serves)."""
    conn: http.client.HTTPConnection
    if tls:
        import ssl

        conn = http.client.HTTPSConnection(probe_host(host), port, timeout=timeout_s,
                                           context=ssl._create_unverified_context())
    else:
        conn = http.client.HTTPConnection(probe_host(host), port, timeout=timeout_s)
    try:
        conn.request("GET", "/-/healthz")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def why_stopped(task: asyncio.Task, server: Any) -> str:
    """What ended a server's task: its own error, else a failed worker's (granian keeps those)."""
    if not task.done():
        return "it is still running"
    if task.cancelled():
        return "its task was cancelled"
    errors = [task.exception()] + [
        w._task.exception() for w in getattr(server, "wrks", ())
        if getattr(w, "_task", None) is not None and w._task.done() and not w._task.cancelled()
    ]
    found = [e for e in errors if e is not None]
    return f"{type(found[0]).__name__}: {found[0]}" if found else "it returned without an error"


def check_port_free(options: HTTPOptions) -> None:
    """Refuse a port another process listens on. The HTTP servers bind with SO_REUSEPORT, so a second
    driver's Serve would share port 8000 with the first, each answering every other request."""
    deadline = time.monotonic() + 2.0  # an ingress just stopped may still be closing its socket
    while options.port and listening(options.host, options.port):
        if time.monotonic() > deadline:
            raise RayServeException(
                f"Serve cannot listen on {options.host}:{options.port}: another process listens there (another "
                "driver's Serve, or any server). Fix: stop it, or pick another port with "
                "serve.start(http_options={'port': 8001}) (port 0 picks a free one)."
            )
        time.sleep(0.1)


class InProcess:
    """An object in this process, called like an actor (the ingress on a cluster engine)."""

    def __init__(self, obj: Any):
        self.obj = obj

    def call(self, method: str, *args: Any) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        try:
            fut.set_result(getattr(self.obj, method)(*args))
        except BaseException as exc:  # noqa: BLE001 - delivered through the future, as an actor's would be
            fut.set_exception(exc)
        return fut

    def is_alive(self) -> bool:
        return not self.obj.task.done()


class NoProxy:
    """Stands in for the ingress under ``ProxyLocation.Disabled``: no HTTP server runs; every call is answered
    here with nothing (no address, no queued requests) and it never dies."""

    def call(self, method: str, *args: Any) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        fut.set_result({} if method == "queued" else None)
        return fut

    def is_alive(self) -> bool:
        return True


class IngressActor:
    """Hosts :class:`IngressApp` on an ASGI server, on this process's Serve loop.

    It is ready only once it answers ``GET /-/healthz`` over HTTP.  Should its
    server stop without being asked (a worker of the server failed), it says
    why on stderr and serves again on the same port.
    """

    RESTARTS_PER_MINUTE = 5

    def __init__(self, options: HTTPOptions, table: router.RouteTable, named: bool = False):
        self.options = options
        self.app = IngressApp(options, named)
        self.loop = eventloop.get_loop(options.loop)
        eventloop.run_sync(self._apply(table))
        self.server: Any = None
        self.stopping = self.ready = False
        self.restarts: list[float] = []
        # A port we picked can be taken between our probe and the server's bind: pick again.
        for attempt in range(1 if options.port else 3):
            self.port = options.port or free_port(options.host)
            self.task = eventloop.run_sync(self._start())
            try:
                self._wait_serving()
                self.ready = True
                break
            except _BindFailed as failed:
                if options.port or attempt == 2:
                    raise failed.error from None

    async def _apply(self, table: router.RouteTable) -> None:
        self.app.apply(table)

    async def _start(self) -> asyncio.Task:
        return self._serve()

    def _serve(self) -> asyncio.Task:
        """Start the server on our port (on the loop); its end is watched by :meth:`_ended`."""
        o = self.options
        if o.server == "granian":
            from granian.constants import HTTPModes, Interfaces
            from granian.server.embed import Server

            tls: dict[str, Any] = {}
            if o.tls:
                from pathlib import Path

                tls = {"ssl_cert": Path(str(o.ssl_certfile)), "ssl_key": Path(str(o.ssl_keyfile)),
                       "ssl_key_password": o.ssl_keyfile_password,
                       "ssl_ca": Path(o.ssl_ca_certs) if o.ssl_ca_certs else None}
            self.server = Server(
                self.app, address=o.host, port=self.port, interface=Interfaces.RSGI, http=HTTPModes.http1,
                websockets=False, log_enabled=False, backlog=2048, **tls,
            )
        else:
            import uvicorn

            logging.getLogger("uvicorn.error").addFilter(_quiet_cut)  # once: the same filter is not added twice
            self.server = uvicorn.Server(uvicorn.Config(
                self.app, host=o.host, port=self.port, loop="none", http="httptools", lifespan="off",
                log_level="warning", access_log=False, timeout_keep_alive=int(o.keep_alive_timeout_s),
                ws="websockets-sansio",  # WebSockets are relayed to replicas (websocket.py)
                backlog=2048, ssl_keyfile=o.ssl_keyfile, ssl_certfile=o.ssl_certfile,
                ssl_keyfile_password=o.ssl_keyfile_password, ssl_ca_certs=o.ssl_ca_certs,
            ))
        task = asyncio.ensure_future(self._uvicorn() if o.server == "uvicorn" else self.server.serve())
        task.add_done_callback(self._ended)
        return task

    async def _uvicorn(self) -> None:
        """Serve on a socket bound with ``SO_REUSEPORT``, as granian binds its own: a uvicorn ingress replacing a
        granian one on the same port listens before granian stops (``server_choice.move_ingress``)."""
        host = self.options.host
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, self.port))
        except OSError:
            sock.close()
            raise
        await self.server.serve(sockets=[sock])

    def _ended(self, task: asyncio.Task) -> None:
        if self.stopping or not self.ready or task is not self.task:
            return
        now = time.monotonic()
        self.restarts = [t for t in self.restarts if now - t < 60] + [now]
        again = len(self.restarts) <= self.RESTARTS_PER_MINUTE
        print(f"[serve] the HTTP ingress on {self.options.host}:{self.port} stopped unasked "
              f"({why_stopped(task, self.server)}); "
              + ("serving again on the same port." if again else
                 f"it stopped {len(self.restarts)} times within a minute, so it stays down."),
              file=sys.stderr, flush=True)
        if again:
            self.task = self._serve()

    def _wait_serving(self, timeout_s: float = 15.0) -> None:
        """Return once the server answers ``GET /-/healthz`` on our port.

        A connect is tried only once the kernel lists the port as listening:
        probing a port nobody listens on can connect to itself and then hold
        the port against the server's bind.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.task.done():
                raise _BindFailed(RayServeException(
                    f"the HTTP ingress ({self.options.server}) could not listen on {self.options.host}:{self.port}"
                    f" ({why_stopped(self.task, self.server)}); is the port in use? Pick another with "
                    "serve.start(http_options={'port': N})."
                ))
            if getattr(self.server, "started", True) and listening(self.options.host, self.port) \
                    and answers(self.options.host, self.port, tls=self.options.tls):  # uvicorn: its own answer
                return
            time.sleep(0.02)
        raise RayServeException(f"the HTTP ingress did not answer on {self.options.host}:{self.port} "
                                f"within {timeout_s} s.")

    def address(self) -> tuple[str, int]:
        return self.options.host, self.port

    def update_routes(self, table: router.RouteTable) -> None:
        eventloop.run_sync(self._apply(table), timeout=10)

    def serving(self) -> bool:
        return not self.task.done()

    def queued(self) -> dict[tuple[str, str], int]:
        """The HTTP requests waiting here for a replica, by ``(app, deployment)``."""
        return router.queued_counts()

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop listening, let in-flight requests finish (up to ``grace_s``), then return."""
        self.stopping = True

        def _stop() -> None:
            if self.options.server == "granian":
                self.server.stop()
            else:
                self.server.should_exit = True

        self.loop.call_soon_threadsafe(_stop)
        deadline = time.monotonic() + grace_s
        while not self.task.done() and time.monotonic() < deadline:
            time.sleep(0.02)
