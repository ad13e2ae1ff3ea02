"""muster: run a plain PyTorch training function on N workers.

The public API follows Ray's name for name (``ray`` -> ``muster``).  Training
lives in :mod:`muster.train`; this module holds the engine controls and Ray
Core's tasks, actors and objects (``remote``, ``get``, ``wait``, ``put``,
``kill``, ``cancel``, ``get_actor``, ``method``, ``get_runtime_context``).
"""

from __future__ import annotations

import importlib
from typing import Any

from muster._ray_paths import install_ray_path_finder
from muster._unsupported import install_finder
from muster.core.api import init, is_initialized, shutdown
from muster.core.api import on_start as _on_start
from muster.exceptions import MusterError
from muster.tasks import (
    ObjectRef,
    ObjectRefGenerator,
    cancel,
    get,
    get_actor,
    get_gpu_ids,
    get_runtime_context,
    kill,
    method,
    put,
    remote,
    wait,
)

__version__ = "0.1.0"

def _record_user_metrics(runtime: Any) -> None:
    """The run store records the engine's user metrics (``muster.util.metrics``) for the dashboard, from
    the first series a process sends (an engine whose processes record none never loads the recorder)."""

    def first(closing: bool) -> None:
        if not closing:
            from muster.observe.metrics_recorder import attach

            attach(runtime)

    runtime.user_metrics.subscribe(first)


_on_start(_record_user_metrics)
install_finder()  # `import muster.util.state` (not provided) names the equivalent, not "no module named"
install_ray_path_finder()  # Ray's deeper paths (`muster.tune.stopper.maximum_iteration`) import their names

DynamicObjectRefGenerator = ObjectRefGenerator  # Ray's older name (num_returns="dynamic")

# Subpackages reached as attributes (``ray.util.ActorPool`` style) without an import first.
_LAZY_SUBMODULES = ("util", "train", "tune", "exceptions", "data", "serve", "observe", "actor", "job_config",
                    "runtime_context")


def cluster_resources() -> dict[str, float]:
    """Everything the engine has, free or not (starts the engine if needed).

    Inside a task or actor it asks the driver's engine."""
    from muster.core import context
    from muster.core.api import get_runtime

    if context.in_worker():
        from muster.tasks.events import Resources

        return context.send_event(Resources(available=False))
    return get_runtime().ray_view()


def available_resources() -> dict[str, float]:
    """What the engine has free now (starts the engine if needed).

    As Ray's, a resource with nothing free is left out (``"CPU" not in available_resources()`` while
    every CPU is taken), so read it with ``.get("CPU", 0.0)``. Inside a task or actor it asks the
    driver's engine."""
    from muster.core import context
    from muster.core.api import get_runtime

    if context.in_worker():
        from muster.tasks.events import Resources

        free = context.send_event(Resources(available=True))
    else:
        free = get_runtime().ray_view(available=True)
    return {name: amount for name, amount in free.items() if amount > 0}


def nodes() -> list[dict[str, Any]]:
    """The engine's nodes, as Ray's ``ray.nodes()`` lists them (one on the embedded engine)."""
    from muster.core import api
    from muster.tasks import runtime_context as rc

    if api.is_initialized() and api.get_runtime().name == "ray":
        import ray

        return list(ray.nodes())  # Ray's own list: every node of the cluster
    return [{"NodeID": rc.node_id(), "Alive": True, "NodeManagerAddress": rc.node_ip_address(),
             "NodeManagerHostname": __import__("socket").gethostname(), "Resources": cluster_resources()}]


def __getattr__(name: str) -> Any:
    if name in _LAZY_SUBMODULES:
        try:
            return importlib.import_module(f"muster.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"muster.{name}":
                raise
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster", name)


__all__ = [
    "DynamicObjectRefGenerator",
    "MusterError",
    "ObjectRef",
    "ObjectRefGenerator",
    "cancel",
    "get",
    "get_actor",
    "get_gpu_ids",
    "get_runtime_context",
    "kill",
    "method",
    "put",
    "remote",
    "wait",
    "__version__",
    "available_resources",
    "cluster_resources",
    "init",
    "is_initialized",
    "nodes",
    "shutdown",
]
