"""What runs inside the worker process around a task or an actor.

The driver ships a :class:`TaskBody` instead of the bare function and an
:class:`ActorFactory` instead of the bare class.  Inside the worker they
record what :func:`muster.get_runtime_context` reports, run coroutines
(``async def`` tasks) to completion, collect generators (:mod:`muster.tasks.generator_items`),
and host async and threaded actors: those accept a call at once and send its result back as an
:class:`~muster.tasks.events.ActorCallDone` event, so calls overlap up to
``max_concurrency``, and those of each concurrency group up to its own size.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import itertools
import os
import sys
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from muster.core import context as core_context
from muster.runtime_env import working_dir as local_dirs
from muster.runtime_env.working_dir import LocalDirs
from muster.tasks import concurrency_groups as cgroups
from muster.tasks import definition_size, events
from muster.tasks import generator_items as gitems
from muster.tasks import options as opts


@dataclass(frozen=True)
class TaskInfo:
    """Who is running here, for ``get_runtime_context()``."""

    job_id: str
    task_id: str | None = None
    actor_id: str | None = None
    actor_name: str | None = None
    namespace: str = "default"
    resources: dict[str, float] = field(default_factory=dict)
    attempt: int = 0
    placement_group: Any = None
    capture_child_tasks: bool = False
    function: str | None = None  # a task's function, ``module.qualname`` (an actor's calls: see call_name)
    task_name: str | None = None  # a task's ``.options(name=...)``, its name in get_task_name()


#: Ray's built-in methods of every actor: ``__ray_ready__()`` (True once it is built),
#: ``__ray_terminate__()`` (it ends on purpose, as ``exit_actor``), ``__ray_call__(fn, *args)``
#: (``fn(the actor's object, *args)`` run in the actor).
RAY_BUILTINS = frozenset({"__ray_ready__", "__ray_terminate__", "__ray_call__"})

_local = threading.local()
_actor_info: TaskInfo | None = None
_actor_class: type | None = None  # the class of this process's actor
_actor_object: Any = None  # this process's actor (the user's object), once built
_SHUTDOWN_HOOK_S = 30.0  # how long an async __ray_shutdown__ may take before the actor's process exits anyway


_call_number: contextvars.ContextVar[int] = contextvars.ContextVar("muster_actor_call", default=0)
_call_method: contextvars.ContextVar[str] = contextvars.ContextVar("muster_actor_method", default="__init__")
_call_token: contextvars.ContextVar[int] = contextvars.ContextVar("muster_actor_token", default=0)  # the driver's
_call_ids = itertools.count(1)
_cancelled_calls: set[int] = set()  # in an actor: the calls (tokens) muster.cancel reached, as the driver said


def _noticed(notice: Any) -> None:
    if isinstance(notice, events.CallCancelled):
        _cancelled_calls.add(notice.token)


def call_cancelled_here(token: int) -> bool | None:
    """Whether the driver told this actor's process that its call ``token`` was cancelled; None where
    the engine delivers no such notice (ask the driver instead)."""
    if token in _cancelled_calls:
        return True
    return False if core_context.receives_notices() else None


def current() -> TaskInfo | None:
    """This thread's task or this process's actor; None in the driver."""
    return getattr(_local, "info", None) or _actor_info


def current_task_id() -> str | None:
    """The running task's id, or the id of the actor call running in this thread or coroutine."""
    info = current()
    if info is None or info.task_id is not None:
        return None if info is None else info.task_id
    token = _call_token.get()  # the driver's number for the call: its id there too (the state API's rows)
    if token:
        number = token
    elif _call_method.get() == "__init__":
        number = 0  # the actor's creation task
    else:  # a call the driver did not number
        number = 0x80000000 | _call_number.get()
    return f"{info.job_id}{int(info.actor_id or 0):08x}{number:08x}"


def current_call() -> tuple[str | None, int, int]:
    """The running work as its owner knows it: ``(task id, 0, 0)`` for a task, ``(None, actor id,
    call token)`` for an actor call (token 0: the constructor, or a call the driver did not number)."""
    info = current()
    if info is None or info.actor_id is None or info.function is not None:
        return (info.task_id if info else None), 0, 0
    return None, int(info.actor_id), _call_token.get()


