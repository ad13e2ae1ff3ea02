"""``@muster.remote`` on a class: ``Cls.remote(...)`` starts an actor.

Calls on one actor run in the order they were made: each handle has one
sender thread that waits for the actor to exist (or to restart), resolves
ObjectRef arguments, and sends calls one after another.
"""

from __future__ import annotations

import itertools
import queue
import threading
from concurrent.futures import Future
from typing import Any

from muster.core import context as core_context
from muster.core import resources as res
from muster.core.api import get_runtime
from muster.core.runtime import ActorHandle as CoreHandle
from muster.exceptions import ActorDiedError
from muster.tasks import options as opts
from muster.tasks import owner
from muster.tasks.objects import ObjectRef, snapshot_args

_ids = itertools.count(1)
_actors: dict[int, "ActorHandle"] = {}
_lock = threading.Lock()


def lookup(actor_id: int) -> "ActorHandle":
    with _lock:
        return _actors[actor_id]


def _handle_from_id(actor_id: int) -> Any:
    if core_context.in_worker():
        return WorkerActorHandle(actor_id)
    return lookup(actor_id)


class ActorClass:
    """What ``@muster.remote`` makes of a class."""

    def __init__(self, cls: type, options: dict[str, Any]):
        self._cls = cls
        self._options = opts.validate(options, opts.ACTOR_OPTIONS, f"@muster.remote on class {cls.__name__}")
        self.__name__ = cls.__name__
        self.__doc__ = cls.__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"Actor class {self._cls.__name__} cannot be instantiated directly. "
            f"Use {self._cls.__name__}.remote(...) to start an actor."
        )

    def options(self, **options: Any) -> "ActorClass":
        return ActorClass(self._cls, {**self._options, **options})

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """Start the actor; returns its handle at once (creation goes on in the background)."""
        if core_context.in_worker():
            actor_id = core_context.send_event(
                {"kind": "create_actor", "cls": self._cls, "args": args, "kwargs": kwargs, "options": self._options}
            )
            return WorkerActorHandle(actor_id)
        args, kwargs = snapshot_args(args, kwargs, f"{self._cls.__name__}.remote()")  # as they are now
        return ActorHandle(self._cls, args, kwargs, self._options)


class _Method:
    def __init__(self, actor: Any, name: str):
        self._actor, self._name = actor, name

    def remote(self, *args: Any, **kwargs: Any) -> ObjectRef:
        return self._actor._call(self._name, args, kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"Actor methods cannot be called directly. Use .{self._name}.remote(...).")


class ActorHandle:
    """Driver-side handle to an actor; picklable (other tasks and actors can call it)."""

    def __init__(self, cls: type, args: tuple, kwargs: dict, options: dict[str, Any]):
        self._cls, self._args, self._kwargs = cls, args, kwargs
        self._resources = opts.to_resources(options, default_cpus=0.0)
        res.ensure_feasible(self._resources, 1, get_runtime().resources(), what=f"actor {cls.__name__}")
        self._restarts_left = options.get("max_restarts", 0)
        self._id = next(_ids)
        self._core: Future = Future()
        self._dead: BaseException | None = None
        self._no_restart = False
        self._calls: queue.Queue = queue.Queue()
        with _lock:
            _actors[self._id] = self
        self._start_core()
        threading.Thread(target=self._send_forever, name=f"muster-actor-{self._id}", daemon=True).start()

    # -- public --------------------------------------------------------------
    def __getattr__(self, name: str) -> _Method:
        if name.startswith("_"):
            raise AttributeError(name)
        if not hasattr(self._cls, name):
            raise AttributeError(f"Actor {self._cls.__name__} has no method {name!r}.")
        return _Method(self, name)

    def __reduce__(self) -> Any:
        return (_handle_from_id, (self._id,))

    def __repr__(self) -> str:
        return f"ActorHandle({self._cls.__name__}, id={self._id})"

    # -- internals -------------------------------------------------------------
    def _start_core(self) -> None:
        def create() -> None:
            try:
                for dep in owner.dependencies(self._args, self._kwargs):
                    dep.exception()  # wait for it
                a, kw = owner.resolve(self._args, self._kwargs)
                core = get_runtime().create_actor(
                    self._cls, a, kw, self._resources, label=f"actor {self._cls.__name__}",
                    on_event=owner.handle_event,
                )
                core.set_handlers(owner.handle_event, self._on_death)
                self._core.set_result(core)
            except BaseException as exc:  # noqa: BLE001 - its calls will raise it
                self._dead = exc
                self._core.set_exception(exc)

        threading.Thread(target=create, name=f"muster-actor-create-{self._id}", daemon=True).start()

    def _on_death(self, core: CoreHandle, error: BaseException) -> None:
        if self._no_restart or self._restarts_left == 0:
            self._dead = error
            return
        if self._restarts_left > 0:
            self._restarts_left -= 1
        self._core = Future()
        self._start_core()

    def _call(self, method: str, args: tuple, kwargs: dict) -> ObjectRef:
        args, kwargs = snapshot_args(args, kwargs, f"{self._cls.__name__}.{method}.remote()")  # as they are now
        out: Future = Future()
        self._calls.put((method, args, kwargs, out))
        return ObjectRef.new(out)

    def _send_forever(self) -> None:
        while True:
            self._send_one(*self._calls.get())  # idle, keeps no reference to the last call

    def _send_one(self, method: str, args: tuple, kwargs: dict, out: Future) -> None:
        try:
            core: CoreHandle = self._core.result()
            for dep in owner.dependencies(args, kwargs):
                dep.exception()  # wait for it
            a, kw = owner.resolve(args, kwargs)
        except BaseException as exc:  # noqa: BLE001 - creation failed, or a dependency did
            out.set_exception(self._dead if isinstance(self._dead, ActorDiedError) else exc)
            return
        inner = core.call(method, *a, **kw)
        inner.add_done_callback(lambda f: _copy(f, out))

    def _kill(self, no_restart: bool = True) -> None:
        self._no_restart = no_restart
        try:
            core = self._core.result(timeout=60)
        except BaseException:  # noqa: BLE001 - never started: nothing to kill
            return
        get_runtime().kill(core)
        error = ActorDiedError(f"actor {self._cls.__name__}", core.pid, -9, reason="stopped by muster.kill()")
        if no_restart:
            self._dead = error
        else:
            self._on_death(core, error)


def _copy(src: Future, dst: Future) -> None:
    exc = src.exception()
    if exc is not None:
        dst.set_exception(exc)
    else:
        dst.set_result(src.result())


class WorkerActorHandle:
    """An actor handle inside a worker: calls go through the driver, which owns the actor."""

    def __init__(self, actor_id: int):
        self._id = actor_id

    def __getattr__(self, name: str) -> _Method:
        if name.startswith("_"):
            raise AttributeError(name)
        return _Method(self, name)

    def _call(self, method: str, args: tuple, kwargs: dict) -> ObjectRef:
        ref_id = core_context.send_event(
            {"kind": "actor_call", "actor": self._id, "method": method, "args": args, "kwargs": kwargs}
        )
        return ObjectRef(ref_id)

    def _kill(self, no_restart: bool = True) -> None:
        core_context.send_event({"kind": "kill", "actor": self._id, "no_restart": no_restart})

    def __reduce__(self) -> Any:
        return (_handle_from_id, (self._id,))

    def __repr__(self) -> str:
        return f"ActorHandle(id={self._id})"
