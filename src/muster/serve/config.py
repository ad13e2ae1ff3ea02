"""Serve's configuration objects, validated where they are made.

``DeploymentConfig`` holds what ``@serve.deployment(...)`` accepts (Ray
Serve's names); ``AutoscalingConfig`` and ``HTTPOptions`` are the nested
dicts Ray takes, as typed objects.  Each ``ValueError`` names the field, the
bad value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import warnings
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping

from muster.core import resources as res
from muster.core.init_options import warn_unused_runtime_env
from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.serve._internal import replica_groups
from muster.serve.autoscaling_policy import AutoscalingContext, AutoscalingPolicy  # noqa: F401 - Ray's names
from muster.serve.context import DeploymentID  # noqa: F401 - Ray keeps it in ray.serve.config
from muster.serve.gang import (  # noqa: F401 - Ray keeps them in ray.serve.config
    GangPlacementStrategy,
    GangRuntimeFailurePolicy,
    GangSchedulingConfig,
)

_ACTOR_OPTION_KEYS = ("num_cpus", "num_gpus", "resources", "runtime_env", "memory")


#: Ray's deployment options with no effect here, and what happens instead (None: nothing to say,
#: Ray deprecated or keeps them internal). Each is accepted, and the others said so in a warning.
NO_EFFECT: dict[str, str | None] = {
    "is_driver_deployment": None,
    "max_replicas_per_node": "replicas are not capped per node",
    "request_router_config": "requests go to the replica with fewer ongoing requests of two picked at random "
                             "(power of two choices); custom routers are not supported",
    # Ray 2.60's
    "max_constructor_retry_count": "a replica constructor that raises fails serve.run at once, naming the error "
                                   "(no retries)",
    "rolling_update_percentage": "a redeploy starts all the new replicas beside the old ones and then switches "
                                 "(the old ones stop first when both sets cannot fit)",
    "max_surge_percent": "a redeploy starts all the new replicas beside the old ones and then switches (the old ones "
                         "stop first when both sets cannot fit)",
}


#: Deployment options Ray removed before 2.60 (old scripts and docs still pass them), and what replaced each.
_REMOVED_OPTIONS = {
    "max_concurrent_queries": "use max_ongoing_requests",
    "route_prefix": "use serve.run(app, route_prefix=...)",
    "version": "drop it: Serve versions a deployment itself, as serve.get_replica_context().code_version",
}


def removed_options_hint(names: list[str]) -> str:
    """What replaced those of ``names`` that Ray removed ("" when none is)."""
    said = [f"{n} ({_REMOVED_OPTIONS[n]})" for n in names if n in _REMOVED_OPTIONS]
    return f" Ray removed {', '.join(said)}." if said else ""


def drop_no_effect(options: dict[str, Any], name: str) -> dict[str, Any]:
    """``options`` less Ray's options with no effect here, with a warning for each one that matters."""
    for key in sorted(set(options) & set(NO_EFFECT)):
        why = NO_EFFECT[key]
        if why is not None and options[key] is not None:
            warnings.warn(f"deployment {name!r}: {key}={options[key]!r} has no effect in muster: {why}.",
                          stacklevel=3)
    return {k: v for k, v in options.items() if k not in NO_EFFECT}




def _positive(name: str, value: Any, *, allow_zero: bool = False, integer: bool = False) -> None:
    kind = int if integer else (int, float)
    ok = (isinstance(value, kind) and not isinstance(value, bool)
          and not (isinstance(value, float) and math.isnan(value)))
    if not ok or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise InvalidArgumentError(f"{name}={value!r}: must be {'an integer' if integer else 'a number'} {bound}.")


def _from_dict(cls: Any, value: Any, option: str, example: str) -> Any:
    """``value`` as a ``cls`` (Ray's config options take an instance or a dict of its fields); None stays None.
    An unknown field is an error naming it, so a typo is not silently dropped."""
    if value is None or isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(f"{option}={value!r}: pass a {cls.__name__} or a dict such as {example}.")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise InvalidArgumentError(f"{option}: unknown field(s) {unknown}; known: {sorted(known)}.")
    return cls(**dict(value))


class AggregationFunction(str, Enum):
    """How ``AutoscalingConfig.aggregation_function`` folds the window's samples (Ray's enum; a string works too)."""

    MEAN = "mean"
    MAX = "max"
    MIN = "min"


