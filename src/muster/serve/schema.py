"""Serve config files (Ray's schema) and import paths, for ``muster serve run|deploy``.

    http_options: {host: 127.0.0.1, port: 8000}
    applications:
      - name: app1
        route_prefix: /
        import_path: my_module:app        # or my_module.app
        args: {model_path: ...}           # passed to an app builder function
        logging_config: {encoding: JSON}  # for the deployments that set none
        deployments:                      # per-deployment overrides, by name
          - name: Model
            num_replicas: 2
            ray_actor_options: {num_cpus: 1}
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import os
import sys
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.serve.api import ApplicationStatusOverview, DeploymentStatusOverview, ServeStatus
from muster.serve.autoscaling_policy import AutoscalingPolicy
from muster.serve.config import AutoscalingConfig, DeploymentConfig, HTTPOptions, LoggingConfig, _from_dict
from muster.serve.context import ReplicaRank  # Ray keeps it here; ReplicaContext.rank is one
from muster.serve.deployment import Application, Deployment
from muster.serve.gang import GangSchedulingConfig

from muster.serve._internal.deploy_schema import (
    DeploymentSchema,
    RayActorOptionsSchema,
    ServeApplicationSchema,
    ServeDeploySchema,
)

__all__ = [  # Ray keeps these in ray.serve.schema; the status and config classes are the ones muster.serve exports
    "APIType", "AppSchema", "ApplicationStatus", "ApplicationStatusOverview", "AutoscalingConfig",
    "DeploymentConfig", "DeploymentSchema", "DeploymentStatus", "DeploymentStatusOverview", "DeploymentStatusTrigger",
    "EncodingType",
    "GangSchedulingConfig", "HTTPOptions", "LoggingConfig", "ProxyStatus", "RayActorOptionsSchema", "ReplicaRank",
    "ServeApplicationSchema",
    "ServeConfig",
    "ServeDeploySchema", "ServeStatus", "build_config", "deploy", "import_app", "load_config",
]


class EncodingType(str, Enum):
    """Ray's names for ``LoggingConfig.encoding`` (which takes these or the plain strings)."""

    TEXT = "TEXT"
    JSON = "JSON"


class APIType(str, Enum):
    """Ray's: which API an application came from (``serve.run`` imperative, a config file declarative)."""

    UNKNOWN = "unknown"
    IMPERATIVE = "imperative"
    DECLARATIVE = "declarative"

    @classmethod
    def get_valid_user_values(cls) -> list[str]:
        """The values a user may pass (all but ``unknown``), as Ray's."""
        return [t.value for t in cls if t is not cls.UNKNOWN]


class ApplicationStatus(str, Enum):
    """Ray's names for ``serve.status().applications[name].status`` (a plain string there, equal to these)."""

    NOT_STARTED = "NOT_STARTED"
    DEPLOYING = "DEPLOYING"
    DEPLOY_FAILED = "DEPLOY_FAILED"
    RUNNING = "RUNNING"
    UNHEALTHY = "UNHEALTHY"
    DELETING = "DELETING"


class DeploymentStatus(str, Enum):
    """Ray's names for a ``DeploymentStatusOverview.status`` (a plain string, equal to these)."""

    UPDATING = "UPDATING"
    HEALTHY = "HEALTHY"
    UNHEALTHY = "UNHEALTHY"
    DEPLOY_FAILED = "DEPLOY_FAILED"
    UPSCALING = "UPSCALING"
    DOWNSCALING = "DOWNSCALING"


class DeploymentStatusTrigger(str, Enum):
    """Ray's names for a ``DeploymentStatusOverview.status_trigger``: what brought the deployment to its status (a
    plain string there, equal to these). Muster sets those it tracks: a deploy started or done, autoscaling and
    the up- or downscale it completed, a replica that failed to start, one that failed its health check or died
    (``UNSPECIFIED`` once its replacement runs, as Ray's)."""

    UNSPECIFIED = "UNSPECIFIED"
    CONFIG_UPDATE_STARTED = "CONFIG_UPDATE_STARTED"
    CONFIG_UPDATE_COMPLETED = "CONFIG_UPDATE_COMPLETED"
    UPSCALE_COMPLETED = "UPSCALE_COMPLETED"
    DOWNSCALE_COMPLETED = "DOWNSCALE_COMPLETED"
    AUTOSCALING = "AUTOSCALING"
    REPLICA_STARTUP_FAILED = "REPLICA_STARTUP_FAILED"
    DEPLOYMENT_ACTOR_FAILED = "DEPLOYMENT_ACTOR_FAILED"
    HEALTH_CHECK_FAILED = "HEALTH_CHECK_FAILED"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    DELETING = "DELETING"


