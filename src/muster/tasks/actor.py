"""``@muster.remote`` on a class: ``Cls.remote(...)`` starts an actor.

Calls on one actor run in the order each submitter (the driver, a worker) made
them: a call waits for its ObjectRef arguments, holding back only its submitter's
later calls (none where calls run out of order: :mod:`muster.tasks.call_order`);
then one sender thread waits for the actor to exist (or to restart) and sends the
calls one after another.  An async actor (one with ``async def`` methods) or a threaded one (``max_concurrency > 1``, or
``concurrency_groups``) accepts each call at once and answers through an
event, so its calls overlap, each concurrency group up to its own limit (see
:mod:`muster.tasks.worker_side` and :mod:`muster.tasks.concurrency_groups`).
"""

from __future__ import annotations

import inspect
import itertools
import queue
import threading
import weakref
from concurrent.futures import Future
from typing import Any, NoReturn, cast

from muster._unsupported import raise_unsupported
from muster.core import context as core_context
from muster.core import resources as res
from muster.core.api import get_runtime, is_current
from muster.core.init_options import current_namespace
from muster.core.runtime import KILLED_BY_MUSTER, RuntimeActor
from muster.exceptions import (ActorDiedError, ActorUnavailableError, InvalidArgumentError, InvalidTypeError,
                               TaskCancelledError, TaskError, describe_exit, restarting_reason)
from muster.runtime_env import working_dir as local_dirs
from muster.tasks import concurrency_groups as cgroups
from muster.tasks import events, lifetimes, named, owner, task_table, worker_side
from muster.tasks import options as opts
from muster.tasks import runtime_context as rc
from muster.tasks.actor_method import ActorMethod, Retries, declared
from muster.tasks.actor_retry import Call, CallRetries
from muster.tasks.call_order import ArgumentWait, in_order
from muster.tasks.objects import ObjectRef, snapshot_args
from muster.tasks.worker_handle import Shape, WorkerActorHandle, no_method, shape_of
from muster.tasks.worker_side import ActorFactory, TaskInfo, freeze, is_async_class

_actors: dict[int, "_Actor"] = {}
_lock = threading.Lock()
_calls_by_ref: dict[int, tuple[int, int]] = {}  # ref id -> (actor id, call token), while pending
_DEFAULT_ASYNC_CONCURRENCY = 1000  # Ray's default for async actors
_NO_RESOURCES: dict[str, float] = {}  # an actor call's own (it runs on what its actor holds); never changed


def lookup(actor_id: int) -> "_Actor":
    with _lock:
        return _actors[actor_id]


def kill_in_group(group: Any, reason: str) -> None:
    """Kill, for good, every live actor scheduled into placement group ``group`` (``reason``: why, for
    their calls' errors). One still waiting for its bundle is left to the engine, which fails its start."""
    with _lock:
        members = [a for a in _actors.values() if a._placement_group == group and a._dead is None]
    for member in members:
        if member._core.done():
            member._kill(no_restart=True, reason=reason)


def _handle_from_id(actor_id: int, shape: Shape | None = None) -> Any:
    if core_context.in_worker():
        return WorkerActorHandle(actor_id, shape=shape)
    return ActorHandle(lookup(actor_id))