@dataclass(kw_only=True)
class AutoscalingConfig:
    """How many replicas a deployment runs, following its ongoing requests (Ray's fields)."""

    min_replicas: int = 1
    initial_replicas: int | None = None
    max_replicas: int = 1
    target_ongoing_requests: float = 2.0
    upscale_delay_s: float = 30.0
    downscale_delay_s: float = 600.0
    metrics_interval_s: float = 0.5
    look_back_period_s: float = 30.0  # the policy works on the ongoing requests aggregated over this window
    aggregation_function: str = "mean"  # how: "mean", "max" or "min" of the samples in the window
    smoothing_factor: float = 1.0  # how far each decision moves toward the wanted count (1: all the way)
    upscaling_factor: float | None = None  # the smoothing factor up (default: smoothing_factor)
    downscaling_factor: float | None = None  # ... and down
    upscale_smoothing_factor: float | None = None  # Ray's older names of the two above
    downscale_smoothing_factor: float | None = None
    downscale_to_zero_delay_s: float | None = None  # the 1 -> 0 step's delay (None: downscale_delay_s)
    policy: AutoscalingPolicy | None = None  # a custom policy (Ray's); None: the default one

    @classmethod
    def default(cls) -> "AutoscalingConfig":
        """Ray's default for ``num_replicas="auto"``: 1 to 100 replicas, 2 ongoing requests each."""
        return cls(min_replicas=1, max_replicas=100, target_ongoing_requests=2.0)

    def __post_init__(self) -> None:
        self.policy = _from_dict(AutoscalingPolicy, self.policy, "autoscaling_config.policy",
                                 "{'policy_function': 'my_module:my_policy'}")
        if self.policy is not None and self.policy.is_default_policy_function():
            self.policy = None
        _positive("autoscaling_config.min_replicas", self.min_replicas, allow_zero=True, integer=True)
        _positive("autoscaling_config.max_replicas", self.max_replicas, integer=True)
        if self.max_replicas < self.min_replicas:
            raise InvalidArgumentError(
                f"autoscaling_config: max_replicas={self.max_replicas} is below min_replicas={self.min_replicas}; "
                "raise max_replicas or lower min_replicas."
            )
        if self.initial_replicas is not None:
            _positive("autoscaling_config.initial_replicas", self.initial_replicas, allow_zero=True, integer=True)
            if not self.min_replicas <= self.initial_replicas <= self.max_replicas:
                raise InvalidArgumentError(
                    f"autoscaling_config.initial_replicas={self.initial_replicas} must lie between min_replicas="
                    f"{self.min_replicas} and max_replicas={self.max_replicas}."
                )
        _positive("autoscaling_config.target_ongoing_requests", self.target_ongoing_requests)
        _positive("autoscaling_config.upscale_delay_s", self.upscale_delay_s, allow_zero=True)
        _positive("autoscaling_config.downscale_delay_s", self.downscale_delay_s, allow_zero=True)
        _positive("autoscaling_config.metrics_interval_s", self.metrics_interval_s)
        _positive("autoscaling_config.look_back_period_s", self.look_back_period_s)
        _positive("autoscaling_config.smoothing_factor", self.smoothing_factor)
        for f in ("upscaling_factor", "downscaling_factor", "upscale_smoothing_factor", "downscale_smoothing_factor"):
            if getattr(self, f) is not None:
                _positive(f"autoscaling_config.{f}", getattr(self, f))
        if self.downscale_to_zero_delay_s is not None:
            _positive("autoscaling_config.downscale_to_zero_delay_s", self.downscale_to_zero_delay_s, allow_zero=True)
        self.aggregation_function = str(getattr(self.aggregation_function, "value", self.aggregation_function))
        if self.aggregation_function.lower() not in ("mean", "max", "min"):
            raise InvalidArgumentError(
                f"autoscaling_config.aggregation_function={self.aggregation_function!r}: use 'mean', 'max' or 'min'."
            )
        self.aggregation_function = self.aggregation_function.lower()

    def get_upscaling_factor(self) -> float:
        """Ray's: the factor of a decision up."""
        return self.factor(True)

    def get_downscaling_factor(self) -> float:
        """Ray's: the factor of a decision down."""
        return self.factor(False)

    def get_target_ongoing_requests(self) -> float:
        """Ray's: ``target_ongoing_requests``."""
        return self.target_ongoing_requests

    def factor(self, up: bool) -> float:
        """The smoothing factor of a decision up (or down): the specific one, else ``smoothing_factor``."""
        if up:
            got = self.upscaling_factor if self.upscaling_factor is not None else self.upscale_smoothing_factor
        else:
            got = self.downscaling_factor if self.downscaling_factor is not None else self.downscale_smoothing_factor
        return self.smoothing_factor if got is None else got

    @property
    def start_replicas(self) -> int:
        return self.initial_replicas if self.initial_replicas is not None else self.min_replicas

    @classmethod
    def coerce(cls, value: "AutoscalingConfig | Mapping[str, Any] | None") -> "AutoscalingConfig | None":
        if isinstance(value, Mapping):
            value = dict(value)
            for old in sorted(set(value) & set(_GONE_AUTOSCALING_FIELDS)):
                warnings.warn(f"autoscaling_config: {old}={value.pop(old)!r} is ignored, as Ray 2.60 ignores it: "
                              f"it is Ray's removed name for {_GONE_AUTOSCALING_FIELDS[old]}; set that instead.",
                              stacklevel=5)
        return _from_dict(cls, value, "autoscaling_config", "{'min_replicas': 1, 'max_replicas': 4}")


