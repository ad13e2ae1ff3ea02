"""A replica: an actor on muster's runtime that serves one deployment over a unix socket.

The runtime starts :class:`ReplicaActor` like any actor (a warm-forked
process holding the replica's resources) and uses ordinary actor calls for
control: ``check_health``, ``reconfigure``, ``update_routes``, ``stats``,
``drain``.  Requests do not go through those calls: the actor listens on its
own socket (see :mod:`wire`), and runs each request as a task on the Serve
loop -- async user methods there, sync ones on a thread pool -- with at most
``max_ongoing_requests`` running at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import os
import pickle
import sys
import time
from dataclasses import dataclass
from typing import Any, cast

from muster.exceptions import InvalidTypeError, MusterError, methods_of, no_such_method
from muster.serve import context as replica_context
from muster.serve import multiplex
from muster.serve._internal import (asgi_lifespan, autoscaling_stats, eventloop, metrics, replica_logging,
                                    responses, router, server_choice, websocket, wire)
from muster.serve._internal.plan import TargetRef
from muster.serve.config import DeploymentConfig
from muster.tasks import worker_side
from muster.util import metrics as user_metrics


@dataclass(frozen=True)
class ReplicaSpec:
    """Everything a replica needs to start."""

    app: str
    deployment: str
    replica_id: str
    socket_path: str
    target: Any  # the user's class or function
    init_args: tuple
    init_kwargs: dict
    config: DeploymentConfig
    table: router.RouteTable
    rank: int = 0  # 0..n-1 over the deployment's live replicas (on a cluster, node_rank is not worked out: 0)
    world_size: int = 1
    deployment_actors: dict[str, Any] | None = None  # handles of the deployment-scoped actors, by name
    code_version: str = ""  # the deployment's generation (ReplicaContext.code_version)
    gang: Any = None  # its GangContext, in a gang-scheduled deployment
    placement_group: Any = None  # its own PlacementGroup (placement_group_bundles); it runs in bundle 0


def _scope(fields: tuple) -> dict:
    method, path, root_path, query, headers, client, server = fields
    if isinstance(query, str):  # from the RSGI ingress: str headers, "host:port" addresses
        query = query.encode("latin-1")
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
        client, server = _address(client), _address(server)
    return {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
        "method": method, "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": root_path,
        "query_string": query, "headers": headers, "client": client, "server": server, "state": {},
    }


_ADDRESSES: dict[str, tuple[str, int]] = {}


def _address(value: Any) -> Any:
    if isinstance(value, str) and ":" in value:
        got = _ADDRESSES.get(value)
        if got is None:
            host, port = value.rsplit(":", 1)
            got = (host, int(port)) if port.isdigit() else (host, 0)
            if len(_ADDRESSES) < 4096:
                _ADDRESSES[value] = got
        return got
    return value


_REQUEST: list[type] = []


def _request_class() -> type:
    """Starlette's ``Request``, imported once (on the first request)."""
    if not _REQUEST:
        from starlette.requests import Request

        _REQUEST.append(Request)
    return _REQUEST[0]


def _receive_once(body: bytes) -> Any:
    sent = False

    async def receive() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # nothing more will come; the task ends by cancellation
        return {"type": "http.disconnect"}

    return receive


def _header(headers: list, name: bytes) -> str:
    for k, v in headers:
        if k == name:
            return v.decode("latin-1")
    return ""