class ActorClass:
    """What ``@muster.remote`` makes of a class."""

    def __init__(self, cls: type, options: dict[str, Any]):
        self._cls = cls
        self._options = opts.validate(options, opts.ACTOR_OPTIONS, f"@muster.remote on class {cls.__name__}")
        named.check_options(cls.__name__, self._options)
        in_order(cls, self._options)  # allow_out_of_order_execution fits the class (as Ray checks)
        self.__name__ = cls.__name__
        self.__doc__ = cls.__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise InvalidTypeError(
            f"Actor class {self._cls.__name__} cannot be instantiated directly. "
            f"Use {self._cls.__name__}.remote(...) to start an actor."
        )

    def bind(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise_unsupported("muster.ActorClass", "bind")

    def options(self, **options: Any) -> "ActorClass":
        if "concurrency_groups" in options:  # as in Ray: the groups are the class's, declared once
            raise InvalidArgumentError(
                f"{self._cls.__name__}.options(concurrency_groups={options['concurrency_groups']!r}): concurrency "
                f"groups are declared on the class, not per actor; pass them to @muster.remote(concurrency_groups="
                "...) instead (as in Ray).")
        return ActorClass(self._cls, {**self._options, **options})

    def get_or_create(self, *args: Any, **kwargs: Any) -> Any:
        """The live actor of this ``options(name=...)``, or a new one made with these arguments (Ray's
        ``options(name=...).get_or_create(...)``, which is ``get_if_exists=True``)."""
        if not self._options.get("name"):
            raise InvalidArgumentError(f"{self._cls.__name__}.get_or_create(): give the actor a name first: "
                                       f"{self._cls.__name__}.options(name='...').get_or_create(...).")
        return self.options(get_if_exists=True).remote(*args, **kwargs)

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """Start the actor; returns its handle at once (creation goes on in the background).

        Raises:
            TypeError: the arguments do not fit the class's ``__init__`` (checked here, as in Ray).
        """
        opts.check_method_call(self._cls, "__init__", args, kwargs)
        if core_context.in_worker():
            options = worker_side.child_options(self._options)
            actor_id = core_context.send_event(events.CreateActor(self._cls, args, kwargs, options))
            return WorkerActorHandle(actor_id, self._cls)
        args, kwargs = snapshot_args(args, kwargs, f"{self._cls.__name__}.remote()")  # as they are now
        handle = create(self._cls, args, kwargs, self._options)
        if self._options.get("lifetime") != "detached":  # as in Ray: it ends once no handle to it is left
            lifetimes.watch(handle._actor)
        return handle


def create(cls: type, args: tuple, kwargs: dict, options: dict[str, Any]) -> "ActorHandle":
    """A new actor, or with ``name=`` and ``get_if_exists=True`` the live one of that name."""
    name = options.get("name")
    if not name:
        return ActorHandle(_Actor(cls, args, kwargs, options))
    namespace = options.get("namespace") or current_namespace()
    return ActorHandle(named.claim(namespace, name, lambda: _Actor(cls, args, kwargs, options),
                                   bool(options.get("get_if_exists"))))


class ActorHandle:
    """A handle to an actor in the driver (Ray's ``ActorHandle``): ``handle.method.remote(...)`` calls it.

    Picklable: tasks and actors it is passed to can call the actor too. Handles of one actor are equal.
    As in Ray, an actor made here (not ``lifetime="detached"``) ends once no handle to it is left and
    its calls are done (see :mod:`muster.tasks.lifetimes`).
    """

    __slots__ = ("_actor", "__weakref__")

    def __init__(self, actor: "_Actor"):
        self._actor = actor
        actor._held_by(self)

    def __getattr__(self, name: str) -> Any:
        if name in worker_side.RAY_BUILTINS or not name.startswith("_"):
            return self._actor._method(self, name)
        return getattr(self._actor, name)  # the actor's own state and calls (``_id``, ``_call``, ``_kill``, ...)

    def __reduce__(self) -> Any:
        return self._actor.__reduce__()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ActorHandle) and other._actor is self._actor

    def __hash__(self) -> int:
        return hash(("actor", self._actor._id))

    def __repr__(self) -> str:
        return repr(self._actor)


