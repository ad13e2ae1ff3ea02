"""Custom autoscaling policies (Ray 2.60's ``AutoscalingConfig(policy=AutoscalingPolicy(policy_function=...))``).

A policy is a function ``policy(ctx: AutoscalingContext) -> (replicas, state)``, or a class whose instance
(built once per deployment with ``policy_kwargs``) is called so. Each ``metrics_interval_s`` the controller calls
it with what it observed; ``state`` comes back as ``ctx.policy_state`` on the next call. As in Ray, the number
it returns then goes through the config's ``upscaling_factor``/``downscaling_factor``, its
``[min_replicas, max_replicas]`` bounds and its ``upscale_delay_s``/``downscale_delay_s`` before the
deployment is resized. The controller (in the driver) calls it; one that raises leaves the count as it is and
says why on stderr. An application-level policy (a config file app's ``autoscaling_policy``, Ray 2.60's) is the
same ``AutoscalingPolicy`` over all of the app's autoscaling deployments: it gets ``{DeploymentID: AutoscalingContext}``
and returns ``({DeploymentID: replicas}, {DeploymentID: state})``.
"""

from __future__ import annotations

import importlib
import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Callable, cast

from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.serve.context import DeploymentID, ReplicaID

#: Ray's name of its built-in policy: naming it asks for the default policy.
DEFAULT_POLICY_NAME = "ray.serve.autoscaling_policy:default_autoscaling_policy"


@dataclass(kw_only=True)
class AutoscalingPolicy:
    """A custom autoscaling policy (Ray's ``ray.serve.config.AutoscalingPolicy``): ``policy_function`` is a
    function, a class, or the import path ``"module:name"`` of one; ``policy_kwargs`` build the class's
    instance."""

    policy_function: Any = DEFAULT_POLICY_NAME
    policy_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (isinstance(self.policy_function, str) or callable(self.policy_function)):
            raise InvalidTypeError(f"AutoscalingPolicy(policy_function={self.policy_function!r}): pass a function, "
                                   "a class, or the import path 'module:name' of one.")
        if not isinstance(self.policy_kwargs, dict):
            raise InvalidArgumentError(f"AutoscalingPolicy(policy_kwargs={self.policy_kwargs!r}): pass a dict.")

    def is_default_policy_function(self) -> bool:
        return self.policy_function in (DEFAULT_POLICY_NAME, DEFAULT_POLICY_NAME.replace("ray.", "muster.", 1))

    def load(self) -> Callable[["AutoscalingContext"], Any]:
        """The callable to call each tick (a class is built here, once)."""
        fn: Any = self.policy_function
        if isinstance(fn, str):
            module, _, attr = fn.partition(":") if ":" in fn else fn.rpartition(".")
            try:
                fn = getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError, ValueError) as exc:
                raise InvalidArgumentError(f"AutoscalingPolicy(policy_function={self.policy_function!r}): cannot "
                                           f"import it ({type(exc).__name__}: {exc}); give 'module:name'.") from exc
        built = fn(**self.policy_kwargs) if inspect.isclass(fn) else fn
        return cast(Callable[[AutoscalingContext], Any], built)


@dataclass(frozen=True)
class TimeStampedValue:
    """One sample of a replica's custom metric (Ray's): ``timestamp`` on the controller's clock (the one of
    ``AutoscalingContext.current_time``), and the ``value`` its ``record_autoscaling_stats()`` returned."""

    timestamp: float
    value: float


class AutoscalingContext:
    """What a custom policy sees each tick (Ray's ``AutoscalingContext``; its fields).

    ``total_num_requests`` is the deployment's ongoing requests aggregated over ``look_back_period_s`` by
    ``aggregation_function``; muster's routers do not report the requests queued at callers
    (``total_queued_requests`` is 0). Custom metrics, as Ray's: a deployment class's
    ``record_autoscaling_stats(self) -> dict[str, float]`` (sync or async) runs in each replica every
    ``metrics_interval_s``; ``raw_metrics[name][replica_id]`` lists its samples of the last ``look_back_period_s``
    (:class:`TimeStampedValue`), ``aggregated_metrics[name][replica_id]`` aggregates them by
    ``aggregation_function`` (``"mean"``: weighted by how long each value held). Only running replicas are listed.
    """

    def __init__(self, *, deployment_id: DeploymentID, current_num_replicas: int, target_num_replicas: int,
                 running_replicas: list[ReplicaID], total_num_requests: float, capacity_adjusted_min_replicas: int,
                 capacity_adjusted_max_replicas: int, policy_state: dict[str, Any], last_scale_up_time: float | None,
                 last_scale_down_time: float | None, current_time: float, config: Any,
                 aggregated_metrics: dict[str, dict[ReplicaID, float]] | None = None,
                 raw_metrics: dict[str, dict[ReplicaID, list[TimeStampedValue]]] | None = None):
        self.deployment_id = deployment_id
        self.deployment_name = deployment_id.name
        self.app_name = deployment_id.app_name
        self.current_num_replicas = current_num_replicas
        self.target_num_replicas = target_num_replicas
        self.running_replicas = running_replicas
        self.total_num_requests = total_num_requests
        self.total_queued_requests = 0.0
        self.aggregated_metrics: dict[str, dict[ReplicaID, float]] = aggregated_metrics or {}
        self.raw_metrics: dict[str, dict[ReplicaID, list[TimeStampedValue]]] = raw_metrics or {}
        self.capacity_adjusted_min_replicas = capacity_adjusted_min_replicas
        self.capacity_adjusted_max_replicas = capacity_adjusted_max_replicas
        self.policy_state = policy_state
        self.last_scale_up_time = last_scale_up_time
        self.last_scale_down_time = last_scale_down_time
        self.current_time = current_time
        self.config = config

    @property
    def total_running_requests(self) -> float:
        return self.total_num_requests

    def __repr__(self) -> str:
        return (f"AutoscalingContext({self.deployment_id}, current={self.current_num_replicas}, "
                f"target={self.target_num_replicas}, requests={self.total_num_requests:g})")


def replica_queue_length_autoscaling_policy(ctx: AutoscalingContext) -> tuple[float, dict[str, Any]]:
    """Ray's default policy as a function, to call from a custom policy (or to name as one): the replicas the
    requests call for, ``total_num_requests / target_ongoing_requests``. At zero replicas it keeps the target,
    or, with requests waiting, starts the upscaling factor's worth (at least one, at least the target). As
    with any policy, the count then goes through the config's factors, bounds and delays.

    Returns:
        ``(replicas, policy_state)``.
    """
    config = ctx.config
    if ctx.current_num_replicas == 0:
        if ctx.total_num_requests > 0:
            return max(math.ceil(config.factor(True)), ctx.target_num_replicas), ctx.policy_state
        return ctx.target_num_replicas, {}
    return ctx.total_num_requests / config.target_ongoing_requests, {}


#: Ray's other name of it
default_autoscaling_policy = replica_queue_length_autoscaling_policy


def __getattr__(name: str) -> object:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.serve.autoscaling_policy", name)
