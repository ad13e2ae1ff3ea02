"""Ray's config-file models (``ray.serve.schema``'s ``ServeDeploySchema`` and what it holds), as validating classes.

Ray's are pydantic models; muster's config is dataclasses, so these are plain classes with the part of the
pydantic surface that user code calls: keyword construction (an unknown field is an error, as Ray's
``extra="forbid"``), ``parse_obj`` / ``model_validate`` from a mapping, ``dict()`` / ``model_dump()`` back to
plain data (``exclude_unset=True``: only the fields given, what a config file holds), equality by fields.
Each validates through muster's own config classes (``DeploymentConfig``, ``AppSchema``), so a model that
constructs is one ``muster serve deploy`` takes.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar

from muster.exceptions import InvalidArgumentError, InvalidTypeError

_REQUIRED = object()  # the default of a field that must be given


class _Model:
    """What the models share (see the module's docstring)."""

    _fields: ClassVar[dict[str, Any]] = {}  # name -> default (_REQUIRED: must be given)
    _extra_allowed: ClassVar[bool] = False

    def __init__(self, **fields: Any):
        cls = type(self)
        unknown = sorted(set(fields) - set(cls._fields))
        if unknown and not cls._extra_allowed:
            raise InvalidArgumentError(f"{cls.__name__}: unknown field(s) {unknown}; known: {sorted(cls._fields)}.")
        missing = [k for k, v in cls._fields.items() if v is _REQUIRED and k not in fields]
        if missing:
            raise InvalidArgumentError(f"{cls.__name__}: missing field(s) {missing}; pass them by keyword.")
        self._set = frozenset(k for k in fields if k in cls._fields)
        for name, default in cls._fields.items():
            setattr(self, name, fields[name] if name in fields else copy.deepcopy(default))
        self._check()

    def _check(self) -> None:
        """Validate (and coerce nested mappings to models); raise naming the field and the fix."""

    @classmethod
    def parse_obj(cls, obj: Any) -> Any:
        """The model of a mapping (a parsed config file's), validated; a model is returned as it is."""
        if isinstance(obj, cls):
            return obj
        if not isinstance(obj, Mapping):
            raise InvalidTypeError(f"{cls.__name__}.parse_obj({obj!r}): pass a mapping of its fields.")
        return cls(**obj)

    model_validate = parse_obj

    def dict(self, *, exclude_unset: bool = False, exclude_defaults: bool = False,
             exclude_none: bool = False) -> dict[str, Any]:
        """The fields as plain data (nested models too): what a config file holds."""
        out: dict[str, Any] = {}
        for name, default in type(self)._fields.items():
            value = getattr(self, name)
            if ((exclude_unset and name not in self._set) or (exclude_none and value is None)
                    or (exclude_defaults and value == default)):
                continue
            out[name] = _plain(value, exclude_unset, exclude_defaults, exclude_none)
        return out

    model_dump = dict

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Model) and type(other) is type(self) and self.dict() == other.dict()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.dict(exclude_unset=True).items())})"


def _plain(value: Any, *flags: bool) -> Any:
    if isinstance(value, _Model):
        return value.dict(exclude_unset=flags[0], exclude_defaults=flags[1], exclude_none=flags[2])
    if isinstance(value, (list, tuple)):
        return [_plain(v, *flags) for v in value]
    return copy.deepcopy(value)