def _takes_positional(fn: Any) -> bool:
    """Whether ``fn`` (bound) takes at least one positional argument; ``True`` when its signature is unknown."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
             inspect.Parameter.VAR_POSITIONAL)
    return any(p.kind in kinds for p in params)


class _Conn(wire.FrameProtocol):
    def __init__(self, replica: "ReplicaActor"):
        super().__init__()
        self.replica = replica
        self.tasks: dict[int, asyncio.Task] = {}  # a request's task, until it finishes (it removes itself)
        self.windows: dict[int, wire.Window] = {}  # a streaming request's flow control, until it finishes
        self.sockets: dict[int, websocket.ReplicaSocket] = {}  # the open WebSockets, by stream

    async def send_chunk(self, stream: int, kind: int, payload: bytes) -> None:
        """Send one chunk of a stream once the caller has room for it (``wire.STREAM_WINDOW``)."""
        w = self.windows.get(stream)
        if w is None:
            w = self.windows[stream] = wire.Window()
        await w.take()
        self.send(stream, kind, payload)

    def finished(self, stream: int) -> None:
        self.tasks.pop(stream, None)
        self.windows.pop(stream, None)
        self.sockets.pop(stream, None)

    def on_frame(self, stream: int, kind: int, payload: bytes) -> None:
        if kind == wire.CREDIT:
            w = self.windows.get(stream)
            if w is not None:
                w.credit()
            return
        if kind == wire.CANCEL:
            task = self.tasks.pop(stream, None)
            if task is not None:
                task.cancel()
            return
        if kind == wire.REQ_HTTP:
            coro = self.replica._serve_http(self, stream, payload)
        elif kind == wire.REQ_CALL:
            coro = self.replica._serve_call(self, stream, payload)
        elif kind >= wire.WS_ACCEPT:  # a WebSocket's message or close, from its client
            sock = self.sockets.get(stream)
            if sock is not None:
                sock.feed(kind, payload)
            return
        elif kind == wire.REQ_WS:
            self.sockets[stream] = websocket.ReplicaSocket(self, stream)
            coro = self.replica._serve_ws(self, stream, payload)
        else:  # MODELS: a caller routing by model asks what this replica holds
            self.send(stream, wire.RESP_VALUE, pickle.dumps(multiplex.held(), protocol=5))
            return
        self.tasks[stream] = cast(asyncio.AbstractEventLoop, self._loop).create_task(coro)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.replica.conns.add(self)

    def on_lost(self, exc: Exception | None) -> None:
        self.replica.conns.discard(self)
        for task in list(self.tasks.values()):
            task.cancel()


def _raised_here(exc: BaseException) -> bool:
    """Whether the replica raised ``exc`` itself (a call to a method the class lacks, a result of the wrong kind):
    its traceback ends in this module, holds no user code, and the message says everything."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_filename == __file__


def _call_of(payload: bytes) -> tuple:
    """A handle call's (method, args, kwargs, streaming, model id, request id, route); an error for its caller if
    it will not unpickle."""
    try:
        return wire.loads(payload)
    except Exception as exc:  # noqa: BLE001 - whatever unpickling raised, the caller hears of it
        raise MusterError(
            f"the replica could not read the call's arguments: {type(exc).__name__}: {exc}. Fix: define their "
            "classes in a module the replica can import (a file beside the script, installed code), not only in "
            "the driver's running session."
        ) from exc


