"""``DeploymentHandle``: call a deployment from Python (the driver, or another replica).

``handle.remote(...)`` / ``handle.method.remote(...)`` return at once with a
:class:`DeploymentResponse` (``await`` it, or ``.result(timeout_s=)``);
``handle.options(stream=True)`` returns a :class:`DeploymentResponseGenerator`
(``async for`` / ``for``).  Calls travel the same router and socket as HTTP
requests; a ``DeploymentResponse`` passed as a top-level argument is awaited first,
so calls chain without a round trip through the caller.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import pickle
from typing import Any, AsyncIterator, Iterator

from muster.exceptions import GetTimeoutError, InvalidArgumentError, InvalidTypeError, checked_timeout
from muster.serve import context
from muster.serve._internal import eventloop, router, streams, wire
from muster.serve.exceptions import RequestCancelledError
from muster.tasks.objects import ObjectRef

_CALL_TIMEOUT_S = 30.0  # waiting for room on a replica; the call itself is unbounded, as in Ray


def _not_sendable(what: str) -> Exception:
    from muster.serve.exceptions import RayServeException

    if what == "DeploymentResponseGenerator":
        return RayServeException(
            "a DeploymentResponseGenerator (a streaming call's results) cannot be passed to another handle call, "
            "as in Ray. Fix: iterate it (`async for item in gen`) and pass the items, or a list of them."
        )
    if what == "DeploymentBroadcastResponse":
        return RayServeException("a DeploymentBroadcastResponse cannot be sent to another process: pass its "
                                 "results (`response.results()`, `await response.results_async()`).")
    return RayServeException(
        f"a {what} cannot be sent to another process: only a top-level argument of a handle call is passed on "
        "(resolved to its value first), as in Ray. Fix: pass it as an argument of its own (handle.remote(response)), "
        "await it (`await response`, `response.result()`) and pass the value, or, to pass it by reference inside "
        "a list or dict, pass `await response._to_object_ref()` (`._to_object_ref_sync()` outside async code): "
        "an ObjectRef the callee can `await` or `muster.get`."
    )


class DeploymentResponse:
    """The future result of one handle call."""

    def __init__(self, fut: "asyncio.Future | concurrent.futures.Future", request_id: str = ""):
        self._fut = fut
        self._cancelled = False
        self._request_id = request_id

    @property
    def request_id(self) -> str:
        """The id the call carries (Ray's): that of the request the caller serves, else a new one."""
        return self._request_id

    def __reduce__(self) -> Any:
        raise _not_sendable("DeploymentResponse")

    def __await__(self) -> Any:
        return self._awaited().__await__()

    async def _awaited(self) -> Any:
        fut = self._fut
        try:
            if isinstance(fut, concurrent.futures.Future):
                return await asyncio.wrap_future(fut)
            if eventloop.on_loop():
                return await fut
            return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_await(fut), eventloop.get_loop()))
        except (asyncio.CancelledError, concurrent.futures.CancelledError):
            if self._cancelled:  # this response's own cancel, not the awaiting task's
                raise RequestCancelledError() from None
            raise

    def result(self, *, timeout_s: float | None = None) -> Any:
        """Block until the call finishes and return its value (not from inside an async method).

        Raises:
            GetTimeoutError: it did not finish within ``timeout_s`` (a ``TimeoutError``, as Ray's
                ``ray.exceptions.GetTimeoutError``).
            InvalidArgumentError / InvalidTypeError: ``timeout_s`` is negative or not a number (Ray's
                ``results()`` refuses a negative one too).
            The replica's exception, when the call raised.
        """
        timeout_s = checked_timeout("DeploymentResponse.result", timeout_s, "timeout_s")
        fut = self._fut
        if eventloop.on_loop():
            raise RuntimeError(
                "DeploymentResponse.result() blocks, and was called on the event loop that must produce the "
                "result; use `await response` inside async methods."
            )
        if not isinstance(fut, concurrent.futures.Future):
            fut = asyncio.run_coroutine_threadsafe(_await(fut), eventloop.get_loop())
        try:
            return fut.result(timeout_s)
        except concurrent.futures.TimeoutError:
            raise GetTimeoutError(f"the deployment call did not finish within timeout_s={timeout_s}; wait longer, "
                                  "or see serve.status() for a deployment that is not running.") from None
        except (asyncio.CancelledError, concurrent.futures.CancelledError):
            if self._cancelled:
                raise RequestCancelledError() from None
            raise

    def cancel(self) -> None:
        """Cancel the call (in the replica too, once it runs there); waiting on it then raises
        ``RequestCancelledError``, as in Ray."""
        self._cancelled = True
        loop = eventloop.get_loop()
        loop.call_soon_threadsafe(self._fut.cancel)

    def cancelled(self) -> bool:
        """Whether :meth:`cancel` was called (the call may have finished first), as Ray's."""
        return self._cancelled

    async def _to_value(self) -> Any:
        return await self

    async def _to_object_ref(self) -> Any:
        """The call's result as a muster ``ObjectRef`` (Ray's), to pass to a task or ``muster.get``;
        a call that raised gives a ref whose ``get`` raises. Here the ref is made once the result
        is in (Ray's may come earlier)."""
        from muster.tasks import objects

        try:
            value = await self
        except Exception as exc:  # noqa: BLE001 - handed on in the ref, as Ray's ref would carry it
            return objects.failed(exc)
        return objects.put(value)

    def _to_object_ref_sync(self) -> Any:
        """:meth:`_to_object_ref` from synchronous code (not on the Serve event loop)."""
        from muster.tasks import objects

        try:
            value = self.result()
        except Exception as exc:  # noqa: BLE001 - as above
            return objects.failed(exc)
        return objects.put(value)


