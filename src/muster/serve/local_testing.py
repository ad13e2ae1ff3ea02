"""``serve.run(app, _local_testing_mode=True)``, as Ray's: the app's deployments run in this process.

Each deployment of the app is made once, here (one instance whatever ``num_replicas`` says, its resources not
asked for), with no Serve started: no engine, no HTTP ingress on port 8000, nothing in ``serve.status()``. The
handle ``serve.run`` returns calls it on this process's Serve event loop (synchronous methods on a thread), so a
unit test reaches the app through handles, and a method's exception comes back as itself (a ``KeyError`` is a
``KeyError``, with no remote wrapper). HTTP is not served, as in Ray's local testing mode.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
from typing import Any, AsyncIterator, Iterator

from muster.exceptions import InvalidTypeError
from muster.serve._internal import eventloop
from muster.serve.deployment import Application
from muster.serve.exceptions import RayServeException
from muster.serve.handle import DeploymentHandle, DeploymentResponse
from muster.serve.multiplex import set_model_id


class _Instance:
    """One deployment's object (its class's instance, or its function), made in this process."""

    def __init__(self, target: Any, name: str):
        self.target, self.name = target, name

    def method(self, method: str) -> Any:
        if inspect.isfunction(self.target):
            return self.target
        fn = getattr(self.target, method, None)
        if fn is None or not callable(fn):
            known = sorted(n for n in dir(self.target) if not n.startswith("_") and callable(getattr(self.target, n)))
            raise RayServeException(f"deployment {self.name!r} has no method {method!r}; its methods: {known} "
                                    "(call one as handle.<method>.remote() or handle.options(method_name=...)).")
        return fn


async def _resolved(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The arguments with each ``DeploymentResponse`` among them replaced by its value, as Ray passes them."""
    args = tuple([await a if isinstance(a, DeploymentResponse) else a for a in args])
    kwargs = {k: await v if isinstance(v, DeploymentResponse) else v for k, v in kwargs.items()}
    return args, kwargs


async def _call(fn: Any, args: tuple, kwargs: dict, model_id: str, name: str) -> Any:
    set_model_id(model_id)
    args, kwargs = await _resolved(args, kwargs)
    if inspect.iscoroutinefunction(fn):
        return await fn(*args, **kwargs)
    ctx = contextvars.copy_context()  # the model id reaches the thread too
    out = await asyncio.get_running_loop().run_in_executor(None, functools.partial(ctx.run, fn, *args, **kwargs))
    if inspect.isgenerator(out) or inspect.isasyncgen(out):  # as Ray's local mode (and a replica) refuse it
        if inspect.isgenerator(out):
            out.close()
        raise InvalidTypeError(f"{name} returned a generator; call it through handle.options(stream=True) "
                               "to iterate what it yields.")
    return await out if inspect.isawaitable(out) else out


_DONE = object()  # a synchronous generator's end (StopIteration cannot cross a future)


class LocalResponseGenerator:
    """What a ``stream=True`` call of a local handle returns: iterate it (``for``/``async for``)."""

    def __init__(self, fn: Any, args: tuple, kwargs: dict, model_id: str, name: str):
        self._fn, self._args, self._kwargs, self._model_id, self._name = fn, args, kwargs, model_id, name
        self._gen: Any = None

    async def _next(self) -> Any:
        set_model_id(self._model_id)
        if self._gen is None:
            args, kwargs = await _resolved(self._args, self._kwargs)
            self._gen = self._fn(*args, **kwargs)
            if not (inspect.isgenerator(self._gen) or inspect.isasyncgen(self._gen)):
                raise InvalidTypeError(f"handle.options(stream=True) called {self._name}, which returned "
                                       f"{type(self._gen).__name__}, not a generator; use stream=True only for "
                                       "methods that yield.")
        if inspect.isasyncgen(self._gen):
            return await self._gen.__anext__()
        item = await asyncio.get_running_loop().run_in_executor(None, next, self._gen, _DONE)
        if item is _DONE:
            raise StopAsyncIteration
        return item

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        if eventloop.on_loop():
            return await self._next()
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._next(), eventloop.get_loop()))

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        try:
            return asyncio.run_coroutine_threadsafe(self._next(), eventloop.get_loop()).result()
        except StopAsyncIteration:
            raise StopIteration from None