#: Ray's old autoscaling field names, and their names now: Ray 2.60 drops them without a word (its config
#: ignores unknown fields), so a ported config that still has one gets Ray's default instead.
_GONE_AUTOSCALING_FIELDS = {
    "target_num_ongoing_requests_per_replica": "target_ongoing_requests",
}


@dataclass(kw_only=True)
class BackpressureConfig:
    """The HTTP answer to a request refused because the deployment's queue is full (Ray's
    ``ray.serve.config.BackpressureConfig``): ``status_code`` 503 or 429, and ``retry_after_s``, sent as a
    ``Retry-After`` header rounded up to whole seconds (None: no header). A deployment without one
    answers 503 with ``Retry-After: 1`` (Ray's sends no header; a client that honours it backs off instead of
    retrying at once); an unavailable deployment always gets 503."""

    status_code: int = 503
    retry_after_s: float | None = None

    def __post_init__(self) -> None:
        if self.status_code not in (503, 429) or isinstance(self.status_code, bool):
            raise InvalidArgumentError(f"BackpressureConfig(status_code={self.status_code!r}): use 503 (the default) "
                                       "or 429, as Ray allows.")
        if self.retry_after_s is not None:
            _positive("BackpressureConfig(retry_after_s", self.retry_after_s, allow_zero=True)
            if math.isinf(self.retry_after_s):
                raise InvalidArgumentError(f"BackpressureConfig(retry_after_s={self.retry_after_s!r}): use a finite "
                                           "number of seconds, or None for no Retry-After header.")

    @classmethod
    def coerce(cls, value: "BackpressureConfig | Mapping[str, Any] | None") -> "BackpressureConfig | None":
        # Ray refuses unknown fields too, so a typo (retry_after) is not silently dropped
        return _from_dict(cls, value, "backpressure_config", "{'status_code': 429, 'retry_after_s': 5}")

    def rejection(self) -> tuple[int, float | None]:
        """The status and ``retry_after_s`` a refused request gets."""
        return self.status_code, self.retry_after_s


#: What a refused request gets when the deployment sets no ``backpressure_config``: 503, retry after 1 s.
DEFAULT_REJECTION: tuple[int, float | None] = (503, 1.0)


_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_LOGRECORD_ATTRS = frozenset({  # Ray's LOGRECORD_STANDARD_ATTRS: what additional_log_standard_attrs may name
    "args", "asctime", "created", "exc_info", "exc_text", "filename", "funcName", "levelname", "levelno", "lineno",
    "message", "module", "msecs", "msg", "name", "pathname", "process", "processName", "relativeCreated",
    "stack_info", "thread", "threadName", "taskName"})