class _Actor:
    """The driver's side of one actor: its process (restarted as its options allow), the calls sent
    to it in order, their answers and retries. Users hold :class:`ActorHandle` s of it."""

    def __init__(self, cls: type, args: tuple, kwargs: dict, options: dict[str, Any]):
        self._cls, self._args, self._kwargs = cls, args, kwargs
        self._resources = opts.to_resources(options, default_cpus=0.0)
        self._engine = get_runtime()  # the engine it lives on: a name outlives neither (see :meth:`_gone`)
        res.ensure_feasible(self._resources, 1, self._engine.resources(), what=f"actor {cls.__name__}",
                            knob=res.OPTIONS_KNOB, no_gpu_fix=res.NO_GPU_OPTION_FIX)
        self._frozen = freeze(cls)  # the class as of now, before creation goes on in the background
        # the actors this one makes share its fate, as in Ray: they die with each of its processes
        self._owned = owner.Gang(f"the actor {cls.__name__} that created it")
        self._restarts_left = options.get("max_restarts", 0)
        self._task_retries = options.get("max_task_retries", 0)  # its calls', unless their method's say otherwise
        self._id = rc.new_actor_number()
        self._hex_id = rc.actor_hex_id(rc.driver_job_id(), self._id)
        self._task_prefix = task_table.actor_task_id(self._id, 0)[:-8]  # its calls' task ids: this, then the token
        concurrent_default = _DEFAULT_ASYNC_CONCURRENCY if is_async_class(cls) else 1
        self._max_concurrency = int(options.get("max_concurrency") or concurrent_default)
        self._groups = cgroups.declared(cls, options.get("concurrency_groups"))  # each with its own limit
        self._concurrent = is_async_class(cls) or self._max_concurrency > 1 or bool(self._groups)
        self._name = options.get("name")
        self._namespace = options.get("namespace") or current_namespace()
        self._detached = options.get("lifetime") == "detached"  # for the state API's is_detached
        self._env_vars = (options.get("runtime_env") or {}).get("env_vars") or {}
        self._dirs = local_dirs.on_engine(options.get("runtime_env"), self._engine, f"actor {cls.__name__}")
        self._placement_group, index, self._capture_child_tasks = opts.placement_group_of(options)
        self._bundle = None if self._placement_group is None else \
            self._placement_group._bundle_for(self._resources, index, what=f"actor {cls.__name__}")
        self._node = opts.node_of(options, f"actor {cls.__name__}")
        self._attempt = 0
        self._core: Future = Future()
        self._dead: BaseException | None = None
        self._no_restart = False
        self._kill_reason = ""  # set by muster.kill: what calls failing with the death say
        self._calls: queue.Queue = queue.Queue()
        self._waits = ArgumentWait(self._calls.put, in_order(cls, options))  # calls wait for their arguments
        self._tokens = itertools.count(1)
        self._pending: dict[int, Future] = {}  # concurrent actors: calls sent, answer not back yet
        self._retries = CallRetries()  # max_task_retries: the calls to send again, and their retries left
        self._in_actor: dict[int, None] = {}  # plain actors: calls sent, answer not back, in the order sent
        self._cancelled: set[int] = set()  # calls muster.cancel reached in the actor, answer not back yet
        self._restart_lock = threading.Lock()  # _core, _attempt and the calls to resend change together
        self._handles: list[weakref.ref] = []  # the driver's ActorHandles of it (lifetimes: alive while one is)
        self._borrowed = False  # a handle of it went to another process (or a worker looked it up): kept
        self._open_calls = 0  # calls made and not settled yet
        self._collected = False  # ended because no handle to it was left
        with _lock:
            _actors[self._id] = self
        self._start_core()
        threading.Thread(target=self._send_forever, name=f"muster-actor-{self._id}", daemon=True).start()

    # -- public --------------------------------------------------------------
    def __getattr__(self, name: str) -> ActorMethod:
        if name.startswith("_") and name not in worker_side.RAY_BUILTINS:
            raise AttributeError(name)
        return self._method(self, name)

    def _method(self, handle: Any, name: str) -> ActorMethod:
        """``handle.name``: the actor's method ``name``, called through ``handle``."""
        if name not in worker_side.RAY_BUILTINS and not hasattr(self._cls, name):
            raise no_method(shape_of(self._cls), name)
        return ActorMethod(handle, name)

    def __reduce__(self) -> Any:
        self._borrowed = True  # another process holds a handle now: muster cannot see when it drops it
        return (_handle_from_id, (self._id, shape_of(self._cls)))

    def _held_by(self, handle: ActorHandle) -> None:
        with _lock:
            self._handles = [r for r in self._handles if r() is not None] + [weakref.ref(handle)]

    def _unreferenced(self) -> bool:
        """No handle to it is left (in the driver, nor ever sent elsewhere) and no call of it is pending."""
        with _lock:
            return not self._borrowed and self._open_calls == 0 and all(r() is None for r in self._handles)

    def __repr__(self) -> str:
        return f"ActorHandle({self._cls.__name__}, id={self._id})"

    # -- internals -------------------------------------------------------------
    def _gone(self) -> bool:
        """Dead, or of an engine since shut down: its name is free again, as a new job's names are in Ray."""
        return self._dead is not None or not is_current(self._engine)

    def _factory(self) -> ActorFactory:
        info = TaskInfo(job_id=rc.driver_job_id(), actor_id=str(self._id), actor_name=self._name,
                        # as in Ray, get_runtime_context().namespace in the actor is the job's, even for an
                        # actor named into another namespace with .options(namespace=)
                        namespace=current_namespace(), resources=self._resources, attempt=self._attempt,
                        placement_group=self._placement_group, capture_child_tasks=self._capture_child_tasks)
        return ActorFactory(self._cls, info, self._max_concurrency, self._env_vars, self._frozen, self._groups,
                            self._dirs)

    def _start_core(self) -> None:
        def create() -> None:
            try:
                for dep in owner.dependencies(self._args, self._kwargs):
                    dep.exception()  # wait for it
                a, kw = owner.resolve(self._args, self._kwargs)
                try:
                    core = get_runtime().create_actor(
                        cast(type, self._factory()), a, kw, self._resources, label=f"actor {self._cls.__name__}",
                        on_event=self._owned.handle_event, bundle=self._bundle, node=self._node,
                    )
                except TaskError as exc:  # its __init__ raised: the actor never lived (Ray's RayActorError)
                    died = ActorDiedError(
                        f"actor {self._cls.__name__}", exc.pid, None, exc.host,
                        reason=(f"its constructor raised {exc.cause_type}: {exc.message}\n"
                                f"{exc.remote_traceback.rstrip()}"),
                    )
                    raise died from exc
                core.set_handlers(self._owned.handle_event, self._on_death)
                self._core.set_result(core)
            except BaseException as exc:  # noqa: BLE001 - its calls will raise it
                self._set_dead(exc)
                self._core.set_exception(exc)

        threading.Thread(target=create, name=f"muster-actor-create-{self._id}", daemon=True).start()

    def _named(self, error: BaseException) -> BaseException:
        """``error``, naming this actor when it is its death (Ray's ``RayActorError.actor_id``), and
        ``muster.kill`` when that caused it (the process's own exit status says only "killed")."""
        if isinstance(error, ActorDiedError):
            if self._kill_reason and error.reason in ("", KILLED_BY_MUSTER):  # the kill knows why
                error = type(error)(error.label, error.pid, error.exitcode, error.host, reason=self._kill_reason)
            if error.actor_id is None:
                error.actor_id = rc.actor_hex_id(rc.driver_job_id(), self._id)
        return error

    def _in_flight(self, error: BaseException, attempt: int) -> BaseException:
        """``error`` for a call sent to the actor's process of ``attempt``, named (see :meth:`_named`):
        when that process died and the actor restarts, Ray's ``ActorUnavailableError`` (still an
        ``ActorDiedError``), saying so; its final death stays an ``ActorDiedError``."""
        error = self._named(error)
        if type(error) is not ActorDiedError:
            return error
        if self._attempt > attempt:  # its death is handled: the actor restarted
            left = self._restarts_left
        elif self._no_restart or self._dead is not None or self._restarts_left == 0:  # no restart comes
            return error
        else:  # it will restart once its death is handled, spending one of its restarts
            left = self._restarts_left - 1 if self._restarts_left > 0 else -1
        cause = error.reason or describe_exit(error.exitcode)
        unavailable = ActorUnavailableError(error.label, error.pid, error.exitcode, error.host,
                                            reason=restarting_reason(cause, left))
        unavailable.actor_id = error.actor_id
        return unavailable

    def _set_dead(self, error: BaseException) -> None:
        error = self._named(error)
        self._dead = error
        named.forget(self)
        self._owned.close()
        self._fail_pending(error)

    def _fail_pending(self, error: BaseException) -> None:
        error = self._named(error)
        pending, self._pending = self._pending, {}
        self._cancelled.difference_update(pending)
        for token, out in pending.items():
            ok, value = self._retries.merged(token, False, error)  # a generator's: its retried attempts' items first
            _settle(out, value=value) if ok else _settle(out, exc=value)

    def _on_death(self, core: RuntimeActor, error: BaseException) -> None:
        self._owned.close()  # the actors it made die with its process (a restart makes them anew)
        for token in list(self._pending):  # concurrent calls in flight: retried, or they die with it
            call = self._retries.sent(token)
            if call is not None and self._retry(call, self._attempt, error):
                self._pending.pop(token, None)
        self._fail_pending(self._in_flight(error, self._attempt))  # unavailable while the actor restarts
        restarts = not self._no_restart and self._restarts_left != 0
        with self._restart_lock:
            # max_task_retries: sent again to the restarted actor, in their order and before any
            # call not sent yet (the sender sees the new actor and these together)
            waiting = self._retries.died(restarts)
            if restarts:
                if self._restarts_left > 0:
                    self._restarts_left -= 1
                self._attempt += 1
                self._core = Future()
        if not restarts:
            self._set_dead(error)
            for call in waiting:
                _settle(call[-1], exc=self._named(error))
            return
        self._kill_reason = ""  # a kill(no_restart=False) is over: later deaths are the new process's
        self._start_core()
        self._calls.put(None)  # wake the sender for them

    def _retry(self, call: Call, attempt: int, error: BaseException) -> bool:
        """Send ``call`` again, while its ``max_task_retries`` last: when it raised an exception its
        ``retry_exceptions`` name (now, to the same actor), or when it died with the actor (that ran it as
        of ``attempt``) and the actor will restart (once it is back), as in Ray (see
        :mod:`muster.tasks.actor_retry`). False: settle it."""
        if call[0] in self._cancelled or self._dead is not None:  # a cancelled call never is, as in Ray
            return False
        why = self._retries.spend(call, error, restarts=not self._no_restart)
        if why is None:
            return False
        with self._restart_lock:  # died, and its death is not handled yet (same attempt): _on_death sends it
            self._retries.queue(call, after_restart=why == "died" and attempt == self._attempt)
        self._calls.put(None)
        return True

    def _call(self, method: str, args: tuple, kwargs: dict, options: dict[str, Any] | None = None,
              submitter: Any = None) -> Any:
        """``handle.method.options(**options).remote(*args, **kwargs)`` by ``submitter`` (None: the driver)."""
        options = options or {}
        group = options.get("concurrency_group")
        if group is not None:  # .options(concurrency_group=): one of the actor's groups
            cgroups.check(self._cls.__name__, group, self._groups, f"{method}.options(concurrency_group={group!r})")
        args, kwargs = snapshot_args(args, kwargs, f"{self._cls.__name__}.{method}.remote()")  # as they are now
        own = declared(self._cls, method)
        num_returns = options.get("num_returns")
        n = own.get("num_returns", 1) if num_returns is None else num_returns
        fn = getattr(self._cls, method, None)
        if num_returns is None and n == 1 and (inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn)):
            n = "streaming"  # a generator method streams its items, as a generator task does
        out: Future = Future()
        token = next(self._tokens)
        ref = ObjectRef.new(out)
        with _lock:
            _calls_by_ref[ref.id] = (self._id, token)
            self._open_calls += 1
        ref_id = ref.id
        task_id = self._task_prefix + f"{token:08x}"  # task_table.actor_task_id(self._id, token)
        name = f"{self._cls.__name__}.{method}"
        waits = any(isinstance(a, ObjectRef) for a in (*args, *kwargs.values()))
        task_table.submitted(task_id, ref_id, name=options.get("name") or name, function=name, kind="ACTOR_TASK",
                             resources=_NO_RESOURCES, actor_id=self._hex_id, waits=waits)
        out.add_done_callback(lambda f: self._call_settled(ref_id, task_id, f))
        retries = Retries.of(own, options, self._task_retries)
        self._waits.submit(submitter, (token, method, n, args, kwargs, group, retries, out),
                           owner.dependencies(args, kwargs))
        if n in ("streaming", "dynamic"):
            from muster.tasks.remote_function import shape

            return shape(ref, n)
        if n == 1:
            return ref
        return task_table.split_refs(ref, n) if n else None

    def _call_settled(self, ref_id: int, task_id: str, out: Future) -> None:
        with _lock:
            self._open_calls -= 1
        _forget_call(ref_id, task_id, out)

    def _end_unreferenced(self) -> None:
        """No handle to it is left: it ends as Ray ends such an actor, on purpose, after the calls before
        (``__ray_terminate__``: its ``__ray_shutdown__`` and ``atexit`` handlers run)."""
        self._collected = True
        self._no_restart = True
        self._kill_reason = UNREFERENCED
        self._call("__ray_terminate__", (), {})

    def _send_forever(self) -> None:
        while True:
            call = self._calls.get()  # idle, keeps no reference to the last call
            with self._restart_lock:  # the actor to send to, and the calls to send again before this one
                started, attempt = self._core, self._attempt
                batch = self._retries.take_resend()
            if call is not None:
                batch.append(call)
            del call
            while batch:
                self._send_one(batch.pop(0), started, attempt)

    def _send_one(self, call: Call, started: Future, attempt: int) -> None:
        token, method, n, args, kwargs, group, _, out = call
        if out.done():  # cancelled before it was sent
            self._retries.never_sent(token)
            return
        try:
            core: RuntimeActor = started.result()
            for dep in owner.dependencies(args, kwargs):
                dep.exception()  # wait for it
            a, kw = owner.resolve(args, kwargs)
        except BaseException as exc:  # noqa: BLE001 - creation failed, or a dependency did
            _settle(out, exc=self._dead if isinstance(self._dead, ActorDiedError) else exc)
            return
        if out.done():  # cancelled while it waited for the actor or its arguments: never runs, as in Ray
            self._retries.never_sent(token)
            return
        self._retries.sending(call)
        if self._concurrent:
            self._pending[token] = out
            inner = core.call("_muster_submit", token, method, n, a, kw, group)
            inner.add_done_callback(lambda f: self._submitted(call, attempt, f))
            return
        self._in_actor[token] = None
        inner = core.call("_muster_call", token, method, n, a, kw)
        inner.add_done_callback(lambda f: self._answer(f, call, attempt))

    def _answer(self, f: Future, call: Call, attempt: int) -> None:
        exc = f.exception()
        self._in_actor.pop(call[0], None)
        ok, value = self._retries.failed(call, exc is None,
                                         f.result() if exc is None else exc)  # a generator's error fails it
        if not ok and self._retry(call, attempt, value):
            return
        self._complete(call[0], ok, value if ok else self._in_flight(value, attempt), call[-1])

    def _submitted(self, call: Call, attempt: int, f: Future) -> None:
        exc = f.exception()  # the call never started in the actor (the answer comes as an event otherwise)
        if exc is None:
            return
        if call[0] in self._pending and self._retry(call, attempt, exc):
            self._pending.pop(call[0], None)
            return
        self._complete(call[0], False, self._in_flight(exc, attempt))

    def _answered(self, token: int, ok: bool, value: Any) -> None:
        """An async or threaded call's answer (its ActorCallDone event): an exception its options retry
        sends it again (see :meth:`_retry`)."""
        out = self._pending.pop(token, None)  # first: a retried call is pending again once it is sent
        call = None if out is None else self._retries.sent(token)
        if call is not None:  # a generator's items that end in an error its retry_exceptions name fail it
            ok, value = self._retries.failed(call, ok, value)
        if call is not None and not ok and self._retry(call, self._attempt, value):
            return
        self._complete(token, ok, value, out)

    def _done_with(self, token: int) -> bool:
        """Forget the answered call ``token``; whether ``muster.cancel`` had reached it in the actor."""
        self._retries.answered(token)
        if token not in self._cancelled:
            return False
        self._cancelled.discard(token)
        return True

    def _complete(self, token: int, ok: bool, value: Any, out: Future | None = None) -> None:
        """A call's answer (an async/threaded call's comes as its ActorCallDone event). A call that
        was cancelled while it ran fails with TaskCancelledError whatever it returned, as in Ray
        (unless the actor died under it)."""
        out = self._pending.pop(token, None) if out is None else out
        ok, value = self._retries.merged(token, ok, value)  # after what its earlier attempts yielded
        if self._done_with(token) and not (ok is False and _cancelled_or_died(value)):
            ok, value = False, TaskCancelledError(f"{self._cls.__name__} call")
        if out is not None:
            _settle(out, value=value) if ok else _settle(out, exc=value)

    def _is_cancelled(self, token: int) -> bool:
        """Whether ``muster.cancel`` reached the call ``token`` while it was in the actor."""
        return token in self._cancelled

    def _cancel(self, token: int, out: Future, force: bool) -> bool:
        if force:
            raise InvalidArgumentError("muster.cancel(force=True) is not supported for actor calls (as in Ray); "
                             "use force=False, or muster.kill(actor) to end the whole actor.")
        if out.done():
            return False
        if self._concurrent and token in self._pending:  # in the actor: cancel it there (a running threaded
            self._cancelled.add(token)                   # call goes on, and fails once it returns)
            core: RuntimeActor = self._core.result()
            core.call("_muster_cancel", token)
            return True
        if token in self._in_actor:  # a plain actor runs it, or holds it behind the call it runs
            self._cancelled.add(token)  # is_canceled() is True in it; it fails once it returns
            self._core.result().notify(events.CallCancelled(token))  # if it waits, it never runs
            if list(self._in_actor)[:1] == [token]:  # it runs now: its caller hears once it returns
                return True
        _settle(out, exc=TaskCancelledError(f"{self._cls.__name__} call"))  # not sent yet: never will be
        return True

    def _exiting(self) -> None:
        """The actor called ``exit_actor()``: its coming death is on purpose (no restart, and said so)."""
        self._no_restart = True
        if not self._collected:
            self._kill_reason = "it exited on purpose (muster.actor.exit_actor(), or a __ray_terminate__ call)"

    def _kill(self, no_restart: bool = True, reason: str = "stopped by muster.kill()") -> None:
        self._no_restart = no_restart
        self._kill_reason = reason
        try:
            core = self._core.result(timeout=60)
        except BaseException:  # noqa: BLE001 - never started: nothing to kill
            return
        get_runtime().kill(core)
        error = ActorDiedError(f"actor {self._cls.__name__}", core.pid, -9, reason=reason)
        if no_restart:
            self._set_dead(error)
        else:
            self._on_death(core, error)


