"""``@muster.remote`` on a function: ``f.remote(...)`` runs it as a task."""

from __future__ import annotations

import functools
from concurrent.futures import Future
from typing import Any, Callable

from muster.core import context as core_context
from muster.core import resources as res
from muster.core.api import get_runtime
from muster.exceptions import TaskError, WorkerCrashedError
from muster.tasks import options as opts
from muster.tasks import owner
from muster.tasks.objects import ObjectRef, snapshot_args

_DEFAULT_MAX_RETRIES = 3  # retries after the process died (Ray's default); exceptions are not retried


class RemoteFunction:
    def __init__(self, fn: Callable[..., Any], options: dict[str, Any]):
        self._fn = fn
        self._options = opts.validate(options, opts.TASK_OPTIONS, f"@muster.remote on {fn.__name__}")
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"Remote function {self._fn.__name__}() cannot be called directly. "
            f"Use {self._fn.__name__}.remote(...) to run it as a task, and muster.get() for the result."
        )

    def options(self, **options: Any) -> "RemoteFunction":
        """A copy with some options replaced, e.g. ``f.options(num_gpus=1).remote(x)``."""
        return RemoteFunction(self._fn, {**self._options, **options})

    def remote(self, *args: Any, **kwargs: Any) -> ObjectRef:
        """Run the function as a task; returns a ref to its result at once."""
        if core_context.in_worker():
            ref_id = core_context.send_event(
                {"kind": "submit", "fn": self._fn, "args": args, "kwargs": kwargs, "options": self._options}
            )
            return ObjectRef(ref_id)
        args, kwargs = snapshot_args(args, kwargs, f"{self._fn.__name__}.remote()")  # as they are now
        return submit(self._fn, args, kwargs, self._options)


def submit(fn: Callable[..., Any], args: tuple, kwargs: dict, options: dict[str, Any]) -> ObjectRef:
    runtime = get_runtime()
    resources = opts.to_resources(options, default_cpus=1.0)
    res.ensure_feasible(resources, 1, runtime.resources(), what=f"task {getattr(fn, '__name__', 'fn')}")
    out: Future = Future()
    ref = ObjectRef.new(out)
    attempts = _Attempts(runtime, fn, args, kwargs, resources, options, out)
    owner.when_all(owner.dependencies(args, kwargs), attempts.start)
    return ref


class _Attempts:
    """One task's runs: start it, and start it again after a crash while ``max_retries`` allows.

    A plain object rather than two closures calling each other: closures would
    form a reference cycle, and the task's arguments and result would then
    outlive its last ref until the cyclic garbage collector happened to run.
    """

    def __init__(self, runtime: Any, fn: Callable[..., Any], args: tuple, kwargs: dict,
                 resources: dict[str, float], options: dict[str, Any], out: Future):
        self.runtime, self.fn, self.args, self.kwargs, self.resources, self.out = (
            runtime, fn, args, kwargs, resources, out)
        self.max_retries = options.get("max_retries", _DEFAULT_MAX_RETRIES)
        self.retry_exceptions = bool(options.get("retry_exceptions", False))
        self.label = f"task {getattr(fn, '__name__', 'fn')}"

    def start(self, attempt: int = 0) -> None:
        try:
            a, kw = owner.resolve(self.args, self.kwargs)
            inner = self.runtime.submit(self.fn, a, kw, self.resources, on_event=owner.handle_event, label=self.label)
        except BaseException as exc:  # noqa: BLE001 - a failed dependency or an impossible request
            self.out.set_exception(exc)
            return
        inner.add_done_callback(functools.partial(self.finish, attempt=attempt))

    def finish(self, f: Future, attempt: int) -> None:
        exc = f.exception()
        retriable = isinstance(exc, WorkerCrashedError) or (self.retry_exceptions and isinstance(exc, TaskError))
        if exc is not None and retriable and (self.max_retries == -1 or attempt < self.max_retries):
            self.start(attempt + 1)
        elif exc is not None:
            self.out.set_exception(exc)
        else:
            self.out.set_result(f.result())