@dataclass(kw_only=True)
class LoggingConfig:
    """How a deployment's replicas log (Ray's ``ray.serve.schema.LoggingConfig``), applied to the ``ray.serve`` /
    ``muster.serve`` loggers in its replicas: ``log_level`` (lines at it and above reach their output),
    ``encoding`` (``"TEXT"`` or ``"JSON"``: one JSON object per line with Ray's keys, in the replica's output
    and its file), ``logs_dir`` (each replica also writes its lines to ``replica_<app>_<deployment>_<id>.log``
    there), ``enable_access_log`` (an access line per request in that file, as Ray's) and
    ``additional_log_standard_attrs`` (``LogRecord`` attributes added to each line)."""

    encoding: str = "TEXT"
    log_level: str | int = "INFO"
    logs_dir: str | None = None
    enable_access_log: bool = True
    additional_log_standard_attrs: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        level = logging.getLevelName(self.log_level) if isinstance(self.log_level, int) else self.log_level
        if not isinstance(level, str) or level.upper() not in _LOG_LEVELS:
            raise InvalidArgumentError(f"LoggingConfig(log_level={self.log_level!r}): use one of {list(_LOG_LEVELS)} "
                                       "(or its logging constant).")
        self.log_level = level.upper()
        encoding = self.encoding.value if isinstance(self.encoding, Enum) else self.encoding  # Ray's EncodingType
        if str(encoding).upper() not in ("TEXT", "JSON"):
            raise InvalidArgumentError(f"LoggingConfig(encoding={self.encoding!r}): use 'TEXT' or 'JSON'.")
        self.encoding = str(encoding).upper()
        attrs = self.additional_log_standard_attrs
        if not isinstance(attrs, (list, tuple)) or any(a not in _LOGRECORD_ATTRS for a in attrs):
            raise InvalidArgumentError(
                f"LoggingConfig(additional_log_standard_attrs={attrs!r}): each must be one of Python's LogRecord "
                f"attributes {sorted(_LOGRECORD_ATTRS)}.")
        self.additional_log_standard_attrs = list(dict.fromkeys(attrs))

    @classmethod
    def coerce(cls, value: "LoggingConfig | Mapping[str, Any] | None") -> "LoggingConfig | None":
        return _from_dict(cls, value, "logging_config", "{'log_level': 'DEBUG'}")


@dataclass(kw_only=True)
class DeploymentActorConfig:
    """An actor the deployment's replicas share (Ray 2.60's ``ray.serve.config.DeploymentActorConfig``),
    started before them and stopped after them; a replica reaches it with ``serve.get_deployment_actor(name)``.

    ``actor_class`` is a ``@muster.remote`` class or its import path ``"module:Class"``; ``actor_options`` are
    its ``.options(...)`` (``num_cpus``, ``max_restarts``, ...)."""

    name: str
    actor_class: Any
    init_args: tuple = ()
    init_kwargs: dict[str, Any] = field(default_factory=dict)
    actor_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidArgumentError(f"DeploymentActorConfig(name={self.name!r}): give the name replicas look it "
                                       "up by, a non-empty string.")
        if isinstance(self.init_args, list):
            self.init_args = tuple(self.init_args)
        for f in ("init_kwargs", "actor_options"):
            if not isinstance(getattr(self, f), Mapping):
                raise InvalidArgumentError(f"DeploymentActorConfig(name={self.name!r}): {f}={getattr(self, f)!r}: "
                                           "pass a dict.")
        bad = sorted({"name", "namespace", "get_if_exists"} & set(self.actor_options))
        if bad:
            raise InvalidArgumentError(f"DeploymentActorConfig(name={self.name!r}): actor_options {bad} are Serve's "
                                       "to set (it names the actor); drop them.")

    @classmethod
    def coerce_all(cls, value: Any, deployment: str) -> "tuple[DeploymentActorConfig, ...]":
        """``deployment_actors=``: a list of configs (or dicts of their fields) with distinct names."""
        if value is None:
            return ()
        if not isinstance(value, (list, tuple)):
            raise InvalidArgumentError(f"{deployment}: deployment_actors={value!r}: pass a list of "
                                       "DeploymentActorConfig.")
        out = tuple(v if isinstance(v, cls) else cls(**v) if isinstance(v, Mapping) else _not_actor_config(v)
                    for v in value)
        names = [c.name for c in out]
        if len(set(names)) != len(names):
            raise InvalidArgumentError(f"{deployment}: deployment_actors names {names} repeat; give each its own.")
        return out


def _not_actor_config(value: Any) -> Any:
    raise InvalidTypeError(f"deployment_actors entry {value!r}: use DeploymentActorConfig(name=..., actor_class=...).")


