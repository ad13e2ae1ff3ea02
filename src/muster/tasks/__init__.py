"""Ray Core's tasks, actors and objects on muster's engine (``ray.remote`` -> ``muster.remote``)."""

from __future__ import annotations

import os
from typing import Any, Callable

from muster.exceptions import InvalidTypeError
from muster.tasks.actor import ActorClass, ActorHandle, WorkerActorHandle
from muster.tasks.actor_method import method
from muster.tasks.cancel import cancel
from muster.tasks.generators import ObjectRefGenerator
from muster.tasks.named import get_actor, list_named_actors
from muster.tasks.objects import ObjectRef, get, put, wait
from muster.tasks.options import declared_task_options
from muster.tasks.remote_function import RemoteFunction
from muster.tasks.runtime_context import RuntimeContext, get_runtime_context


def remote(*args: Any, **options: Any) -> Any:
    """Make a function a task or a class an actor, bare or with options.

    ``@muster.remote``, ``@muster.remote(num_cpus=2, num_gpus=1, resources={...})``,
    ``max_retries=`` (tasks: retries after the process died, default 3),
    ``max_restarts=`` (actors: restarts after the process died, default 0),
    ``num_returns=`` (tasks: an int, "dynamic" or "streaming"),
    ``max_concurrency=`` (actors: calls that may overlap; async actors default to 1000),
    ``name=`` / ``namespace=`` / ``get_if_exists=`` / ``lifetime=`` (named actors),
    ``runtime_env={"env_vars": {...}, "working_dir": <local folder>, "py_modules": [...]}``.
    A ``PlacementGroupSchedulingStrategy`` (or ``placement_group=``) runs the work in that group's
    reserved bundle; Ray's other scheduling strategies are accepted and have no effect on muster's
    one-node engine.
    """
    if len(args) == 1 and not options and callable(args[0]):
        return _make(args[0], {})
    if args:
        raise InvalidTypeError("Use @muster.remote or @muster.remote(num_cpus=..., ...) with keyword options only.")

    def decorate(target: Callable[..., Any] | type) -> Any:
        return _make(target, options)

    return decorate


def _make(target: Any, options: dict[str, Any]) -> Any:
    if isinstance(target, (ActorClass, RemoteFunction)):
        name = getattr(target, "__name__", None) or type(target).__name__
        raise InvalidTypeError(
            f"muster.remote({name}): {name} is already remote; call {name}.remote(...), or "
            f"{name}.options(...).remote(...) for other options."
        )
    if isinstance(target, type):
        return ActorClass(target, options)
    return RemoteFunction(target, declared_task_options(options))


def kill(actor: ActorHandle | WorkerActorHandle, *, no_restart: bool = True) -> None:
    """End an actor now; its pending and later calls fail with ActorDiedError.

    With ``no_restart=False`` an actor that has ``max_restarts`` left is started again.
    """
    if not isinstance(actor, (ActorHandle, WorkerActorHandle)):
        raise InvalidTypeError(f"muster.kill() takes an actor handle, got {type(actor).__name__}.")
    actor._kill(no_restart)


def get_gpu_ids() -> list[int]:
    """The GPU ids this task or actor was given (as in CUDA_VISIBLE_DEVICES); [] in the driver."""
    from muster.core import context as core_context

    if not core_context.in_worker():
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return [int(d) for d in visible.split(",") if d.strip().isdigit()]


__all__ = [
    "ActorClass", "ActorHandle", "ObjectRef", "ObjectRefGenerator", "RemoteFunction", "RuntimeContext", "cancel",
    "get", "get_actor", "get_gpu_ids", "get_runtime_context", "kill", "list_named_actors", "method", "put",
    "remote", "wait",
]