async def _await(fut: Any) -> Any:
    return await fut


class DeploymentResponseGenerator:
    """The items a streaming handle call yields, as they come."""

    def __init__(self, call: "_StreamCall"):
        self._call = call
        self._cancelled = False

    @property
    def request_id(self) -> str:
        """The id the call carries (Ray's): that of the request the caller serves, else a new one."""
        return self._call.req[0]

    def __reduce__(self) -> Any:
        raise _not_sendable("DeploymentResponseGenerator")

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        try:
            if eventloop.on_loop():
                return await self._call.next()
            return await asyncio.wrap_future(eventloop.submit(self._call.next()))
        except (StopAsyncIteration, asyncio.CancelledError, concurrent.futures.CancelledError):
            if self._cancelled:  # as Ray's: a cancelled stream raises, it does not just end
                raise RequestCancelledError() from None
            raise

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        try:
            return eventloop.run_sync(self._call.next())
        except (StopAsyncIteration, concurrent.futures.CancelledError):
            if self._cancelled:
                raise RequestCancelledError() from None
            raise StopIteration from None

    def __await__(self) -> Any:
        raise InvalidTypeError("a DeploymentResponseGenerator (a stream=True call) cannot be awaited; iterate it "
                               "with `async for item in response`.")

    def result(self, *, timeout_s: float | None = None) -> Any:
        """Refused, as in Ray: a stream has no one result."""
        raise InvalidTypeError("a DeploymentResponseGenerator (a stream=True call) has no .result(); iterate it "
                               "with `for item in response` (or `async for`), or call without stream=True.")

    def cancel(self) -> None:
        """Stop the call, in the replica too; iterating it then raises ``RequestCancelledError``, as in Ray."""
        self._cancelled = True
        eventloop.get_loop().call_soon_threadsafe(self._call.close)

    def cancelled(self) -> bool:
        """Whether :meth:`cancel` was called, as Ray's."""
        return self._cancelled

    def __del__(self) -> None:
        """A stream dropped before its end closes its call (the call is sent at once: it would hold a replica
        slot, and its generator would run on, for no one)."""
        call = getattr(self, "_call", None)
        if call is not None and not call.finished:
            with contextlib.suppress(RuntimeError):  # the loop (or the interpreter) is gone
                eventloop.get_loop().call_soon_threadsafe(call.close)


def _pending(value: Any) -> bool:
    """Whether a call's argument is a value still to come: a ``DeploymentResponse``, or an ``ObjectRef``
    (Ray resolves a top-level ``ObjectRef`` argument of a handle call, as of any actor call; nested ones stay)."""
    return isinstance(value, (DeploymentResponse, ObjectRef))


