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
from muster.tasks.objects import ObjectRef

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
        return submit(self._fn, args, kwargs, self._options)


def submit(fn: Callable[..., Any], args: tuple, kwargs: dict, options: dict[str, Any]) -> ObjectRef:
    runtime = get_runtime()
    resources = opts.to_resources(options, default_cpus=1.0)
    res.ensure_feasible(resources, 1, runtime.resources(), what=f"task {getattr(fn, '__name__', 'fn')}")
    max_retries = options.get("max_retries", _DEFAULT_MAX_RETRIES)
    retry_exceptions = bool(options.get("retry_exceptions", False))
    label = f"task {getattr(fn, '__name__', 'fn')}"
    out: Future = Future()
    ref = ObjectRef.new(out)

    def start(attempt: int) -> None:
        try:
            a, kw = owner.resolve(args, kwargs)
            inner = runtime.submit(fn, a, kw, resources, on_event=owner.handle_event, label=label)
        except BaseException as exc:  # noqa: BLE001 - a failed dependency or an impossible request
            out.set_exception(exc)
            return
        inner.add_done_callback(lambda f: finish(f, attempt))

    def finish(f: Future, attempt: int) -> None:
        exc = f.exception()
        retriable = isinstance(exc, WorkerCrashedError) or (retry_exceptions and isinstance(exc, TaskError))
        if exc is not None and retriable and (max_retries == -1 or attempt < max_retries):
            start(attempt + 1)
        elif exc is not None:
            out.set_exception(exc)
        else:
            out.set_result(f.result())

    owner.when_all(owner.dependencies(args, kwargs), lambda: start(0))
    return ref