class ReplicaActor:
    """The object the runtime hosts in a replica's process."""

    def __init__(self, spec: ReplicaSpec):
        user_metrics._exported_by_serve()  # stats() hands them to the controller, with the replica's tags
        os.environ.update(spec.config.env_vars())
        self.logs = replica_logging.ReplicaLogs(spec.app, spec.deployment, spec.replica_id,
                                                spec.config.logging_config)
        self.spec = spec
        self.config = spec.config
        self.where = f"deployment {spec.deployment!r} (replica {spec.replica_id})"
        self.loop = eventloop.get_loop()
        router.set_table(spec.table)
        self.pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(4, spec.config.max_ongoing_requests), thread_name_prefix="muster-replica"
        )
        self.ongoing = 0
        self.served = 0
        self.errors = 0
        self.started = time.monotonic()  # its stats say how long it has been up: the first round's rate spans that
        self.latency_ms: metrics.Unacked[float] = metrics.Unacked(maxlen=20000)  # finished requests', until read
        self._methods: dict[str, tuple[Any, bool]] = {}
        self._wants_request: dict[str, bool] = {}  # does __call__ take the Request (see _http_args)
        rank = replica_context.ReplicaRank(spec.rank, 0, spec.rank)  # one node's ranks (see ReplicaSpec.rank)
        replica_context.set_deployment_actors(spec.deployment_actors or {})
        if spec.placement_group is not None:  # what it starts goes into its group, as Ray's replica's does
            worker_side.adopt_placement_group(spec.placement_group, spec.config.resources())
        replica_context._set(replica_context.ReplicaContext(
            replica_context.ReplicaID._of_tag(spec.replica_id), None, spec.config, rank, spec.world_size,
            gang_context=spec.gang,
            code_version=spec.code_version or None))
        target = spec.target.load() if isinstance(spec.target, TargetRef) else spec.target
        self.target = target
        self.asgi = getattr(target, "__serve_asgi_app__", None)
        if inspect.isfunction(self.asgi) and not _takes_positional(self.asgi):  # a factory: build the app here
            self.asgi = self.asgi()
        self._finalized = False
        if inspect.isclass(target):  # on the Serve loop, as in Ray (an async __init__ is awaited)
            self.obj = eventloop.run_sync(worker_side.construct(target, spec.init_args, spec.init_kwargs))
        else:
            self.obj = target
        replica_context._set(replica_context.ReplicaContext(
            replica_context.ReplicaID._of_tag(spec.replica_id), self.obj, spec.config, rank, spec.world_size,
            gang_context=spec.gang,
            code_version=spec.code_version or None))
        self.autoscaling_stats = autoscaling_stats.AutoscalingStats(self.obj, self.where)
        auto = self.config.autoscaling_config
        if auto is not None:  # Ray calls record_autoscaling_stats only then
            self.autoscaling_stats.start(autoscaling_stats.sample_period(auto.look_back_period_s,
                                                                         auto.metrics_interval_s))
        self.conns: set[_Conn] = set()  # the callers connected now (told of the models held, see _models_changed)
        self._models_told = True
        if multiplex.is_multiplexed(target):  # its callers route by model: tell them what it holds
            multiplex.on_change(self._models_changed)
        if self.asgi is not None and inspect.isclass(target):
            from muster.serve._internal.ingress_fastapi import bind_routes

            self.asgi = bind_routes(self.asgi, target, self.obj)
        self.lifespan: asgi_lifespan.AppLifespan | None = None
        if self.asgi is not None:  # its lifespan/startup handlers, before it serves (as in Ray)
            self.lifespan = eventloop.run_sync(asgi_lifespan.started(self.asgi, self.where))
        if spec.config.user_config is not None:
            self.reconfigure(spec.config.user_config)
        self.sem = eventloop.run_sync(self._make_semaphore())
        if spec.socket_path.startswith("tcp:"):  # another node may call: listen on this node's address
            from muster.core import settings

            host = settings.node_identity()[1] or "127.0.0.1"
            self.server = eventloop.run_sync(self.loop.create_server(lambda: _Conn(self), host, 0), timeout=30)
            self._address = f"tcp:{host}:{self.server.sockets[0].getsockname()[1]}"
        else:
            self.server = eventloop.run_sync(
                self.loop.create_unix_server(lambda: _Conn(self), spec.socket_path), timeout=30
            )
            self._address = spec.socket_path

    def _models_changed(self) -> None:
        """A model started loading, was evicted or failed: tell every caller once this loop turn ends."""
        if self._models_told:
            self._models_told = False
            self.loop.call_soon_threadsafe(self._tell_models)

    def _tell_models(self) -> None:
        self._models_told = True
        payload = pickle.dumps(multiplex.held(), protocol=5)
        for conn in list(self.conns):
            conn.send(0, wire.MODELS, payload)

    def address(self) -> str:
        """Where callers reach this replica: a unix socket path, or ``tcp:host:port``."""
        return self._address

    async def _make_semaphore(self) -> asyncio.Semaphore:
        return asyncio.Semaphore(self.config.max_ongoing_requests)

    # -- control (actor calls, on the actor's main thread) --------------------
    def _run_user(self, name: str, *args: Any) -> Any:
        fn = getattr(self.obj, name, None)
        if fn is None:
            return None
        if inspect.iscoroutinefunction(fn):
            return eventloop.run_sync(fn(*args))
        return fn(*args)

    def check_health(self) -> bool:
        self._run_user("check_health")
        return True

    def reconfigure(self, user_config: Any) -> None:
        if not hasattr(self.obj, "reconfigure"):
            from muster.serve.exceptions import RayServeException

            raise RayServeException(
                f"{self.where} got user_config={user_config!r} but its class has no reconfigure(self, config) "
                "method; add one or drop user_config."
            )
        self._run_user("reconfigure", user_config)

    def websocket_routes(self) -> bool | None:
        """Whether the app this replica serves, as built here (by a factory, after ``__init__``), has WebSocket
        routes; None when it cannot be told (a bare ASGI app). The controller picks the ingress's server by it."""
        return server_choice.app_websockets(self.asgi)

    def update_routes(self, table: router.RouteTable) -> None:
        router.set_table(table)

    def stats(self, acks: dict[str, int] | None = None) -> dict[str, Any]:
        """Counters, and the samples the controller does not have yet. ``acks`` is the ``"acks"`` of
        the last snapshot it used; a snapshot it dropped (late) or never got loses no sample."""
        acks = acks or {}
        lat, lat_ack = self.latency_ms.read(acks.get("latency_ms", 0))
        snap: dict[str, Any] = {"ongoing": self.ongoing, "served": self.served, "errors": self.errors,
                                "latency_ms": lat, "acks": {"latency_ms": lat_ack},
                                "up_s": time.monotonic() - self.started}
        hook = getattr(self.obj, metrics.LLM_METRICS_HOOK, None)
        if callable(hook):
            try:
                snap["llm"] = hook(acks.get("ttft_ms", 0))
                snap["acks"]["ttft_ms"] = snap["llm"].pop("ack")
            except Exception as exc:  # noqa: BLE001 - metrics never fail the replica
                print(f"[serve] {self.where}: reading its LLM metrics failed: {exc!r}", file=sys.stderr, flush=True)
        custom_stats, custom_ack = self.autoscaling_stats.take(acks.get("autoscaling_stats", 0))
        snap["acks"]["autoscaling_stats"] = custom_ack
        if custom_stats:
            snap["autoscaling_stats"] = custom_stats  # [(age in seconds, {metric: value})], oldest first
        waiting = router.queued_counts()  # its calls to deployments with no running replica: demand for them
        if waiting:
            snap["waiting"] = waiting
        custom = user_metrics.REGISTRY.snapshot()
        if custom:
            snap["custom"] = custom
        return snap

    def drain(self, timeout_s: float) -> int:
        """Wait (bounded) until no request is in flight, then run the object's ``__del__`` (as Ray
        Serve does on a graceful stop: an engine it started stops with it); return how many were left."""
        self.autoscaling_stats.stop()
        deadline = time.monotonic() + timeout_s
        while self.ongoing and time.monotonic() < deadline:
            time.sleep(0.01)
        if self.lifespan is not None:  # the app's shutdown handlers; then the object's __del__
            stop_s = max(deadline - time.monotonic(), 0.0) + 3.0
            eventloop.run_sync(self.lifespan.stop(stop_s), timeout=stop_s + 1.0)
        finalize = getattr(type(self.obj), "__del__", None) if inspect.isclass(self.target) else None
        if finalize is not None and not self._finalized:
            self._finalized = True
            try:
                finalize(self.obj)
            except Exception as exc:  # noqa: BLE001 - the replica stops anyway; say why it was not clean
                print(f"[serve] {self.where}: __del__ raised {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return self.ongoing

    # -- requests (on the Serve loop) -----------------------------------------
    def _method(self, name: str) -> Any:
        if not inspect.isclass(self.target):  # as Ray's: a function deployment runs for any method name
            return self.obj
        fn = getattr(self.obj, name, None)
        if fn is None or not callable(fn):
            raise self._no_method(name)
        return fn

    def _no_method(self, name: str) -> Exception:
        """Ray's error for a call to a method the deployment lacks, naming the ones it has."""
        from muster.serve.exceptions import RayServeException

        has = methods_of(self.obj)
        if any("__call__" in vars(k) for k in type(self.obj).__mro__):
            has.append("__call__")
        fix = ("define __call__(self, request) to answer HTTP" if name == "__call__" else
               f"call one of them (handle.<method>.remote(...)) or define {name!r} in the class")
        return RayServeException(f"{self.where} has no method {name!r}; {no_such_method(name, has)}. Fix: {fix}.")

    def _resolve(self, name: str) -> tuple[Any, bool]:
        """``(method, runs on the loop)``: async functions and generators run on the loop, the rest on the pool."""
        got = self._methods.get(name)
        if got is None:
            fn = self._method(name)
            inline = inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn) or \
                inspect.isgeneratorfunction(fn)
            got = (fn, inline)
            if name not in getattr(self.obj, "__dict__", {}):  # set on the instance: may change, not cached
                self._methods[name] = got
        return got

    def _http_args(self, scope: dict, receive: Any) -> tuple:
        """``(Request,)``, or ``()`` when ``__call__`` takes no positional parameter (Ray passes the
        request only to a callable that takes one: ``def __call__(self)`` and ``def f()`` serve HTTP too)."""
        wants = self._wants_request.get("__call__")
        if wants is None:
            wants = _takes_positional(self._resolve("__call__")[0])
            if "__call__" in self._methods:  # cached the same way as the method itself
                self._wants_request["__call__"] = wants
        return (_request_class()(scope, receive),) if wants else ()

    async def _invoke(self, name: str, args: tuple, kwargs: dict) -> Any:
        fn, inline = self._resolve(name)
        if inline:
            result = fn(*args, **kwargs)
        else:
            ctx = contextvars.copy_context()
            result = await self.loop.run_in_executor(self.pool, functools.partial(ctx.run, fn, *args, **kwargs))
        if inspect.isawaitable(result):
            result = await result
        return result

    async def _iterate(self, result: Any) -> Any:
        if inspect.isasyncgen(result):
            async for item in result:
                yield item
            return
        done = object()
        while True:
            item = await self.loop.run_in_executor(self.pool, next, result, done)
            if item is done:
                return
            yield item

    def _failed(self, proto: _Conn, stream: int, exc: BaseException, what: str) -> int:
        """Answer the request with its error; the HTTP status that says it."""
        self.errors += 1
        here = _raised_here(exc)  # before error_for, which drops exc's traceback (it crosses as text)
        err = responses.error_for(exc, f"{self.where} {what}")
        if err.status >= 500 and here:  # the call's fault (a method the class lacks): one line
            print(f"[serve] {self.where}: {what} failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        elif err.status >= 500:  # user code's: its traceback
            print(f"[serve] {self.where}: {what} failed:\n{err.traceback}", file=sys.stderr, flush=True)
        proto.send(stream, wire.RESP_ERROR, wire.dumps(err))
        return err.status

    async def _serve_http(self, proto: _Conn, stream: int, payload: bytes) -> None:
        self.ongoing += 1
        t0 = time.perf_counter()
        method, route, status = "HTTP", "/", "CANCELLED"  # what its access line says (a file in logs_dir)
        try:
            async with self.sem:
                fields, body = wire.parse_http_request(payload)
                scope = _scope(fields)
                if self.lifespan is not None and self.lifespan.state:  # what its lifespan yielded, per request
                    scope["state"] = dict(self.lifespan.state)
                method, route = fields[0], scope["root_path"] or "/"
                # the model the request names, for get_multiplexed_model_id() in any deployment, as in Ray (an
                # ingress passing it on to a multiplexed one, say): a look over the headers, ~0.4 us
                multiplex.set_model_id(multiplex.header_model_id(scope["headers"]))
                replica_context._set_request(_header(scope["headers"], b"x-request-id"), scope["root_path"] or "/")
                receive = _receive_once(body)
                sender = responses.FrameSender(proto, stream)
                try:
                    if self.asgi is not None:
                        await self.asgi(scope, receive, sender)
                    else:
                        result = await self._invoke("__call__", self._http_args(scope, receive), {})
                        await self._reply_http(proto, stream, result, scope, receive, sender)
                    if sender.state != 2:
                        await sender({"type": "http.response.body", "body": b"", "more_body": False})
                    self.served += 1
                    status = str(sender.status)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - user code: 500 (or its own status), replica lives on
                    status = str(self._failed(proto, stream, exc, f"{fields[0]} {fields[1]}"))
        finally:
            self.ongoing -= 1
            self.latency_ms.add((time.perf_counter() - t0) * 1e3)
            proto.finished(stream)
            if self.logs.access:
                self.logs.request_done(method, route, status, t0)

    async def _serve_ws(self, proto: _Conn, stream: int, payload: bytes) -> None:
        """One WebSocket connection, for its lifetime: the app's handler holds one of ``max_ongoing_requests``
        (as in Ray, an open connection is an ongoing request)."""
        self.ongoing += 1
        sock = proto.sockets[stream]
        fields, _ = wire.parse_http_request(payload)
        try:
            async with self.sem:
                scope = websocket.scope_of(_scope(fields))
                if self.lifespan is not None and self.lifespan.state:
                    scope["state"] = dict(self.lifespan.state)
                multiplex.set_model_id(multiplex.header_model_id(scope["headers"]))
                if self.asgi is None:  # refused (403), naming the fix
                    proto.send(stream, wire.RESP_ERROR, wire.dumps(wire.RemoteError(403, (
                        f"{self.where} serves no WebSocket: it is no @serve.ingress app. Fix: serve WebSockets from "
                        "a FastAPI app's @app.websocket routes, with @serve.ingress(app) on the deployment."))))
                    return
                failed = await sock.run(self.asgi, scope)
                if failed is None:
                    self.served += 1
                else:  # raised before accepting: the upgrade is refused with its status; after: closed with 1011
                    self._failed(proto, stream, failed, f"WebSocket {fields[1]}")
        finally:
            self.ongoing -= 1
            proto.finished(stream)

    async def _reply_http(self, proto: _Conn, stream: int, result: Any, scope: dict, receive: Any,
                          sender: responses.FrameSender) -> None:
        simple = responses.simple_body(result)
        if simple is not None:
            proto.send(stream, wire.RESP_FULL, simple)
            sender.state = 2
            return
        from starlette.responses import Response

        if isinstance(result, Response):
            await result(scope, receive, sender)
            return
        if responses.is_stream(result):
            proto.send(stream, wire.RESP_HEAD, wire.dumps((200, [(b"content-type", b"text/plain; charset=utf-8")])))
            sender.state = 1
            async for item in self._iterate(result):
                await proto.send_chunk(stream, wire.RESP_BODY, responses.chunk_bytes(item))
            proto.send(stream, wire.RESP_END)
            sender.state = 2
            return
        raise InvalidTypeError(
            f"__call__ returned {type(result).__name__}, which is not an HTTP response: return a dict/list (JSON, "
            "numpy arrays and datetimes in it too), str, bytes, a starlette Response, or a generator (streamed)."
        )

    async def _serve_call(self, proto: _Conn, stream: int, payload: bytes) -> None:
        self.ongoing += 1
        t0 = time.perf_counter()
        method, status = "a handle call", "CANCELLED"
        try:
            async with self.sem:
                try:
                    method, args, kwargs, streaming, model_id, request_id, route = _call_of(payload)
                    if model_id:
                        multiplex.set_model_id(model_id)
                    replica_context._set_request(request_id, route)
                    result = await self._invoke(method, args, kwargs)
                    if streaming:
                        if not responses.is_stream(result):
                            raise InvalidTypeError(
                                f"{method} returned {type(result).__name__}, not a generator, but the handle asked "
                                "for a stream; drop .options(stream=True) or make the method yield."
                            )
                        async for item in self._iterate(result):
                            await proto.send_chunk(stream, wire.RESP_ITEM, wire.dumps(item))
                        proto.send(stream, wire.RESP_END)
                    else:
                        if responses.is_stream(result):
                            raise InvalidTypeError(
                                f"{method} is a generator; call it through handle.options(stream=True)."
                            )
                        proto.send(stream, wire.RESP_VALUE, wire.dumps(result))
                    self.served += 1
                    status = "OK"
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - goes back to the caller
                    self._failed(proto, stream, exc, f"{method}()")
                    status = "ERROR"
        finally:
            self.ongoing -= 1
            self.latency_ms.add((time.perf_counter() - t0) * 1e3)
            proto.finished(stream)
            if self.logs.access:
                self.logs.request_done("CALL", method, status, t0)