@dataclass(kw_only=True)
class DeploymentConfig:
    """Everything ``@serve.deployment(...)`` / ``.options(...)`` sets for one deployment."""

    name: str
    num_replicas: int | str | None = None
    ray_actor_options: dict[str, Any] = field(default_factory=dict)
    max_ongoing_requests: int = 5
    max_queued_requests: int = -1
    autoscaling_config: AutoscalingConfig | None = None
    user_config: Any = None
    health_check_period_s: float = 10.0
    health_check_timeout_s: float = 30.0
    graceful_shutdown_timeout_s: float = 20.0
    graceful_shutdown_wait_loop_s: float = 2.0
    backpressure_config: BackpressureConfig | None = None
    deployment_actors: tuple[DeploymentActorConfig, ...] = ()
    logging_config: LoggingConfig | None = None
    gang_scheduling_config: GangSchedulingConfig | None = None
    placement_group_bundles: list[dict[str, float]] | None = None  # each replica's own group; it runs in bundle 0
    placement_group_strategy: str | None = None  # how the group is placed (PACK when bundles are given)
    placement_group_bundle_label_selector: list[dict[str, str]] | None = None  # one per bundle (one: for all)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or "/" in self.name or "#" in self.name:
            raise InvalidArgumentError(f"deployment name={self.name!r}: use a non-empty string without '/' or '#' "
                                       "(replica names are app#deployment#n, as in Ray).")
        self.autoscaling_config = AutoscalingConfig.coerce(self.autoscaling_config)
        self.backpressure_config = BackpressureConfig.coerce(self.backpressure_config)
        self.deployment_actors = DeploymentActorConfig.coerce_all(self.deployment_actors, self.name)
        self.logging_config = LoggingConfig.coerce(self.logging_config)
        if self.num_replicas == "auto":
            if self.autoscaling_config is None:
                self.autoscaling_config = AutoscalingConfig.default()
        elif self.num_replicas is not None:
            if isinstance(self.num_replicas, bool) or not isinstance(self.num_replicas, int) or self.num_replicas < 0:
                raise InvalidArgumentError(f"deployment {self.name!r}: num_replicas={self.num_replicas!r}: use an "
                                           "integer >= 1, or 'auto' to scale with the load.")
            if self.num_replicas == 0:  # Ray refuses it too; its router would only ever queue
                raise InvalidArgumentError(
                    f"deployment {self.name!r}: num_replicas=0: a fixed count must be 1 or more (as in Ray); for a "
                    "deployment that stops its replicas when idle, use autoscaling_config={'min_replicas': 0, "
                    "'max_replicas': N}."
                )
            if self.autoscaling_config is not None:
                raise InvalidArgumentError(
                    f"{self.name}: num_replicas={self.num_replicas} and autoscaling_config are both set; "
                    "give one (num_replicas='auto' or autoscaling_config for autoscaling)."
                )
        self.gang_scheduling_config = GangSchedulingConfig.coerce(self.gang_scheduling_config, self.name)
        if self.gang_scheduling_config is not None:
            # as Ray, the bounds the user set (a default one is rounded up to whole gangs when it applies)
            given = {f.name: f.default for f in dataclasses.fields(AutoscalingConfig)}
            counts: dict[str, int | None] = {
                "num_replicas": self.num_replicas if isinstance(self.num_replicas, int) else None}
            for bound in ("min_replicas", "max_replicas", "initial_replicas"):
                value = getattr(self.autoscaling_config, bound, None)
                counts[f"autoscaling_config.{bound}"] = value if value != given[bound] else None
            self.gang_scheduling_config.check_counts(self.name, counts)
        _positive(f"{self.name}: max_ongoing_requests", self.max_ongoing_requests, integer=True)
        if not isinstance(self.max_queued_requests, int) or (
                self.max_queued_requests < 0 and self.max_queued_requests != -1):
            raise InvalidArgumentError(
                f"{self.name}: max_queued_requests={self.max_queued_requests!r}: use -1 (no limit) or an integer >= 0."
            )
        for f in ("health_check_period_s", "health_check_timeout_s"):
            _positive(f"{self.name}: {f}", getattr(self, f))
        _positive(f"{self.name}: graceful_shutdown_timeout_s", self.graceful_shutdown_timeout_s, allow_zero=True)
        if self.user_config is not None:
            try:
                json.dumps(self.user_config)
            except (TypeError, ValueError) as exc:
                raise InvalidArgumentError(
                    f"{self.name}: user_config={self.user_config!r} is not JSON-serializable ({exc}). Pass plain "
                    "data (dicts, lists, strings, numbers, booleans, None), as Ray requires: a config file holds it "
                    "too.") from exc
        if not isinstance(self.ray_actor_options, Mapping):
            raise InvalidArgumentError(f"{self.name}: ray_actor_options={self.ray_actor_options!r}: pass a dict.")
        unknown = sorted(set(self.ray_actor_options) - set(_ACTOR_OPTION_KEYS))
        if unknown:
            raise InvalidArgumentError(
                f"{self.name}: ray_actor_options has unknown key(s) {unknown}; known: {list(_ACTOR_OPTION_KEYS)}."
            )
        self.placement_group_bundles, self.placement_group_strategy = replica_groups.checked(
            self.name, self.placement_group_bundles, self.placement_group_strategy, self.resources(),
            gang=self.gang_scheduling_config is not None)
        self.placement_group_bundle_label_selector = replica_groups.checked_selectors(
            self.name, self.placement_group_bundles, self.placement_group_bundle_label_selector)
        self.env_vars()
        warn_unused_runtime_env(self.ray_actor_options.get("runtime_env"), f"deployment {self.name!r}", stacklevel=5)

    @property
    def initial_replicas(self) -> int:
        if self.autoscaling_config is not None:
            return self.autoscaling_config.start_replicas
        return 1 if self.num_replicas is None else int(self.num_replicas)

    def rejection(self) -> tuple[int, float | None]:
        """The HTTP status and ``retry_after_s`` of a request the full queue refuses."""
        return DEFAULT_REJECTION if self.backpressure_config is None else self.backpressure_config.rejection()

    def resources(self) -> dict[str, float]:
        """The resources one replica holds (Ray's default: 1 CPU)."""
        opts = self.ray_actor_options
        request: dict[str, float] = {"CPU": opts.get("num_cpus", 1), "GPU": opts.get("num_gpus", 0)}
        request.update(opts.get("resources") or {})
        return res.normalize(request, what=f"deployment {self.name!r} ray_actor_options", spelled=res.ARGUMENT_NAMES)

    def replica_holds(self) -> dict[str, float]:
        """What one replica holds while it lives: its whole placement group when it has one, else
        :meth:`resources`."""
        return replica_groups.held(self.placement_group_bundles, self.resources())

    def env_vars(self) -> dict[str, str]:
        runtime_env = self.ray_actor_options.get("runtime_env") or {}
        if not isinstance(runtime_env, Mapping):
            raise InvalidArgumentError(f"{self.name}: runtime_env={runtime_env!r}: "
                                       "pass a dict such as {'env_vars': {...}}.")
        env = runtime_env.get("env_vars") or {}
        bad = {k: v for k, v in env.items() if not isinstance(k, str) or not isinstance(v, str)}
        if bad:
            raise InvalidArgumentError(f"{self.name}: runtime_env env_vars must map str to str; bad entries: {bad!r}.")
        return dict(env)

    def replace(self, **changes: Any) -> "DeploymentConfig":
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise InvalidTypeError(f"deployment options: unknown option(s) {unknown}; known: {sorted(known)}."
                                   + removed_options_hint(unknown))
        if "num_replicas" in changes and "autoscaling_config" not in changes:
            changes["autoscaling_config"] = None
        if ("autoscaling_config" in changes and "num_replicas" not in changes
                and changes["autoscaling_config"] is not None):
            changes["num_replicas"] = None
        return dataclasses.replace(self, **changes)