async def _resolve(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    if any(_pending(a) for a in args) or any(_pending(v) for v in kwargs.values()):
        args = tuple([await a if _pending(a) else a for a in args])
        kwargs = {k: (await v if _pending(v) else v) for k, v in kwargs.items()}
    return args, kwargs


#: a call's ``(request id, route)``: the request it serves, for the callee's logs and request context
Req = tuple[str, str]


def _request(method: str, args: tuple, kwargs: dict, stream: bool, model_id: str, req: Req) -> tuple:
    """A handle call as it travels: ``multiplexed_model_id`` ("" for none), then its request id and route."""
    return (method, args, kwargs, stream, model_id, *req)


def _call_now(app: str, dep: str, method: str, args: tuple, kwargs: dict, model_id: str,
              req: Req) -> asyncio.Future | None:
    """Send a call at once, with no task (on the Serve loop, a replica with room): the future of its answer.

    ``None`` when that cannot be done (an argument is a pending ``DeploymentResponse``, arguments that only
    cloudpickle, no room): the caller then goes through :func:`_call`.
    """
    if any(_pending(a) for a in args) or any(_pending(v) for v in kwargs.values()):
        return None
    try:
        payload = pickle.dumps(_request(method, args, kwargs, False, model_id, req), protocol=5)
    except Exception:  # noqa: BLE001 - wire.dumps falls back to cloudpickle in _call
        return None
    r = router.registry.router(app, dep)
    got = r.open_now(wire.REQ_CALL, payload, model_id)
    if got is None:
        return None
    replica, stream = got
    fut = asyncio.get_running_loop().create_future()

    def answered(kind: int, data: bytes) -> None:
        r.release(replica)
        if fut.done():
            return
        try:
            if kind == wire.RESP_VALUE:
                fut.set_result(wire.loads(data))
            elif kind == wire.RESP_ERROR:
                router.raise_remote(wire.loads(data))
            else:
                raise RuntimeError(f"unexpected answer (frame kind {kind}) to a call of {dep}.{method}")
        except BaseException as exc:  # noqa: BLE001 - the caller gets it from the future
            fut.set_exception(exc)

    def given_up(f: asyncio.Future) -> None:
        if f.cancelled() and not stream.done:
            stream.on_end = None
            stream.cancel()
            r.release(replica)

    stream.on_end = answered
    fut.add_done_callback(given_up)
    return fut


async def _call(app: str, dep: str, method: str, args: tuple, kwargs: dict, model_id: str, req: Req,
                replica: Any = None) -> Any:
    """A call's value, from a replica the router picks, or from ``replica`` (one of ``handle.broadcast``'s)."""
    args, kwargs = await _resolve(args, kwargs)
    r = router.registry.router(app, dep)
    payload = wire.dumps(_request(method, args, kwargs, False, model_id, req))
    if replica is None:
        replica, stream = await r.open_stream(wire.REQ_CALL, payload, _CALL_TIMEOUT_S, model_id)
    else:
        stream = await r.open_on(replica, wire.REQ_CALL, payload)
    try:
        kind, payload = await stream.next()
    except asyncio.CancelledError:
        stream.cancel()
        raise
    finally:
        r.release(replica)
    if kind == wire.RESP_VALUE:
        return wire.loads(payload)
    if kind == wire.RESP_ERROR:
        return router.raise_remote(wire.loads(payload))
    raise RuntimeError(f"unexpected answer (frame kind {kind}) to a call of {dep}.{method}")


class _StreamCall:
    """A streaming call's state, living on the Serve loop. As in Ray, the call is sent when it is made
    (:meth:`start`), not when its first item is asked for: calls made together run together (a batch, say)."""

    def __init__(self, app: str, dep: str, method: str, args: tuple, kwargs: dict, model_id: str, req: Req):
        self.key, self.method, self.args, self.kwargs, self.model_id = (app, dep), method, args, kwargs, model_id
        self.req = req
        self.stream: streams.Stream | None = None
        self.replica: Any = None
        self.finished = False
        self.opening: asyncio.Future | None = None

    def start(self) -> None:
        """Send the call (on the Serve loop); a failure to send is raised by the first :meth:`next`."""
        if self.opening is None and not self.finished:
            self.opening = asyncio.ensure_future(self._open())
            self.opening.add_done_callback(lambda f: f.cancelled() or f.exception())  # raised by next() instead

    async def _open(self) -> None:
        args, kwargs = await _resolve(self.args, self.kwargs)
        payload = wire.dumps(_request(self.method, args, kwargs, True, self.model_id, self.req))
        self.replica, self.stream = await router.registry.router(*self.key).open_stream(
            wire.REQ_CALL, payload, _CALL_TIMEOUT_S, self.model_id)

    async def next(self) -> Any:
        if self.finished:
            raise StopAsyncIteration
        if self.stream is None:
            self.start()
            assert self.opening is not None
            await self.opening
        assert self.stream is not None
        try:
            kind, payload = await self.stream.next()
        except asyncio.CancelledError:
            self.close()
            raise
        if kind == wire.RESP_ITEM:
            return wire.loads(payload)
        self.close()
        if kind == wire.RESP_ERROR:
            router.raise_remote(wire.loads(payload))
        raise StopAsyncIteration

    def close(self) -> None:
        if not self.finished:
            self.finished = True
            if self.stream is not None:
                self.stream.cancel()
                router.registry.router(*self.key).release(self.replica)
            elif self.opening is not None:  # still being sent: open_stream releases what it took
                self.opening.cancel()


#: handle.options keywords besides method_name and stream (all but multiplexed_model_id have no effect here)
_OTHER_OPTIONS = ("multiplexed_model_id", "session_id", "request_serialization", "response_serialization",
                      "use_new_handle_api")
_RAY_SERIALIZATIONS = ("cloudpickle", "pickle", "msgpack", "orjson", "noop")


class DeploymentBroadcastResponse:
    """The results of one call to every replica of a deployment (Ray 2.60's, from ``handle.broadcast``)."""

    def __init__(self, fut: "asyncio.Future | concurrent.futures.Future"):
        self._fut = fut

    def __reduce__(self) -> Any:
        raise _not_sendable("DeploymentBroadcastResponse")

    @staticmethod
    def _checked(outcomes: list[Any], return_exceptions: bool) -> list[Any]:
        if not return_exceptions:
            for o in outcomes:
                if isinstance(o, BaseException):
                    raise o
        return outcomes

    def results(self, *, timeout_s: float | None = None, return_exceptions: bool = False) -> list[Any]:
        """One result per replica that ran when ``broadcast`` was called (not from inside an async method).

        Raises:
            TimeoutError: not every replica answered within ``timeout_s``.
            The first replica's exception, unless ``return_exceptions`` (then it is in the list).
        """
        timeout_s = checked_timeout("DeploymentBroadcastResponse.results", timeout_s, "timeout_s")
        if eventloop.on_loop():
            raise RuntimeError("DeploymentBroadcastResponse.results() blocks the event loop that must produce the "
                               "results; use `await response.results_async()` inside async methods.")
        fut = self._fut
        if not isinstance(fut, concurrent.futures.Future):
            fut = asyncio.run_coroutine_threadsafe(_await(fut), eventloop.get_loop())
        try:
            return self._checked(fut.result(timeout_s), return_exceptions)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"the broadcast did not finish within timeout_s={timeout_s}.") from None

    async def results_async(self, *, timeout_s: float | None = None, return_exceptions: bool = False) -> list[Any]:
        """:meth:`results`, awaited."""
        timeout_s = checked_timeout("DeploymentBroadcastResponse.results_async", timeout_s, "timeout_s")
        fut = self._fut
        if isinstance(fut, concurrent.futures.Future):
            waiting: Any = asyncio.wrap_future(fut)
        elif eventloop.on_loop():
            waiting = asyncio.shield(fut)
        else:
            waiting = asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_await(fut), eventloop.get_loop()))
        try:
            return self._checked(await asyncio.wait_for(waiting, timeout_s), return_exceptions)
        except asyncio.TimeoutError:
            raise TimeoutError(f"the broadcast did not finish within timeout_s={timeout_s}.") from None


