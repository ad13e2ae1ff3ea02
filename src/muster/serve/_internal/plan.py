"""From a bound application graph to the deployments that make it up."""

from __future__ import annotations

import copyreg
import dataclasses
import importlib
import sys
from dataclasses import dataclass
from typing import Any

from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.serve.config import DeploymentConfig, drop_no_effect
from muster.serve.deployment import Application
from muster.serve.handle import DeploymentHandle


@dataclass
class DeploymentPlan:
    """One deployment of an app, with its constructor arguments (nested apps already handles)."""

    name: str
    target: Any
    args: tuple
    kwargs: dict
    config: DeploymentConfig
    #: its module was imported again on the driver (``serve run --reload``): replicas import it again too
    fresh_import: bool = False


@dataclass(frozen=True)
class TargetRef:
    """A deployment's class or function by import path (``module.attr`` holds the Deployment);
    ``reload``: import the module's file again in the replica (its process may hold an older one)."""

    module: str
    attr: str
    reload: bool = dataclasses.field(default=False, compare=False)

    def load(self) -> Any:
        module = importlib.import_module(self.module)
        if self.reload:
            module = importlib.reload(module)
        return getattr(module, self.attr).func_or_class


def portable(target: Any, reload: bool = False) -> Any:
    """What to ship to replicas for ``target``: an import path when it has one (``reload``: imported again
    there), else the object itself.

    ``@serve.deployment`` rebinds the module's name to a Deployment, so pickle
    cannot find the class by reference; the replica imports it instead.
    """
    from muster.serve.deployment import Deployment

    module, name = getattr(target, "__module__", None), getattr(target, "__name__", None)
    mod = sys.modules.get(module or "")
    if mod is not None and module is not None and module != "__main__" and name:
        d = getattr(mod, name, None)
        if isinstance(d, Deployment) and d.func_or_class is target:
            return TargetRef(module, name, reload)
    _register_reducers()
    return target


def _register_reducers() -> None:
    """Let classes holding a Starlette/FastAPI app pickle by value (their ``State`` recurses when unpickled)."""
    from starlette.datastructures import State

    from muster.serve._internal import ingress_fastapi

    copyreg.pickle(State, lambda s: (State, (dict(s._state),)))
    ingress_fastapi.register_pickling()  # and those whose app includes routers


def check_picklable(p: "DeploymentPlan", app_name: str) -> None:
    """Fail in the driver, naming the deployment, when what its replicas need cannot cross to them."""
    import cloudpickle

    try:
        cloudpickle.loads(cloudpickle.dumps((portable(p.target), p.args, p.kwargs, p.config)))
    except Exception as exc:
        raise InvalidTypeError(
            f"deployment {p.name!r} of app {app_name!r}: its class/function or bind() arguments cannot be sent to "
            f"its replicas ({type(exc).__name__}: {exc}); define the class at module level and pass plain data "
            "(or other bound deployments) to bind()."
        ) from exc


def build(app: Application, app_name: str, overrides: dict[str, dict[str, Any]] | None = None,
          env_vars: dict[str, str] | None = None, logging_config: Any = None) -> tuple[str, list[DeploymentPlan]]:
    """``(ingress deployment name, every deployment)`` of ``app``; dependencies come first.

    ``overrides`` maps deployment names to options (a config file's
    ``deployments`` entries) applied on top of the code's. ``env_vars`` (a config
    file's app-level ``runtime_env``) go to every deployment's replicas, under
    the deployment's own. ``logging_config`` (``serve.run``'s) is that of every deployment that sets none.

    Raises:
        TypeError: ``app`` is not a bound deployment.
        ValueError: an override names no deployment of the app.
    """
    overrides = dict(overrides or {})
    if not isinstance(app, Application):
        hint = " (call .bind() on the deployment)" if hasattr(app, "bind") else ""
        raise InvalidTypeError(f"serve.run needs a bound application such as MyDeployment.bind(), got {app!r}{hint}.")
    plans: list[DeploymentPlan] = []
    names: dict[int, str] = {}
    taken: set[str] = set()

    def visit(node: Application) -> str:
        if id(node) in names:
            return names[id(node)]
        name = node.deployment.name
        i = 1
        while name in taken:
            name, i = f"{node.deployment.name}_{i}", i + 1
        taken.add(name)
        names[id(node)] = name

        def sub(v: Any) -> Any:
            if isinstance(v, Application):
                return DeploymentHandle(visit(v), app_name)
            if isinstance(v, list):
                return [sub(x) for x in v]
            if isinstance(v, tuple):
                return tuple(sub(x) for x in v)
            if isinstance(v, dict):
                return {k: sub(x) for k, x in v.items()}
            return v

        args = tuple(sub(a) for a in node.args)
        kwargs = {k: sub(v) for k, v in node.kwargs.items()}
        config = node.deployment.config if name == node.deployment.name else node.deployment.config.replace(name=name)
        if name in overrides:
            config = config.replace(**drop_no_effect(overrides.pop(name), name))
        if env_vars:
            options = dict(config.ray_actor_options)
            own = dict(options.get("runtime_env") or {})
            own["env_vars"] = {**env_vars, **(own.get("env_vars") or {})}
            config = config.replace(ray_actor_options={**options, "runtime_env": own})
        if logging_config is not None and config.logging_config is None:
            config = config.replace(logging_config=logging_config)
        plans.append(DeploymentPlan(name, node.deployment.func_or_class, args, kwargs, config))
        return name

    ingress = visit(app)
    if overrides:
        raise InvalidArgumentError(
            f"app {app_name!r}: the config overrides deployment(s) {sorted(overrides)}, which the app does not have; "
            f"its deployments: {[p.name for p in plans]}."
        )
    return ingress, plans


def _same_code(a: DeploymentPlan, b: DeploymentPlan) -> bool:
    """Same class/function (the object, or the same import path) and the same bind() arguments."""
    import cloudpickle

    if a.target is not b.target and not (isinstance(pa := portable(a.target), TargetRef) and pa == portable(b.target)):
        return False
    try:
        return cloudpickle.dumps((a.args, a.kwargs)) == cloudpickle.dumps((b.args, b.kwargs))
    except Exception:  # noqa: BLE001 - arguments that cannot be compared: treat as changed (replicas restart)
        return False


#: What a redeploy may change and keep the live replicas (Ray's "lightweight" config updates).
_IN_PLACE: dict[str, Any] = {"user_config": None, "num_replicas": None, "autoscaling_config": None}


def in_place_changes(old: dict[str, DeploymentPlan], new: list[DeploymentPlan]) -> dict[str, set[str]] | None:
    """What a redeploy changes when it changes no more than ``user_config`` and the replica count
    (``num_replicas``, ``autoscaling_config``): ``{deployment: the names of those that changed}``
    (``{}``: nothing did), applied to the live replicas, as Ray does (``reconfigure`` with the new
    ``user_config``; replicas added or drained to the new count); ``None`` when anything else differs
    (its replicas are replaced)."""
    if set(old) != {p.name for p in new}:
        return None
    changes: dict[str, set[str]] = {}
    for p in new:
        before = old[p.name]
        if not _same_code(before, p) or \
                dataclasses.replace(before.config, **_IN_PLACE) != dataclasses.replace(p.config, **_IN_PLACE):
            return None
        changed = {k for k in _IN_PLACE if getattr(before.config, k) != getattr(p.config, k)}
        if changed:
            changes[p.name] = changed
    return changes
