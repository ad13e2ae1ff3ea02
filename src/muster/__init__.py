"""muster: run a plain PyTorch training function on N workers.

The public API follows Ray's name for name (``ray`` -> ``muster``).  Training
lives in :mod:`muster.train`; this module holds the engine controls and Ray
Core's tasks, actors and objects (``remote``, ``get``, ``wait``, ``put``, ``kill``).
"""

from __future__ import annotations

from muster.core.api import init, is_initialized, shutdown
from muster.exceptions import MusterError
from muster.tasks import ObjectRef, get, get_gpu_ids, kill, put, remote, wait

__version__ = "0.1.0"


def cluster_resources() -> dict[str, float]:
    """Everything the engine has, free or not (starts the engine if needed).

    Inside a task or actor it asks the driver's engine."""
    from muster.core import context
    from muster.core.api import get_runtime

    if context.in_worker():
        return context.send_event({"kind": "cluster_resources"})
    return get_runtime().resources()


def available_resources() -> dict[str, float]:
    """What the engine has free now (starts the engine if needed).

    Inside a task or actor it asks the driver's engine."""
    from muster.core import context
    from muster.core.api import get_runtime

    if context.in_worker():
        return context.send_event({"kind": "available_resources"})
    return get_runtime().available()


__all__ = [
    "MusterError",
    "ObjectRef",
    "get",
    "get_gpu_ids",
    "kill",
    "put",
    "remote",
    "wait",
    "__version__",
    "available_resources",
    "cluster_resources",
    "init",
    "is_initialized",
    "shutdown",
]