def _number_at_least_0(model: str, name: str, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
        raise InvalidArgumentError(f"{model}: {name}={value!r}: use a number >= 0 (or leave it unset).")


def _mapping(model: str, name: str, value: Any, optional: bool = False) -> None:
    if not (isinstance(value, Mapping) or (optional and value is None)):
        raise InvalidTypeError(f"{model}: {name}={value!r}: pass a mapping (a dict).")


class RayActorOptionsSchema(_Model):
    """Ray's ``ray_actor_options`` of a deployment in a config file. muster's replicas take ``num_cpus``,
    ``num_gpus``, ``memory``, ``resources`` and ``runtime_env`` (its ``env_vars``); a deployment given
    ``accelerator_type``, ``label_selector`` or ``fallback_strategy`` is refused where it is deployed, naming them."""

    runtime_env: dict[str, Any]
    num_cpus: float | None
    num_gpus: float | None
    memory: float | None
    resources: dict[str, float]
    accelerator_type: str | None
    label_selector: dict[str, str] | None
    fallback_strategy: list[dict[str, Any]] | None

    _fields = {"runtime_env": {}, "num_cpus": None, "num_gpus": None, "memory": None, "resources": {},
               "accelerator_type": None, "label_selector": None, "fallback_strategy": None}

    def _check(self) -> None:
        for name in ("num_cpus", "num_gpus", "memory"):
            _number_at_least_0("RayActorOptionsSchema", name, getattr(self, name))
        _mapping("RayActorOptionsSchema", "runtime_env", self.runtime_env)
        _mapping("RayActorOptionsSchema", "resources", self.resources)
        _mapping("RayActorOptionsSchema", "label_selector", self.label_selector, optional=True)


class DeploymentSchema(_Model):
    """One entry of an application's ``deployments`` (Ray's): ``name`` and the options it overrides. Validated
    as ``@serve.deployment`` validates them (Ray's options with no effect here warn, as there)."""

    name: str
    ray_actor_options: RayActorOptionsSchema | None  # a mapping is turned into one

    _fields = {"name": _REQUIRED, "num_replicas": None, "max_ongoing_requests": 5, "max_queued_requests": -1,
               "backpressure_config": None, "user_config": None, "autoscaling_config": None,
               "graceful_shutdown_wait_loop_s": 2.0, "graceful_shutdown_timeout_s": 20.0,
               "health_check_period_s": 10.0, "health_check_timeout_s": 30.0, "ray_actor_options": None,
               "placement_group_bundles": None, "placement_group_strategy": None,
               "placement_group_bundle_label_selector": None, "max_replicas_per_node": None, "logging_config": None,
               "request_router_config": None, "gang_scheduling_config": None, "deployment_actors": None,
               "rolling_update_percentage": None, "max_surge_percent": None}

    def _check(self) -> None:
        from muster.serve.config import DeploymentConfig, drop_no_effect

        if self.ray_actor_options is not None:
            self.ray_actor_options = RayActorOptionsSchema.parse_obj(self.ray_actor_options)
        options = {k: getattr(self, k) for k in self._set if k != "name"}
        if self.ray_actor_options is not None:
            options["ray_actor_options"] = self.ray_actor_options.dict(exclude_unset=True)
        DeploymentConfig(name=self.name, **drop_no_effect(options, str(self.name)))


class ServeApplicationSchema(_Model):
    """One application of a config file (Ray's): ``import_path`` and what it runs with; ``deployments`` are
    :class:`DeploymentSchema` (mappings are turned into them). Ray's deprecated ``host``/``port`` and its
    ``external_scaler_enabled`` are kept and do nothing here."""

    name: str
    route_prefix: str | None
    import_path: str
    runtime_env: dict[str, Any]
    deployments: list[DeploymentSchema]  # mappings are turned into them
    autoscaling_policy: Any
    args: dict[str, Any]
    logging_config: Any

    _fields = {"name": "default", "route_prefix": "/", "import_path": _REQUIRED, "runtime_env": {},
               "host": "0.0.0.0", "port": 8000, "deployments": [], "autoscaling_policy": None, "args": {},
               "logging_config": None, "external_scaler_enabled": False}

    def _check(self) -> None:
        from muster.serve.schema import AppSchema

        if not isinstance(self.deployments, (list, tuple)):
            raise InvalidTypeError(f"ServeApplicationSchema {self.name!r}: deployments={self.deployments!r}: pass "
                                   "a list of DeploymentSchema (or mappings).")
        self.deployments = [DeploymentSchema.parse_obj(d) for d in self.deployments]
        names = self.deployment_names()
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise InvalidArgumentError(f"application {self.name!r}: deployment names must be unique; repeated: {dup}.")
        if self.route_prefix is not None and (not isinstance(self.route_prefix, str)
                                              or not self.route_prefix.startswith("/")):
            raise InvalidArgumentError(f"application {self.name!r}: route_prefix={self.route_prefix!r}: use a path "
                                       "starting with '/' (or None: reached by handles only).")
        _mapping(f"application {self.name!r}", "runtime_env", self.runtime_env)
        AppSchema(import_path=self.import_path, name=self.name, route_prefix=self.route_prefix, args=self.args,
                  runtime_env=dict(self.runtime_env), autoscaling_policy=self.autoscaling_policy,
                  logging_config=self.logging_config)

    def deployment_names(self) -> list[str]:
        """The names of its deployments, in order (Ray's)."""
        return [d.name for d in self.deployments]


class ServeDeploySchema(_Model):
    """A whole config file, what ``muster serve deploy`` takes (Ray's): ``applications`` (each a
    :class:`ServeApplicationSchema`; names and route prefixes unique, as Ray checks) and ``http_options``;
    Ray's ``proxy_location``, ``grpc_options``, ``logging_config``, ``target_capacity`` and the rest are kept
    (``muster serve deploy`` warns that they do nothing). Other fields are allowed, as Ray's model allows them
    for forward compatibility, and left out of :meth:`dict`."""

    http_options: dict[str, Any]
    applications: list[ServeApplicationSchema]  # mappings are turned into them

    _fields = {"proxy_location": "EveryNode", "http_options": {}, "grpc_options": {}, "controller_options": None,
               "logging_config": None, "tracing_config": None, "applications": [], "target_capacity": None}
    _extra_allowed = True

    def _check(self) -> None:
        if not isinstance(self.applications, (list, tuple)):
            raise InvalidTypeError(f"ServeDeploySchema: applications={self.applications!r}: pass a list of "
                                   "ServeApplicationSchema (or mappings).")
        self.applications = [ServeApplicationSchema.parse_obj(a) for a in self.applications]
        for what, values in (("names", [a.name for a in self.applications]),
                             ("route prefixes", [a.route_prefix for a in self.applications
                                                 if a.route_prefix is not None])):
            dup = sorted({v for v in values if values.count(v) > 1})
            if dup:
                raise InvalidArgumentError(f"ServeDeploySchema: application {what} must be unique; repeated: {dup}.")
        if any(not a.name for a in self.applications):
            raise InvalidArgumentError("ServeDeploySchema: every application needs a non-empty name.")
        _mapping("ServeDeploySchema", "http_options", self.http_options)