def run_shutdown_hook() -> None:
    """Ray's ``__ray_shutdown__()``: the actor's cleanup, called when it ends on purpose (``exit_actor``,
    ``__ray_terminate__``, no handle left), not when it is killed. An error in it is printed, not raised."""
    hook = getattr(_actor_object, "__ray_shutdown__", None)
    if hook is None:
        return
    try:
        result = hook()
        if inspect.isawaitable(result):  # an async def: run it to its end on a loop of its own (this thread's
            async def finish() -> Any:  # may be the actor's, which waits for this)
                return await result

            runner = threading.Thread(target=asyncio.run, args=(finish(),), daemon=True)
            runner.start()
            runner.join(_SHUTDOWN_HOOK_S)
    except Exception:  # noqa: BLE001 - the actor ends anyway; say what went wrong
        import traceback

        print(f"__ray_shutdown__ of {type(_actor_object).__name__} raised:", file=sys.stderr)
        traceback.print_exc()


def in_async_actor() -> bool:
    return current() is not None and _actor_class is not None and is_async_class(_actor_class)


def child_options(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` of a task or actor started here, in this one's placement group when it captures children."""
    info = current()
    return options if info is None or not info.capture_child_tasks else \
        opts.inherit_placement_group(options, info.placement_group)


def adopt_placement_group(group: Any, resources: dict[str, float]) -> None:
    """Run this process's work in placement group ``group``, with its children captured (Ray's
    ``placement_group_capture_child_tasks``): for a process the engine started without an
    :class:`ActorFactory` (a Serve replica) that holds ``resources`` of the group's bundle 0."""
    global _actor_info
    from muster.tasks.runtime_context import current_job_id

    base = _actor_info or TaskInfo(job_id=current_job_id(), resources=dict(resources))
    _actor_info = replace(base, placement_group=group, capture_child_tasks=True)


def _begin_call(method: str = "__init__", token: int = 0) -> None:
    """Number the actor call starting in this thread or coroutine (its task id: Ray gives each call
    one) and note its method (its task name) and the driver's token for it (``is_canceled`` asks by it)."""
    _call_number.set(next(_call_ids))
    _call_method.set(method)
    _call_token.set(token)


def task_names() -> tuple[str, str] | None:
    """``(name, function name)`` of the running task or actor call, as Ray's runtime context gives
    them (``f`` and ``module.f``, or the name given in ``f.options(name=...)`` and ``module.f``; ``Class.method``
    and ``module.Class.method``); None in the driver."""
    info = current()
    if info is None:
        return None
    if info.actor_id is None or info.function is not None:
        function = info.function or ""
        return info.task_name or function.rsplit(".", 1)[-1], function
    cls = _actor_class
    qual = f"{cls.__qualname__}.{_call_method.get()}" if cls is not None else _call_method.get()
    return qual, f"{cls.__module__}.{qual}" if cls is not None else qual


async def _awaited(value: Any) -> Any:
    return await value


_runs: dict[str, int] = {}  # in a task worker: how many tasks of each function it ran (for max_calls)


class TaskBody:
    """The function a task worker runs: ``fn`` plus who it is and how to return. ``max_calls``
    (0: no limit): the worker ends once it has run that many tasks of this function (Ray's).
    ``retry_exceptions`` (the task's: True, or a list of exception types): an error its streaming or
    dynamic generator raises after some items fails the attempt when it names it (so it is retried),
    instead of following the items (see :mod:`muster.tasks.generator_items`)."""

    def __init__(self, fn: Callable[..., Any], info: TaskInfo, num_returns: Any, env_vars: dict[str, str],
                 max_calls: int = 0, retry_exceptions: Any = False, dirs: LocalDirs | None = None):
        self.fn, self.info, self.num_returns, self.env_vars = fn, info, num_returns, env_vars
        self.max_calls, self.retry_exceptions = max_calls, retry_exceptions
        self.dirs = dirs  # its runtime_env's local working_dir/py_modules (copies), applied around the task
        self.__name__ = getattr(fn, "__name__", "task")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        core_context.send_event(events.TaskStarted(self.info.task_id or ""), wait=False)
        saved = {k: os.environ.get(k) for k in self.env_vars}
        os.environ.update(self.env_vars)
        _local.info = self.info
        try:
            with local_dirs.applied(self.dirs):
                value = self.fn(*args, **kwargs)
                if self.num_returns == "streaming" and inspect.isgenerator(value) and self.info.task_id:
                    return gitems.stream(value, self.info.task_id, f"task {self.__name__}", self.retry_exceptions)
                return gitems.collect(value, self.num_returns, f"task {self.__name__}", self.retry_exceptions)
        finally:
            _local.info = None
            self._count_run()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def limit(self) -> tuple[str, int] | None:
        """``(function, max_calls)``, what the engine's ``submit`` takes; None without a limit."""
        return (self.info.function or self.__name__, self.max_calls) if self.max_calls else None

    def _count_run(self) -> None:
        if not self.max_calls:
            return
        key = self.info.function or self.__name__
        _runs[key] = _runs.get(key, 0) + 1
        if _runs[key] >= self.max_calls:
            core_context.retire_after_call()


def is_async_class(cls: type) -> bool:
    """An actor class with any ``async def`` method (``__init__`` included) is an async actor (as in Ray)."""
    return any(inspect.iscoroutinefunction(getattr(cls, n, None)) or inspect.isasyncgenfunction(getattr(cls, n, None))
               for n in dir(cls) if n == "__init__" or not n.startswith("__"))


async def construct(cls: type, args: tuple, kwargs: dict) -> Any:
    """An instance of ``cls`` built on the running event loop, as Ray builds async actors and Serve replicas:
    ``asyncio.get_running_loop()`` works in ``__init__``, and an ``async def __init__`` is awaited."""
    obj: Any = object.__new__(cls) if cls.__new__ is object.__new__ else cls.__new__(cls, *args, **kwargs)
    pending = obj.__init__(*args, **kwargs)
    if inspect.isawaitable(pending):
        await pending
    return obj


def freeze(cls: type) -> bytes:
    """``cls`` pickled now: an actor's class travels as it was at ``.remote()`` (Ray exports it
    then), so module globals it reads by value are those of that moment, not of whenever the
    actor's process happens to start."""
    from muster.core import serialization

    stream, _ = serialization.dumps(cls, out_of_band_min=sys.maxsize)
    definition_size.check_class(cls, stream.nbytes)
    return bytes(stream)


def _thawed(frozen: bytes, info: TaskInfo, max_concurrency: int, env_vars: dict[str, str],
            groups: dict[str, int] | None = None, dirs: LocalDirs | None = None) -> "ActorFactory":
    import pickle

    if dirs is not None:  # the actor's own for its life, before its class is unpickled (it may import from them)
        local_dirs.enter(dirs)
    return ActorFactory(pickle.loads(frozen), info, max_concurrency, env_vars, groups=groups, dirs=dirs)


class ActorFactory:
    """What the engine instantiates in the actor's process: builds the :class:`ActorHost`.
    ``frozen`` is the class as :func:`freeze` took it, what the factory travels as; ``groups``: the
    actor's concurrency groups (see :mod:`muster.tasks.concurrency_groups`); ``dirs``: its runtime_env's
    local ``working_dir``/``py_modules`` (copies), applied in its process for its whole life."""

    def __init__(self, cls: type, info: TaskInfo, max_concurrency: int, env_vars: dict[str, str],
                 frozen: bytes | None = None, groups: dict[str, int] | None = None, dirs: LocalDirs | None = None):
        self.cls, self.info, self.max_concurrency, self.env_vars = cls, info, max_concurrency, env_vars
        self.frozen, self.groups, self.dirs = frozen, groups or {}, dirs
        self.__name__ = cls.__name__

    def __reduce__(self) -> Any:
        if self.frozen is None:
            return super().__reduce__()
        return _thawed, (self.frozen, self.info, self.max_concurrency, self.env_vars, self.groups, self.dirs)

    def __call__(self, *args: Any, **kwargs: Any) -> "ActorHost":
        global _actor_info, _actor_class
        os.environ.update(self.env_vars)
        if self.dirs is not None:  # (again: entering them twice changes nothing)
            local_dirs.enter(self.dirs)
        _actor_info, _actor_class = self.info, self.cls
        core_context.on_notice(_noticed)
        global _actor_object
        if not is_async_class(self.cls):
            _begin_call()  # the constructor runs as the actor's creation task
            _actor_object = self.cls(*args, **kwargs)
            return ActorHost(_named_by_repr(_actor_object), self.info, self.max_concurrency, groups=self.groups)
        import asyncio

        loop = _loop_on_thread("muster-actor-loop")  # the default group's, where the constructor runs

        async def creation_task() -> Any:
            _begin_call()
            return await construct(self.cls, args, kwargs)

        obj = _actor_object = asyncio.run_coroutine_threadsafe(creation_task(), loop).result()
        return ActorHost(_named_by_repr(obj), self.info, self.max_concurrency, loop, self.groups)


def _loop_on_thread(name: str) -> Any:
    """A new asyncio event loop, running forever on a daemon thread called ``name``."""
    import asyncio

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name=name, daemon=True).start()
    return loop


def _named_by_repr(obj: Any) -> Any:
    """``obj``, once its class's own ``__repr__`` (if it defines one) labels the actor's output lines
    from here on, as Ray's log prefixes do; the constructor's lines keep the class's name."""
    if type(obj).__repr__ is object.__repr__:
        return obj
    try:
        label = f"actor {obj!r}"
    except Exception:  # noqa: BLE001 - a __repr__ that fails keeps the class's name
        return obj
    from muster.core.local import logs

    logs.relabel(label)
    return obj


class ActorHost:
    """Hosts the user's object: plain calls pass through; async/threaded ones overlap, each
    concurrency group up to its own limit (the default group: ``max_concurrency``).
    ``sys.exit()`` in a method ends the actor's process (the engine sees ``exits_on_system_exit``)."""

    exits_on_system_exit = True

    def __init__(self, obj: Any, info: TaskInfo, max_concurrency: int, loop: Any = None,
                 groups: dict[str, int] | None = None):
        self._muster_obj, self._muster_info = obj, info
        self._muster_tasks: dict[int, Any] = {}
        self._muster_pools: dict[str | None, Any] = {}  # threaded actors: a ThreadPoolExecutor per group
        # async actors: per group, its event loop (each on a thread of its own; the default group's is
        # ``loop``, the constructor's) and its places (cgroups.Places), as Ray's event loop per group
        self._muster_lanes: dict[str | None, tuple[Any, Any]] = {}
        self._muster_beside: Any = None  # ... and the thread its built-in methods run on (see _muster_submit)
        self._muster_groups_of = cgroups.method_groups(type(obj)) if groups else {}
        if loop is not None:
            def lane(n: int, name: str | None) -> tuple[Any, cgroups.Places]:
                on = loop if name is None else _loop_on_thread(f"muster-actor-loop-{name}")
                return on, cgroups.Places(n, on)

            self._muster_lanes = cgroups.limits(max_concurrency, groups or {}, lane)
        elif max_concurrency > 1 or groups:
            from concurrent.futures import ThreadPoolExecutor

            self._muster_pools = cgroups.limits(max_concurrency, groups or {}, lambda n, name: ThreadPoolExecutor(
                n, thread_name_prefix="muster-actor" if name is None else f"muster-actor-{name}"))

    def __getattr__(self, name: str) -> Any:
        _begin_call(name)  # the engine looks up each plain call's method here, just before it runs it
        return self._muster_method(name)

    def _muster_method(self, name: str) -> Any:
        """The object's method ``name``, or one of Ray's built-in actor methods (:data:`RAY_BUILTINS`)."""
        return self._muster_builtin(name) if name in RAY_BUILTINS else getattr(self._muster_obj, name)

    def _muster_builtin(self, name: str) -> Any:
        """Ray's built-in actor method ``name`` (one of :data:`RAY_BUILTINS`)."""
        if name == "__ray_ready__":
            return lambda: True
        if name == "__ray_terminate__":
            from muster.actor import exit_actor

            return exit_actor
        return lambda fn, *args, **kwargs: fn(self._muster_obj, *args, **kwargs)  # __ray_call__

    def _muster_call(self, token: int, method: str, num_returns: Any, args: tuple, kwargs: dict) -> Any:
        """A plain call (the driver's ``token`` for it) that returns ``num_returns`` values (checked
        here, split by the driver)."""
        name = f"{type(self._muster_obj).__name__}.{method}"
        _begin_call(method, token)
        if token in _cancelled_calls:  # cancelled while it waited here behind another call: never runs, as in Ray
            from muster.exceptions import TaskCancelledError

            raise TaskCancelledError(f"{name} call")
        return gitems.collect(self._muster_method(method)(*args, **kwargs), num_returns, name)

    def _muster_submit(self, token: int, method: str, num_returns: Any, args: tuple, kwargs: dict,
                       group: str | None = None) -> None:
        """Start one call in its concurrency group (``group``: the call's ``.options(concurrency_group=)``);
        its result goes back as an ``ActorCallDone`` event. In an async actor, a built-in method
        (:data:`RAY_BUILTINS`) that finds a free place in its group takes it and runs beside the group's
        event loop, on a thread of its own, as Ray runs its built-ins: ``__ray_ready__`` answers while a
        coroutine blocks the loop; with the group full it waits for a place, as in Ray, and runs on the
        loop. A call in one of Ray's system groups (``cgroups.SYSTEM_GROUPS``, size 1) runs on that
        thread, one at a time, in no group of the actor's."""
        builtin = method in RAY_BUILTINS
        fn = self._muster_builtin(method) if builtin else getattr(self._muster_obj, method)
        name = f"{type(self._muster_obj).__name__}.{method}"
        if group is None:  # the call's method's group, else the default one (None)
            group = self._muster_groups_of.get(method)
        system = group in cgroups.SYSTEM_GROUPS
        places = None if system or not self._muster_lanes else self._muster_lanes[group][1]
        beside_loop = system or (builtin and places is not None and places.try_take())
        if places is not None and not beside_loop:
            fut = asyncio.run_coroutine_threadsafe(
                self._muster_run(token, method, fn, places, num_returns, args, kwargs), self._muster_lanes[group][0])
        else:
            def call() -> Any:
                _begin_call(method, token)
                value = fn(*args, **kwargs)
                if system and inspect.isawaitable(value):  # an async method: on this thread's own loop
                    value = asyncio.run(_awaited(value))
                return gitems.collect(value, num_returns, name)

            fut = (self._muster_builtins_pool() if beside_loop else self._muster_pools[group]).submit(call)
            if places is not None and not system:  # the built-in's place in its group: back once it ran (or never will)
                fut.add_done_callback(lambda _: places.give_back())
        self._muster_tasks[token] = fut
        fut.add_done_callback(lambda f: self._muster_reply(token, f))

    async def _muster_run(self, token: int, method: str, fn: Any, places: cgroups.Places, num_returns: Any,
                          args: tuple, kwargs: dict) -> Any:
        """One call of an async actor, on its group's event loop once it has a place in the group."""
        name = f"{type(self._muster_obj).__name__}.{method}"
        await places.take()
        try:
            _begin_call(method, token)
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
            if inspect.isasyncgen(value):
                value = await gitems.async_items(value, name)
            return gitems.collect(value, num_returns, name)
        except SystemExit as exc:  # asyncio would stop the actor's loop with it, hanging every call
            core_context.exit_process(exc.code)
        finally:
            places.give_back()

    def _muster_builtins_pool(self) -> Any:
        """The one thread an async actor runs its built-in methods on, beside its event loops."""
        if self._muster_beside is None:  # made here, on the engine's one thread that submits calls
            from concurrent.futures import ThreadPoolExecutor

            self._muster_beside = ThreadPoolExecutor(1, thread_name_prefix="muster-actor-builtins")
        return self._muster_beside

    def _muster_reply(self, token: int, fut: Future) -> None:
        from muster.core.local.wire import capture_error, unsendable
        from muster.exceptions import TaskCancelledError

        self._muster_tasks.pop(token, None)
        value: Any
        if fut.cancelled():  # a task error that is a TaskCancelledError too, as Ray's RayTaskError(TaskCancelledError)
            cancelled = TaskCancelledError(f"{type(self._muster_obj).__name__} call")
            ok, value = False, capture_error(cancelled, f"actor {type(self._muster_obj).__name__}", os.getpid(), "")
        elif fut.exception() is not None:
            exc = fut.exception()
            assert exc is not None
            if isinstance(exc, SystemExit):
                core_context.exit_process(exc.code)  # as a plain call's sys.exit() does
            ok, value = False, capture_error(exc, f"actor {type(self._muster_obj).__name__}", os.getpid(), "")
        else:
            ok, value = True, fut.result()
        actor_id = int(self._muster_info.actor_id or 0)
        try:
            core_context.send_event(events.ActorCallDone(actor_id, token, ok, value), wait=False)
        except Exception as exc:  # noqa: BLE001 - the value would not pickle: say so instead of hanging the caller
            err = unsendable(f"a call of actor {type(self._muster_obj).__name__}", exc)
            core_context.send_event(
                events.ActorCallDone(actor_id, token, False, capture_error(err, "actor", os.getpid(), "")), wait=False)

    def _muster_cancel(self, token: int) -> bool:
        _cancelled_calls.add(token)  # a running threaded call goes on: is_canceled() says so
        fut = self._muster_tasks.get(token)
        return bool(fut is not None and fut.cancel())