class ProxyLocation(str, Enum):
    """Where Ray runs its HTTP proxies (Ray's ``serve.start(proxy_location=...)``; a string works too). muster runs
    one HTTP ingress process on the driver's node: ``HeadOnly`` is what it does, and ``EveryNode`` (Ray's default)
    means the same on one node; with ``Disabled`` it still runs, and ``serve.start`` warns so (``route_prefix=None``
    keeps an app off HTTP)."""

    Disabled = "Disabled"
    HeadOnly = "HeadOnly"
    EveryNode = "EveryNode"

    @classmethod
    def _normalize(cls, location: "ProxyLocation | str | None") -> "ProxyLocation | None":
        """``location`` as the enum (Ray's older ``"NoServer"`` is ``Disabled``); None stays None.

        Raises:
            InvalidArgumentError: a string that names none of them.
            InvalidTypeError: anything else (an ``http_options`` dict passed first, say).
        """
        if location is None or isinstance(location, cls):
            return location
        if isinstance(location, str):
            if location == "NoServer":
                return cls.Disabled
            if location in cls._value2member_map_:
                return cls(location)
            raise InvalidArgumentError(f"proxy_location={location!r}: use one of {[m.value for m in cls]} "
                                       "(muster.serve.config.ProxyLocation).")
        raise InvalidTypeError(f"proxy_location={location!r}: pass a ProxyLocation or its name; HTTP settings go "
                               "in serve.start(http_options={'host': ..., 'port': ...}).")