async def _broadcast(app: str, dep: str, method: str, args: tuple, kwargs: dict, req: Req) -> list[Any]:
    """Call ``method`` on every replica of the deployment at once; each one's value, or its exception."""
    from muster.serve.exceptions import DeploymentUnavailableError

    args, kwargs = await _resolve(args, kwargs)
    r = router.registry.router(app, dep)
    replicas = r.replicas_now()
    if not replicas:
        raise DeploymentUnavailableError(f"handle.broadcast({method!r}): deployment {dep!r} of app {app!r} has no "
                                         "running replica (is the app running? serve.status() says).")
    calls = [_call(app, dep, method, args, kwargs, "", req, replica=rep) for rep in replicas]
    return list(await asyncio.gather(*calls, return_exceptions=True))


class _Shared:
    """What a handle shares with the handles its ``options()`` (and ``handle.method``) derive, as Ray's share one
    router: its id, and whether it was initialized (first routed: ``options``, ``remote``, ``broadcast``)."""

    __slots__ = ("handle_id", "initialized")

    def __init__(self) -> None:
        self.handle_id = os.urandom(6).hex()
        self.initialized = False


class DeploymentHandle:
    """Calls one deployment of one app; picklable, so it can be passed to other deployments."""

    def __init__(self, deployment_name: str, app_name: str = "default", *, method_name: str = "__call__",
                 stream: bool = False, multiplexed_model_id: str = "", _shared: _Shared | None = None):
        self.deployment_name, self.app_name = deployment_name, app_name
        self._method, self._stream, self._model_id = method_name, stream, multiplexed_model_id
        self._shared = _shared or _Shared()

    @property
    def deployment_id(self) -> "context.DeploymentID":
        """Ray's ``DeploymentID`` of the deployment this handle calls."""
        return context.DeploymentID(self.deployment_name, self.app_name)

    @property
    def handle_id(self) -> str:
        """Ray's: an id shared by this handle and those its ``options()`` made (a copy sent elsewhere gets a new
        one)."""
        return self._shared.handle_id

    @property
    def is_initialized(self) -> bool:
        """Whether the handle has routed yet, as Ray's: ``options()`` (and ``handle.method``), ``remote()`` and
        ``broadcast()`` initialize it; ``serve.run``'s handle, and one sent to another process, start without."""
        return self._shared.initialized

    def _init(self) -> None:
        """Mark the handle initialized and have this process's router for the deployment learn its replicas (as
        Ray's router starts following them when the handle is initialized)."""
        if self._shared.initialized:
            return
        self._shared.initialized = True
        key = (self.app_name, self.deployment_name)
        if eventloop.on_loop():
            router.registry.router(*key)
        else:
            eventloop.get_loop().call_soon_threadsafe(lambda: router.registry.router(*key))

    def running_replicas_populated(self) -> bool:
        """Ray's: whether this process's router has learned of running replicas of the deployment (``False`` until
        the handle is initialized; once ``True`` it stays so)."""
        if not self._shared.initialized:
            return False
        r = router.registry.routers.get((self.app_name, self.deployment_name))
        return r is not None and r.populated

    def shutdown(self) -> None:
        """Ray's ``handle.shutdown()``. Ray's stops the handle's router's metrics reporting; the handle still
        routes afterwards. muster's router is the process's, shared by every handle to the deployment, and holds
        nothing of this handle's, so there is nothing to stop: the handle stays usable, as Ray's does."""

    async def shutdown_async(self) -> None:
        """:meth:`shutdown`, awaited (Ray's, for code on an event loop)."""
        self.shutdown()

    def options(self, *, method_name: str | None = None, stream: bool | None = None,
                **others: Any) -> "DeploymentHandle":
        """A handle with other call options (``stream=True`` for generator methods). Ray's
        ``use_new_handle_api``, ``session_id`` (read only by Ray's experimental consistent-hash router: the
        default router, muster's, ignores it), ``request_serialization``/``response_serialization`` (Ray's
        gRPC transport's; muster's hop has its own) and ``_``-prefixed options are accepted and do nothing."""
        model_id = others.get("multiplexed_model_id")
        if model_id is not None and not isinstance(model_id, str):
            raise InvalidTypeError(f"handle.options(multiplexed_model_id={model_id!r}): a model id is a string.")
        if not isinstance(others.get("session_id", ""), str):
            raise InvalidTypeError(f"handle.options(session_id={others['session_id']!r}): a session id is a string.")
        for key in ("request_serialization", "response_serialization"):
            if others.get(key, "cloudpickle") not in _RAY_SERIALIZATIONS:
                raise InvalidArgumentError(f"handle.options({key}={others[key]!r}): use one of Ray's "
                                           f"{list(_RAY_SERIALIZATIONS)}.")
        unknown = sorted(k for k in others if not k.startswith("_") and k not in _OTHER_OPTIONS)
        if unknown:
            raise InvalidTypeError(f"handle.options(): unknown option(s) {unknown}; known: method_name, stream, "
                                   f"{', '.join(_OTHER_OPTIONS)}.")
        self._init()
        return DeploymentHandle(
            self.deployment_name, self.app_name, method_name=method_name or self._method,
            stream=self._stream if stream is None else stream,
            multiplexed_model_id=self._model_id if model_id is None else model_id, _shared=self._shared,
        )

    def __getattr__(self, name: str) -> "DeploymentHandle":
        if name.startswith("_"):
            raise AttributeError(name)
        if name in ("choose_replica", "dispatch"):  # Ray's handle methods, not deployment methods, as in Ray
            from muster._unsupported import raise_unsupported

            raise_unsupported("muster.serve.DeploymentHandle", name)
        h = self.options(method_name=name)
        self.__dict__[name] = h  # the next ``handle.name`` is a plain attribute
        return h

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """Call the deployment; returns a DeploymentResponse (or a generator with ``stream=True``) at once."""
        req = context._caller_request()  # read here: the call may run in another context (the Serve loop's)
        self._init()
        if self._stream:
            call = _StreamCall(self.app_name, self.deployment_name, self._method, args, kwargs, self._model_id, req)
            if eventloop.on_loop():
                call.start()
            else:
                eventloop.get_loop().call_soon_threadsafe(call.start)
            return DeploymentResponseGenerator(call)
        if eventloop.on_loop():
            fut = _call_now(self.app_name, self.deployment_name, self._method, args, kwargs, self._model_id, req)
            if fut is not None:
                return DeploymentResponse(fut, req[0])
            return DeploymentResponse(asyncio.ensure_future(
                _call(self.app_name, self.deployment_name, self._method, args, kwargs, self._model_id, req)), req[0])
        return DeploymentResponse(eventloop.submit(_call(self.app_name, self.deployment_name, self._method, args,
                                                         kwargs, self._model_id, req)), req[0])

    def broadcast(self, method_name: str, *args: Any, **kwargs: Any) -> DeploymentBroadcastResponse:
        """Call ``method_name`` on every running replica at once (Ray 2.60's): for control calls such as a cache
        reset, not the request path (``max_ongoing_requests`` and ``max_queued_requests`` do not hold it back).

        Returns:
            A :class:`DeploymentBroadcastResponse`: ``.results(timeout_s=, return_exceptions=)`` or
            ``await .results_async(...)``, one result per replica.
        """
        self._init()
        call = _broadcast(self.app_name, self.deployment_name, method_name, args, kwargs, context._caller_request())
        if eventloop.on_loop():
            return DeploymentBroadcastResponse(asyncio.ensure_future(call))
        return DeploymentBroadcastResponse(eventloop.submit(call))

    def __reduce__(self) -> Any:
        return (_rebuild, (self.deployment_name, self.app_name, self._method, self._stream, self._model_id))

    def __repr__(self) -> str:
        return f"DeploymentHandle(deployment='{self.deployment_name}')"  # Ray's, word for word


def _rebuild(dep: str, app: str, method: str, stream: bool, model_id: str = "") -> DeploymentHandle:
    return DeploymentHandle(dep, app, method_name=method, stream=stream, multiplexed_model_id=model_id)


def __getattr__(name: str) -> object:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.serve.handle", name)