class LocalDeploymentHandle(DeploymentHandle):
    """A handle to a deployment that runs in this process (``serve.run(..., _local_testing_mode=True)``)."""

    def __init__(self, instance: _Instance, app_name: str, *, method_name: str = "__call__", stream: bool = False,
                 multiplexed_model_id: str = ""):
        super().__init__(instance.name, app_name, method_name=method_name, stream=stream,
                         multiplexed_model_id=multiplexed_model_id)
        self._instance = instance

    def _init(self) -> None:
        self._shared.initialized = True  # no router: the deployment is in this process

    def running_replicas_populated(self) -> bool:
        return True

    def options(self, *, method_name: str | None = None, stream: bool | None = None,
                **others: Any) -> "DeploymentHandle":
        checked = super().options(method_name=method_name, stream=stream, **others)  # Ray's checks, and defaults
        return LocalDeploymentHandle(self._instance, self.app_name, method_name=checked._method,
                                     stream=checked._stream, multiplexed_model_id=checked._model_id)

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        fn = self._instance.method(self._method)
        if self._stream:
            return LocalResponseGenerator(fn, args, kwargs, self._model_id, f"{self.deployment_name}.{self._method}")
        fut: concurrent.futures.Future = asyncio.run_coroutine_threadsafe(
            _call(fn, args, kwargs, self._model_id, f"{self.deployment_name}.{self._method}"), eventloop.get_loop())
        return DeploymentResponse(fut)

    def broadcast(self, method_name: str, *args: Any, **kwargs: Any) -> Any:
        raise RayServeException(f"handle.broadcast({method_name!r}) on {self.deployment_name!r}: local testing mode "
                                "runs one instance and has no replicas to broadcast to; call "
                                f"handle.{method_name}.remote() instead, or serve.run(app) without it.")

    def __reduce__(self) -> Any:
        raise InvalidTypeError(f"a local testing mode handle to {self.deployment_name!r} lives in this process and "
                               "cannot be sent elsewhere; use serve.run(app) without _local_testing_mode for that.")

    def __repr__(self) -> str:
        return f"DeploymentHandle(deployment='{self.deployment_name}')"  # Ray's local mode handle is one too


def run_local(target: Application, name: str) -> DeploymentHandle:
    """Make the app's deployments here, inner ones first, and return a handle to its ingress."""
    if not isinstance(target, Application):
        raise InvalidTypeError(f"serve.run({target!r}, _local_testing_mode=True): give a bound deployment "
                               "(MyDeployment.bind(...)).")
    made: dict[int, LocalDeploymentHandle] = {}

    def sub(value: Any) -> Any:
        if isinstance(value, Application):
            return make(value)
        if isinstance(value, (list, tuple)):
            return type(value)(sub(v) for v in value)
        if isinstance(value, dict):
            return {k: sub(v) for k, v in value.items()}
        return value

    def make(node: Application) -> LocalDeploymentHandle:
        if id(node) not in made:
            dep = node.deployment
            args, kwargs = sub(node.args), sub(node.kwargs)
            target = dep.func_or_class
            obj = target(*args, **kwargs) if inspect.isclass(target) else target
            if dep.user_config is not None and hasattr(obj, "reconfigure"):
                out = obj.reconfigure(dep.user_config)
                if inspect.isawaitable(out):
                    asyncio.run_coroutine_threadsafe(_await(out), eventloop.get_loop()).result()
            made[id(node)] = LocalDeploymentHandle(_Instance(obj, dep.name), name)
        return made[id(node)]

    return make(target)


async def _await(awaitable: Any) -> Any:
    return await awaitable