class ProxyStatus(str, Enum):
    """Ray's names for the values of ``serve.status().proxies`` (muster's one ingress)."""

    STARTING = "STARTING"
    HEALTHY = "HEALTHY"
    UNHEALTHY = "UNHEALTHY"
    DRAINING = "DRAINING"
    DRAINED = "DRAINED"


def __getattr__(name: str) -> object:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.serve.schema", name)


@dataclass(kw_only=True)
class AppSchema:
    """One application of a config file."""

    import_path: str
    name: str = "default"
    route_prefix: str | None = "/"
    args: dict[str, Any] = field(default_factory=dict)
    deployments: list[dict[str, Any]] = field(default_factory=list)
    runtime_env: dict[str, Any] = field(default_factory=dict)
    #: Ray 2.60's application-level policy: ``{policy_function: "module:name", policy_kwargs: {...}}``
    autoscaling_policy: Any = None
    #: a ``LoggingConfig`` (or mapping) for the app's deployments that set none, as ``serve.run(logging_config=)``
    logging_config: Any = None
    #: the mapping as the file gave it (what ``muster serve config`` prints back, as Ray's does)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.import_path, str) or not self.import_path:
            raise InvalidArgumentError(f"application {self.name!r}: import_path={self.import_path!r}: "
                                       "use 'module:attribute'.")
        if not isinstance(self.args, dict):
            raise InvalidArgumentError(f"application {self.name!r}: args={self.args!r}: use a mapping.")
        for d in self.deployments:
            if not isinstance(d, dict) or not isinstance(d.get("name"), str):
                raise InvalidArgumentError(f"application {self.name!r}: every deployments entry needs a name; "
                                           f"got {d!r}.")
        self.autoscaling_policy = _from_dict(AutoscalingPolicy, self.autoscaling_policy,
                                             f"application {self.name!r}: autoscaling_policy",
                                             "{'policy_function': 'module:name'}")
        self.logging_config = LoggingConfig.coerce(self.logging_config)

    def overrides(self) -> dict[str, dict[str, Any]]:
        return {d["name"]: {k: v for k, v in d.items() if k != "name"} for d in self.deployments}


#: Ray's top-level config fields with no effect here (accepted with a warning).
_RAY_TOP_LEVEL = ("proxy_location", "grpc_options", "logging_config", "target_capacity")


@dataclass(kw_only=True)
class ServeConfig:
    """A whole config file."""

    applications: list[AppSchema]
    http_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = [a.name for a in self.applications]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise InvalidArgumentError(f"config: application names must be unique; repeated: {dup}.")

    @classmethod
    def from_dict(cls, raw: Any, source: str = "config") -> "ServeConfig":
        if not isinstance(raw, dict) or not isinstance(raw.get("applications"), list):
            raise InvalidArgumentError(f"{source}: expected a mapping with an 'applications' list "
                                       "(Ray Serve's config schema).")
        known = {f.name for f in dataclasses.fields(AppSchema)} - {"raw"}
        apps = []
        for i, a in enumerate(raw["applications"]):
            if not isinstance(a, dict):
                raise InvalidArgumentError(f"{source}: applications[{i}] must be a mapping, got {a!r}.")
            unknown = sorted(set(a) - known)
            if unknown:
                raise InvalidArgumentError(f"{source}: applications[{i}] has unknown field(s) {unknown}; "
                                           f"known: {sorted(known)}.")
            apps.append(AppSchema(**a, raw=copy.deepcopy(a)))
        top = set(raw) - {"applications", "http_options"}
        unknown = sorted(top - set(_RAY_TOP_LEVEL))
        if unknown:
            raise InvalidArgumentError(f"{source}: unknown top-level field(s) {unknown}; known: applications, "
                                       f"http_options (and Ray's {', '.join(_RAY_TOP_LEVEL)}, which have no effect).")
        if top:
            import warnings

            warnings.warn(f"{source}: {', '.join(sorted(top))} have no effect in muster (one HTTP ingress in this "
                          "process, no gRPC proxy; logs go to the console and `muster logs`).", stacklevel=3)
        return cls(applications=apps, http_options=dict(raw.get("http_options") or {}))


def load_config(path: str) -> ServeConfig:
    """Read and validate a YAML (or JSON) config file.

    Raises:
        FileNotFoundError / ValueError: the file is missing or does not follow the schema.
    """
    try:
        import yaml
    except ImportError as exc:  # pragma: no cover - pyyaml ships with the serve extra
        raise ImportError('reading Serve config files needs PyYAML: pip install "muster[serve]"') from exc
    with open(path) as f:
        raw = yaml.safe_load(f)
    return ServeConfig.from_dict(raw, source=path)


