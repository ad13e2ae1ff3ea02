"""Deployment-scoped actors (Ray 2.60's ``deployment_actors=[DeploymentActorConfig(...)]``).

The controller starts a deployment's actors before its replicas and stops them after the replicas, when the
app is deleted, replaced or Serve shuts down. Each replica gets their handles in its spec, and
``serve.get_deployment_actor(name)`` returns one of them. Unlike Ray's controller, muster does not health-check
or recreate them: give ``actor_options={"max_restarts": n}`` to have the runtime restart one that dies.
An actor learns who it is from ``serve.get_deployment_actor_context()`` (its environment carries it).
"""

from __future__ import annotations

import importlib
from typing import Any

from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.serve.config import DeploymentActorConfig
from muster.serve.exceptions import DeployFailedError

_NAMESPACE = "serve"  # where their names live (Ray's controller names them in Serve's namespace too)
ACTOR_ENV = "MUSTER_SERVE_DEPLOYMENT_ACTOR"  # app::deployment::generation::name, in the actor's environment


def actor_class(cfg: DeploymentActorConfig) -> Any:
    """The ``@muster.remote`` class of ``cfg``: itself, or what its import path ``module:Class`` names."""
    cls = cfg.actor_class
    if isinstance(cls, str):
        module, _, attr = cls.partition(":") if ":" in cls else cls.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise InvalidArgumentError(
                f"DeploymentActorConfig(name={cfg.name!r}, actor_class={cfg.actor_class!r}): cannot import it "
                f"({type(exc).__name__}: {exc}); give 'module:Class' of a @muster.remote class."
            ) from exc
    if not callable(getattr(cls, "options", None)):
        raise InvalidTypeError(
            f"DeploymentActorConfig(name={cfg.name!r}, actor_class={cls!r}): not an actor class; decorate the "
            "class with @muster.remote (Ray's @ray.remote)."
        )
    return cls


def start(app: str, deployment: str, generation: str, configs: tuple[DeploymentActorConfig, ...]) -> dict[str, Any]:
    """Start ``configs``' actors and wait until each is built; their handles by name.

    Raises:
        DeployFailedError: an actor's constructor failed (those already started are stopped).
    """
    handles: dict[str, Any] = {}
    import muster

    try:
        for cfg in configs:
            name = f"SERVE_DEPLOYMENT_ACTOR::{app}::{deployment}::{generation}::{cfg.name}"
            options = dict(cfg.actor_options)
            env = dict(options.get("runtime_env") or {})  # serve.get_deployment_actor_context() reads it there
            who = f"{app}::{deployment}::{generation}::{cfg.name}"
            env["env_vars"] = {**(env.get("env_vars") or {}), ACTOR_ENV: who}
            cls = actor_class(cfg).options(name=name, namespace=_NAMESPACE, **{**options, "runtime_env": env})
            handles[cfg.name] = cls.remote(*cfg.init_args, **cfg.init_kwargs)
        for cfg_name, h in handles.items():
            try:
                muster.get(h.__ray_ready__.remote())
            except Exception as exc:
                raise DeployFailedError(
                    f"deployment {deployment!r} of app {app!r}: its deployment actor {cfg_name!r} failed to start: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
    except BaseException:
        stop(handles)
        raise
    return handles


def stop(handles: dict[str, Any]) -> None:
    """Stop the actors :func:`start` started (those already gone are skipped)."""
    import muster

    for h in handles.values():
        try:
            muster.kill(h)
        except Exception:  # noqa: BLE001 - it is gone already
            pass
