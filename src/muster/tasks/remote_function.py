"""``@muster.remote`` on a function: ``f.remote(...)`` runs it as a task."""

from __future__ import annotations

import functools
import inspect
import threading
import warnings
import weakref
from concurrent.futures import Future
from typing import Any, Callable, NoReturn

from muster._unsupported import raise_unsupported
from muster.core import context as core_context
from muster.core import resources as res
from muster.core.api import get_runtime
from muster.core.init_options import current_namespace
from muster.core.runtime import BundleRef, NodeRef
from muster.exceptions import (
    InvalidArgumentError,
    InvalidTypeError,
    ResourcesUnavailableError,
    TaskCancelledError,
    WorkerCrashedError,
)
from muster.runtime_env import working_dir as local_dirs
from muster.tasks import definition_size, events, owner, task_table, worker_side
from muster.tasks import options as opts
from muster.tasks import runtime_context as rc
from muster.tasks.generators import ObjectRefGenerator, Stream, shaped
from muster.tasks.objects import ObjectRef, snapshot_args
from muster.tasks.worker_side import TaskBody, TaskInfo

_DEFAULT_MAX_RETRIES = 3  # retries after the process died (Ray's default); exceptions only with retry_exceptions


class RemoteFunction:
    def __init__(self, fn: Callable[..., Any], options: dict[str, Any]):
        self._fn = fn
        self._options = opts.validate(options, opts.TASK_OPTIONS, f"@muster.remote on {fn.__name__}")
        opts.check_generator_returns(fn, self._options.get("num_returns"), fn.__name__)
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise InvalidTypeError(
            f"Remote function {self._fn.__name__}() cannot be called directly. "
            f"Use {self._fn.__name__}.remote(...) to run it as a task, and muster.get() for the result."
        )

    def bind(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise_unsupported("muster.RemoteFunction", "bind")

    def options(self, **options: Any) -> "RemoteFunction":
        """A copy with some options replaced, e.g. ``f.options(num_gpus=1).remote(x)``.

        Raises:
            ValueError: ``max_calls``, which only ``@muster.remote`` sets (as in Ray).
        """
        if "max_calls" in options:
            raise InvalidArgumentError(
                f"{self._fn.__name__}.options(max_calls={options['max_calls']!r}): max_calls cannot be set in "
                f".options() (as in Ray); set it where the function is declared: @muster.remote(max_calls=...)."
            )
        return RemoteFunction(self._fn, {**self._options, **options})

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """Run the function as a task; returns a ref to its result at once.

        With ``num_returns=n`` a list of n refs; with ``num_returns="dynamic"`` a
        ref to an ``ObjectRefGenerator``; a generator function (or
        ``num_returns="streaming"``) returns an ``ObjectRefGenerator`` itself.

        Raises:
            TypeError: the arguments do not fit the function's signature (checked here, as in Ray).
        """
        opts.check_call(self._fn, args, kwargs, f"{self._fn.__name__}.remote()")
        definition_size.check_function(self._fn)
        if core_context.in_worker():
            options = worker_side.child_options(self._options)
            return shaped(core_context.send_event(
                events.Submit(self._fn, args, kwargs, options, worker_side.current_task_id())))
        args, kwargs = snapshot_args(args, kwargs, f"{self._fn.__name__}.remote()")  # as they are now
        n = num_returns(self._fn, self._options)
        if n == "streaming":  # the items come as they are yielded
            source, stream = submit_streaming(self._fn, args, kwargs, self._options)
            return ObjectRefGenerator(source=source, stream=stream)
        return shape(submit(self._fn, args, kwargs, self._options), n)


def num_returns(fn: Callable[..., Any], options: dict[str, Any]) -> Any:
    """``num_returns`` as given, else "streaming" for a generator function and 1 for the rest."""
    n = options.get("num_returns")
    if n is None:
        return "streaming" if inspect.isgeneratorfunction(fn) else 1
    return n


def shape(ref: ObjectRef, n: Any) -> Any:
    """A task's one ref as its caller expects it: one ref, n refs (None for 0), or a generator of refs."""
    if n == "streaming":
        return ObjectRefGenerator.of_list(ref)
    if n == "dynamic":
        return ObjectRef.new(ObjectRefGenerator.future_of_list(ref))
    if n == 1:
        return ref
    return task_table.split_refs(ref, n) if n else None


_live: "weakref.WeakValueDictionary[str, _Attempts]" = weakref.WeakValueDictionary()  # task id -> its runs
_by_ref: dict[int, str] = {}  # ref id -> task id, while the task is not done
_live_lock = threading.Lock()


def submit_streaming(fn: Callable[..., Any], args: tuple, kwargs: dict,
                     options: dict[str, Any]) -> tuple[ObjectRef, Stream | None]:
    """A streaming generator task: (the ref to the list of its items once it ended, the live
    :class:`Stream` its items arrive in as they are yielded; None if it never starts)."""
    streams: list[Stream] = []
    task = submit(fn, args, kwargs, options, on_stream=streams.append)
    return task, streams[0] if streams else None


def submit(fn: Callable[..., Any], args: tuple, kwargs: dict, options: dict[str, Any],
           on_stream: Callable[[Stream], None] | None = None) -> ObjectRef:
    """Run ``fn`` as a task; its ref. A streaming generator task's items arrive as it yields them
    (a :class:`Stream`, handed to ``on_stream``); its ref gets the list of them once it ended."""
    runtime = get_runtime()
    resources = opts.to_resources(options, default_cpus=1.0)
    name = getattr(fn, "__name__", "fn")
    out: Future = Future()
    ref = ObjectRef.new(out)
    group, index, capture = opts.placement_group_of(options)
    try:
        res.ensure_feasible(resources, 1, runtime.resources(), what=f"task {name}", knob=res.OPTIONS_KNOB,
                            no_gpu_fix=res.NO_GPU_OPTION_FIX)
        bundle = None if group is None else group._bundle_for(resources, index, what=f"task {name}")
        node = opts.node_of(options, f"task {name}")
    except ResourcesUnavailableError as exc:
        # As in Ray: the ref comes back; get()/wait() raise at once. Warn now, naming what is missing.
        warnings.warn(str(exc), stacklevel=3)
        out.set_exception(exc)
        return ref
    info = TaskInfo(job_id=rc.driver_job_id(), task_id=rc.new_task_id(), namespace=current_namespace(),
                    resources=resources, placement_group=group, capture_child_tasks=capture,
                    function=f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', name)}",
                    task_name=options.get("name") or None)
    body = TaskBody(fn, info, num_returns(fn, options), (options.get("runtime_env") or {}).get("env_vars") or {},
                    options.get("max_calls") or 0, options.get("retry_exceptions") or False,
                    local_dirs.on_engine(options.get("runtime_env"), runtime, f"task {name}"))
    ended = out
    if body.num_returns == "streaming":  # its end goes to the stream, which settles ``out`` once every item is in
        ended = Future()
        stream = Stream(info.task_id or "", out)
        ended.add_done_callback(lambda f: stream.end(error=f.exception()) if f.exception() is not None
                                else stream.end(result=f.result()))
        if on_stream is not None:
            on_stream(stream)
    task_id, waits_for = info.task_id or "", owner.dependencies(args, kwargs)
    task_table.submitted(task_id, ref.id, name=info.task_name or name, function=getattr(fn, "__qualname__", name),
                         kind="NORMAL_TASK", resources=resources, group=group, waits=bool(waits_for))
    attempts = _Attempts(runtime, body, args, kwargs, resources, options, ended, bundle, node)
    with _live_lock:
        _live[task_id] = attempts
        _by_ref[ref.id] = task_id
    ref_id = ref.id  # not the ref itself: the future must not keep its own ref alive
    out.add_done_callback(lambda f: _forget(ref_id, task_id, f))
    owner.when_all(waits_for, attempts.start)
    return ref


def _forget(ref_id: int, task_id: str, out: Future) -> None:
    """The task is settled: forget its ref, and record how it ended (the state API's row)."""
    with _live_lock:
        _by_ref.pop(ref_id, None)
    task_table.ended(task_id, out.exception())


class _Attempts:
    """One task's runs: start it, and start it again after a crash while ``max_retries`` allows.

    A plain object rather than two closures calling each other: closures would
    form a reference cycle, and the task's arguments and result would then
    outlive its last ref until the cyclic garbage collector happened to run.
    """

    def __init__(self, runtime: Any, body: TaskBody, args: tuple, kwargs: dict,
                 resources: dict[str, float], options: dict[str, Any], out: Future, bundle: BundleRef | None,
                 node: NodeRef | None):
        self.runtime, self.body, self.args, self.kwargs, self.resources, self.out = (
            runtime, body, args, kwargs, resources, out)
        self.bundle = bundle  # where in its placement group it runs (None: in none)
        self.node = node  # the node it is pinned to (None: any)
        self.max_retries = options.get("max_retries", _DEFAULT_MAX_RETRIES)
        self.retry_exceptions = options.get("retry_exceptions", False)  # True, or a list of exception types
        self.label = f"task {body.__name__}"
        self.cancelled: bool | None = None  # None, or force
        self.worker: Any = None  # the process running it now (from its TaskStarted event)
        self.children: list[int] = []  # the refs of the tasks and actor calls it submitted (``cancel.adopt``)
        self.recursive = False  # cancelled with its children (what it submits next is cancelled too)
        self.kept = 0  # how many children were still pending when they were last pruned
        self.run: Future | None = None  # the engine's future of its current run

    def start(self, attempt: int = 0) -> None:
        if self.cancelled is not None:
            return
        task_table.pending(self.body.info.task_id or "", attempt)
        try:
            a, kw = owner.resolve(self.args, self.kwargs)
            inner = self.runtime.submit(self.body, a, kw, self.resources, on_event=owner.handle_event,
                                        label=self.label, bundle=self.bundle, max_calls=self.body.limit(),
                                        node=self.node)
        except BaseException as exc:  # noqa: BLE001 - a failed dependency or an impossible request
            _settle(self.out, exc=exc)
            return
        self.run = inner
        inner.add_done_callback(functools.partial(self.finish, attempt=attempt))
        if self.cancelled is not None:  # cancelled while it was being submitted
            self.interrupt()

    def finish(self, f: Future, attempt: int) -> None:
        self.worker = self.run = None  # (its future holds this object in a callback: no cycle)
        exc = f.exception()
        retriable = isinstance(exc, WorkerCrashedError) or opts.retries_exception(self.retry_exceptions, exc)
        if self.cancelled is not None:
            return  # its ref already says TaskCancelledError
        if exc is not None and retriable and (self.max_retries == -1 or attempt < self.max_retries):
            self.start(attempt + 1)
        elif exc is not None:
            _settle(self.out, exc=exc)
        else:
            _settle(self.out, value=f.result())

    def started(self, worker: Any) -> None:
        """Its TaskStarted event: the process running it (interrupt it now if cancelled meanwhile)."""
        self.worker = worker
        task_table.started(self.body.info.task_id or "", worker)
        if self.cancelled is not None:
            self.interrupt()

    def cancel(self, force: bool, recursive: bool) -> None:
        self.cancelled, self.recursive = force, recursive
        _settle(self.out, exc=TaskCancelledError(self.label))
        self.interrupt()

    def interrupt(self) -> None:
        worker, run = self.worker, self.run
        if worker is None and run is not None:  # not started: an engine that queues it cancels it there
            worker = self.runtime.queued(run)
        if worker is None:
            return
        if self.cancelled:  # force: end the process
            self.runtime.kill(worker)
        else:  # KeyboardInterrupt in the task, as Ray does
            self.runtime.interrupt(worker)


def _settle(out: Future, value: Any = None, exc: BaseException | None = None) -> None:
    if out.done():
        return
    try:
        out.set_exception(exc) if exc is not None else out.set_result(value)
    except Exception:  # noqa: BLE001 - settled by a racing cancel
        pass


def task_started(task_id: str, worker: Any) -> None:
    with _live_lock:
        attempts = _live.get(task_id)
    if attempts is not None:
        attempts.started(worker)


def is_cancelled(task_id: str) -> bool:
    """Whether ``muster.cancel`` was called on the task ``task_id`` (while it was known here)."""
    with _live_lock:
        attempts = _live.get(task_id)
    return attempts is not None and attempts.cancelled is not None


def pending(ref_id: int) -> bool:
    """Whether the task that returns ``ref_id`` is not done yet."""
    with _live_lock:
        return ref_id in _by_ref


def running(task_id: str | None) -> _Attempts | None:
    """The task ``task_id`` while it is not done (None: it is done, unknown, or an actor call)."""
    with _live_lock:
        attempts = _live.get(task_id) if task_id else None
    return None if attempts is None or attempts.out.done() else attempts


def cancel(ref: ObjectRef, force: bool, recursive: bool) -> _Attempts | None:
    """Cancel the task behind ``ref`` (driver side): it, or None when it is unknown or already done."""
    with _live_lock:
        task_id = _by_ref.get(ref.id)
    attempts = running(task_id)
    if attempts is not None:
        attempts.cancel(force, recursive)
    return attempts