def import_app(import_path: str, args: dict[str, Any] | None = None, reload: bool = False) -> Application:
    """The application ``module:attr`` names: a bound app, a deployment (bound with no args), or a builder.
    ``reload`` imports the module's file again (``muster serve run --reload`` after it changed).

    Raises:
        ImportError: the module or the attribute does not exist (the message names which).
        TypeError: the attribute is none of those.
    """
    if ":" in import_path:
        module_name, attr = import_path.split(":", 1)
    elif "." in import_path:
        module_name, attr = import_path.rsplit(".", 1)
    else:
        raise ImportError(f"import path {import_path!r}: use 'module:attribute' (for example 'serve_app:app').")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
        if reload:
            module = importlib.reload(module)
    except ModuleNotFoundError as exc:
        raise ImportError(
            f"import path {import_path!r}: module {module_name!r} was not found ({exc}); run from the folder that "
            "holds it or add that folder to PYTHONPATH."
        ) from exc
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise ImportError(
            f"import path {import_path!r}: module {module_name!r} ({module.__file__}) has no attribute {attr!r}."
        ) from None
    if isinstance(obj, Application):
        if args:
            raise InvalidTypeError(f"{import_path} is already bound; args={args!r} need an application "
                                   "builder function.")
        return obj
    if isinstance(obj, Deployment):
        return obj.bind(**(args or {}))
    if callable(obj):
        app = obj(_typed_args(obj, args or {}, import_path))
        if isinstance(app, Application):
            return app
        raise InvalidTypeError(f"{import_path}(args) returned {app!r}, not a bound application (Deployment.bind(...)).")
    raise InvalidTypeError(f"{import_path} is {type(obj).__name__}, not an application: point at Deployment.bind(...).")


def _typed_args(builder: Any, args: dict[str, Any], import_path: str) -> Any:
    """``args`` for an app builder: as its first parameter's pydantic model when it is annotated with
    one (Ray's typed app builders), else the dict itself."""
    import inspect
    import typing

    try:
        params = list(inspect.signature(builder).parameters.values())
        hints = typing.get_type_hints(builder)
    except (TypeError, ValueError, NameError):
        return args
    model = hints.get(params[0].name) if params else None
    if not isinstance(model, type) or not hasattr(model, "model_validate"):
        return args
    validate = model.model_validate
    try:
        return validate(args)
    except Exception as exc:  # pydantic's ValidationError names each bad field
        raise InvalidArgumentError(f"{import_path}: args {args!r} do not fit {model.__name__}: {exc}") from exc


def build_config(import_paths: list[str]) -> dict[str, Any]:
    """A config (as a dict, Ray's schema) running the apps ``import_paths`` name: ``app1``, ``app2``... at ``/``,
    ``/app2``...; each deployment lists the options its code sets that differ from the defaults."""
    from muster.serve._internal import plan

    apps = []
    for i, path in enumerate(import_paths, start=1):
        name = f"app{i}"
        _, plans = plan.build(import_app(path), name)
        apps.append({"name": name, "route_prefix": "/" if i == 1 else f"/{name}", "import_path": path,
                     "runtime_env": {}, "deployments": [_set_options(p.config) for p in plans]})
    defaults = HTTPOptions()
    return {"http_options": {"host": defaults.host, "port": defaults.port}, "applications": apps}


def _set_options(config: DeploymentConfig) -> dict[str, Any]:
    """``config``'s name and the options that differ from a bare ``@serve.deployment``'s, as plain data."""
    bare = DeploymentConfig(name=config.name)
    out: dict[str, Any] = {"name": config.name}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if f.name in ("name", "deployment_actors") or value == getattr(bare, f.name):
            continue
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = {k: v for k, v in dataclasses.asdict(value).items() if v is not None}
        out[f.name] = copy.deepcopy(value)  # one object per place: YAML writes no anchors
    return out


def deploy(config: ServeConfig, http_options: dict[str, Any] | None = None) -> list[str]:
    """Make the running apps what ``config`` says, as Ray's ``serve deploy`` does: run each of its
    applications (replacing the one of that name), then delete the apps it no longer lists. Returns
    the names of its applications. ``http_options``: those to start Serve with if it is not running (on
    uvicorn, unless they name a server, when an app has WebSocket routes)."""
    from muster.core.init_options import warn_unused_runtime_env
    from muster.serve import api

    apps = [(app, import_app(app.import_path, app.args)) for app in config.applications]
    api._start_for([(target, app.route_prefix) for app, target in apps], http_options)
    for app, target in apps:
        warn_unused_runtime_env(app.runtime_env, f"application {app.name!r}", stacklevel=2)
        api._run(target, name=app.name, route_prefix=app.route_prefix,
                 overrides=app.overrides(), env_vars=dict(app.runtime_env.get("env_vars") or {}), config=app.raw,
                 autoscaling_policy=app.autoscaling_policy, logging_config=app.logging_config)
    wanted = {a.name for a in config.applications}
    for name in list(api.status().applications):
        if name not in wanted:
            api.delete(name)
    return [a.name for a in config.applications]
