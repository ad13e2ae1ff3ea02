"""muster.serve: Ray Serve's API on muster's runtime.

Deployments run as replicas (actors holding their resources) behind one
HTTP ingress process; handles call them from Python.  A Ray Serve script
ports by changing ``from ray import serve`` to ``from muster import serve``.
"""

from __future__ import annotations

from muster.serve.api import (
    ApplicationStatusOverview,
    DeploymentStatusOverview,
    RunTarget,
    ServeStatus,
    delete,
    get_app_handle,
    get_deployment_handle,
    run,
    run_many,
    shutdown,
    shutdown_async,
    start,
    status,
)
from muster.serve.batching import batch
from muster.serve.config import AutoscalingConfig, DeploymentConfig, HTTPOptions
from muster.serve.context import (
    ReplicaContext,
    get_deployment_actor,
    get_deployment_actor_context,
    get_replica_context,
)
from muster.serve.deployment import Application, Deployment, deployment, ingress
from muster.serve.exceptions import BackPressureError, RayServeException
from muster.serve.handle import DeploymentHandle, DeploymentResponse, DeploymentResponseGenerator
from muster.serve.multiplex import get_multiplexed_model_id, multiplexed

try:  # as importing Ray's Serve does: `import starlette` and then `starlette.requests.Request` (Ray's snippets)
    import starlette.requests  # noqa: F401
except ImportError:  # no "muster[serve]": handles work without starlette
    pass

__all__ = [
    "Application",
    "ApplicationStatusOverview",
    "AutoscalingConfig",
    "BackPressureError",
    "Deployment",
    "DeploymentConfig",
    "DeploymentHandle",
    "DeploymentResponse",
    "DeploymentResponseGenerator",
    "DeploymentStatusOverview",
    "HTTPOptions",
    "RayServeException",
    "ReplicaContext",
    "RunTarget",
    "ServeStatus",
    "batch",
    "delete",
    "deployment",
    "get_app_handle",
    "get_deployment_actor",
    "get_deployment_actor_context",
    "get_deployment_handle",
    "get_multiplexed_model_id",
    "get_replica_context",
    "ingress",
    "multiplexed",
    "run",
    "run_many",
    "shutdown",
    "shutdown_async",
    "start",
    "status",
]


def __getattr__(name: str) -> object:
    if name == "metrics":  # Ray's serve.metrics (Counter, Gauge, Histogram with the replica's tags)
        import importlib

        return importlib.import_module("muster.serve.metrics")
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.serve", name)