@dataclass(kw_only=True)
class HTTPOptions:
    """Where and how the HTTP ingress listens (``serve.start(http_options=...)``)."""

    host: str = "127.0.0.1"
    port: int = 8000
    # None: granian (measured fastest here), or uvicorn once an app with WebSocket routes is deployed (granian's
    # ingress serves none); "granian" or "uvicorn" choose outright
    server: str | None = None
    loop: str = "uvloop"  # the ingress's event loop; "asyncio" is the standard library's own
    request_timeout_s: float | None = None
    max_body_bytes: int = 100 * 1024 * 1024
    keep_alive_timeout_s: float = 5.0
    # HTTPS: the server's certificate and key files (PEM), both or neither, as in Ray
    ssl_keyfile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile_password: str | None = None
    ssl_ca_certs: str | None = None
    # Ray's, with no effect here (a value that would change something warns): one ingress runs, on
    # the driver's node (Ray's "HeadOnly"), at the root path, with no extra middlewares
    location: str | None = None
    root_path: str = ""
    middlewares: list[Any] | None = None
    num_cpus: float | None = None

    def __post_init__(self) -> None:
        said = [f"{k}={v!r}" for k, v in (("location", self.location), ("root_path", self.root_path),
                                         ("middlewares", self.middlewares), ("num_cpus", self.num_cpus))
                if v not in (None, "", [], "HeadOnly")]
        if said:
            warnings.warn(f"http_options {', '.join(said)} have no effect on muster: one HTTP ingress runs on the "
                          "driver's node, at the root path, with no extra middlewares.", stacklevel=3)
        if not isinstance(self.host, str) or not self.host:
            raise InvalidArgumentError(f"http_options host={self.host!r}: "
                                       "give an interface address such as '127.0.0.1'.")
        if not isinstance(self.port, int) or isinstance(self.port, bool) or not 0 <= self.port <= 65535:
            raise InvalidArgumentError(f"http_options port={self.port!r}: "
                                       "use an integer in 0..65535 (0 picks a free port).")
        if self.server not in (None, "granian", "uvicorn"):
            raise InvalidArgumentError(f"http_options server={self.server!r}: use 'granian' or 'uvicorn' (or leave it "
                                       "out: granian, or uvicorn once an app has WebSocket routes).")
        if self.loop not in ("uvloop", "asyncio"):
            raise InvalidArgumentError(f"http_options loop={self.loop!r}: use 'uvloop' or 'asyncio'.")
        if self.request_timeout_s is not None:
            _positive("http_options.request_timeout_s", self.request_timeout_s)
        _positive("http_options.max_body_bytes", self.max_body_bytes, integer=True)
        self._check_tls()

    @property
    def tls(self) -> bool:
        """Whether the ingress serves HTTPS."""
        return self.ssl_certfile is not None

    def _check_tls(self) -> None:
        if (self.ssl_keyfile is None) != (self.ssl_certfile is None):
            raise InvalidArgumentError(
                f"http_options ssl_keyfile={self.ssl_keyfile!r}, ssl_certfile={self.ssl_certfile!r}: HTTPS needs "
                "both, the server's private key and its certificate (PEM files); give both or neither."
            )
        for name in ("ssl_keyfile", "ssl_certfile", "ssl_ca_certs"):
            path = getattr(self, name)
            if path is not None and not os.path.isfile(path):
                raise InvalidArgumentError(f"http_options {name}={path!r}: no such file; give the path of a PEM file.")

    @classmethod
    def coerce(cls, value: "HTTPOptions | Mapping[str, Any] | None") -> "HTTPOptions":
        return cls() if value is None else _from_dict(cls, value, "http_options", "{'host': '127.0.0.1', 'port': 8000}")


def __getattr__(name: str) -> object:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.serve.config", name)
