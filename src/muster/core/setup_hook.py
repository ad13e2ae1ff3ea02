"""Ray's ``runtime_env={"worker_process_setup_hook": ...}`` given to ``muster.init``: a function run once in
every worker process as it starts, before its first task or actor (Ray's docs use it to configure logging in
workers). The driver puts the hook in one environment variable, which every worker of the embedded engine
inherits and runs (:func:`run_in_worker`); on a Ray cluster, Ray's own ``ray.init`` gets it (:func:`for_ray`).
Ray takes the hook from ``ray.init`` only, as here; a task's or actor's own ``runtime_env`` cannot set one.
"""

from __future__ import annotations

import base64
import importlib
import os
import sys
import traceback
from typing import Any, Callable

import cloudpickle

from muster.exceptions import InvalidArgumentError, InvalidTypeError

#: The environment variable that carries the hook to the workers.
HOOK_ENV = "MUSTER_WORKER_PROCESS_SETUP_HOOK"
_MAX_BYTES = 64 * 1024  # an environment variable travels through exec() for workers started fresh


def encode(hook: Any) -> str:
    """The value of :data:`HOOK_ENV` for ``hook``: a function (pickled by value when it lives in
    ``__main__``) or the ``"module.function"`` path of one that workers import.

    Raises:
        InvalidTypeError: ``hook`` is neither a callable nor a string.
        InvalidArgumentError: a string that is not ``module.function``, or a hook too big to pass on.
    """
    if isinstance(hook, str):
        if "." not in hook.strip("."):
            raise InvalidArgumentError(
                f"muster.init(runtime_env={{'worker_process_setup_hook': {hook!r}}}): name the function as "
                "'module.function' (importable in the workers), or pass the function itself."
            )
        return "import:" + hook
    if not callable(hook):
        raise InvalidTypeError(
            f"muster.init(runtime_env={{'worker_process_setup_hook': {hook!r}}}): pass a function (or its "
            "'module.function' path) that each worker runs once as it starts."
        )
    value = "pickle:" + base64.b64encode(cloudpickle.dumps(hook)).decode("ascii")
    if len(value) > _MAX_BYTES:
        raise InvalidArgumentError(
            f"muster.init(runtime_env={{'worker_process_setup_hook': {hook!r}}}): the function pickles to "
            f"{len(value)} bytes with what it captures (at most {_MAX_BYTES}); have it import or read what it "
            "needs instead of capturing it."
        )
    return value


def _load(value: str) -> Callable[[], Any]:
    kind, _, body = value.partition(":")
    if kind == "import":
        module, _, name = body.rpartition(".")
        return getattr(importlib.import_module(module), name)
    return cloudpickle.loads(base64.b64decode(body))


def for_ray() -> Callable[[], Any] | str | None:
    """The hook ``muster.init`` was given, as Ray's ``ray.init(runtime_env=...)`` takes it (the function, or
    its ``"module.function"`` path), for an engine that runs on a Ray cluster; None without one."""
    value = os.environ.get(HOOK_ENV)
    if not value:
        return None
    return value.partition(":")[2] if value.startswith("import:") else _load(value)


def run_in_worker() -> bool:
    """Run the hook the driver set, if any, in this (new) worker. False when it failed: the traceback and
    what to do are on stderr, and the worker should exit."""
    value = os.environ.get(HOOK_ENV)
    if not value:
        return True
    try:
        _load(value)()
        return True
    except BaseException:  # noqa: BLE001 - the worker reports it and exits
        shown = value if value.startswith("import:") else "the function given"
        print(f"muster: worker_process_setup_hook ({shown}) from muster.init(runtime_env=...) raised in this "
              "worker, which exits; fix the hook (it runs once in every worker before its first task):\n"
              f"{traceback.format_exc()}", file=sys.stderr, flush=True)
        return False