#: why an actor no handle was left to ended (the error a call on it would raise, and the state API's death cause)
UNREFERENCED = ("every handle to it was dropped, so it ended, as Ray ends such an actor; keep a handle while you "
                "use it, or make it with lifetime='detached' to keep it until muster.kill()")


def _cancelled_or_died(error: Any) -> bool:
    """``error`` already says the call was cancelled (as an async actor's does) or its actor died."""
    if isinstance(error, TaskError):
        return isinstance(error.cause, TaskCancelledError) or error.cause_type.endswith(".TaskCancelledError")
    return isinstance(error, (TaskCancelledError, ActorDiedError))


def _forget_call(ref_id: int, task_id: str, out: Future) -> None:
    """The call is settled: forget its ref, and record how it ended (the state API's row)."""
    with _lock:
        _calls_by_ref.pop(ref_id, None)
    task_table.ended(task_id, out.exception())


def pending(ref_id: int) -> bool:
    """Whether the actor call that returns ``ref_id`` is not done yet."""
    with _lock:
        return ref_id in _calls_by_ref


def cancel_call(ref: ObjectRef, force: bool) -> bool | None:
    """Cancel the actor call behind ``ref``; None when ``ref`` is not an actor call's."""
    with _lock:
        entry = _calls_by_ref.get(ref.id)
        actor = _actors.get(entry[0]) if entry else None
    if entry is None or actor is None:
        return None
    return actor._cancel(entry[1], ref.future(), force)


def _settle(out: Future, value: Any = None, exc: BaseException | None = None) -> None:
    if out.done():
        return
    try:
        out.set_exception(exc) if exc is not None else out.set_result(value)
    except Exception:  # noqa: BLE001 - a racing cancel settled it first
        pass
