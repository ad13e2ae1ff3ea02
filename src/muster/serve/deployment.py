"""``@serve.deployment``, ``.bind()``, ``.options()`` and ``@serve.ingress``."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable

from muster.exceptions import InvalidTypeError
from muster.serve.config import (
    NO_EFFECT,
    BackpressureConfig,
    DeploymentConfig,
    drop_no_effect,
    removed_options_hint,
)


class Application:
    """A deployment bound to its constructor arguments: what ``serve.run`` deploys.

    Other applications among the arguments become deployments of the same
    app, and reach the constructor as :class:`DeploymentHandle` objects.
    """

    def __init__(self, deployment: "Deployment", args: tuple, kwargs: dict):
        self.deployment, self.args, self.kwargs = deployment, args, kwargs

    def __repr__(self) -> str:
        return f"Application({self.deployment.name})"


class Deployment:
    """A class or function that Serve runs as replicas (make one with ``@serve.deployment``)."""

    def __init__(self, target: Any, config: DeploymentConfig):
        self.func_or_class, self.config = target, config

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def num_replicas(self) -> int:
        """The fixed replica count it was given; 1 (Ray's default) when unset, ``"auto"`` or autoscaled, as Ray's."""
        n = self.config.num_replicas
        return n if isinstance(n, int) else 1

    @property
    def user_config(self) -> Any:
        return self.config.user_config

    @property
    def max_ongoing_requests(self) -> int:
        return self.config.max_ongoing_requests

    @property
    def ray_actor_options(self) -> dict[str, Any]:
        """The replica's actor options with Serve's default filled in, as Ray's: ``num_cpus`` 1 when unset."""
        opts = dict(self.config.ray_actor_options)
        if opts.get("num_cpus") is None:
            opts["num_cpus"] = 1
        return opts

    @property
    def max_queued_requests(self) -> int:
        return self.config.max_queued_requests

    @property
    def backpressure_config(self) -> BackpressureConfig:
        """What a request refused for a full queue gets (Ray's; unset: 503 with ``Retry-After: 1``)."""
        return self.config.backpressure_config or BackpressureConfig(retry_after_s=1)

    @property
    def init_args(self) -> tuple:
        return ()  # as Ray's: a Deployment holds no constructor arguments, .bind(...) gives them to an Application

    @property
    def init_kwargs(self) -> dict[str, Any]:
        return {}

    @property
    def logging_config(self) -> dict[str, Any] | None:
        """Its ``LoggingConfig`` as a dict (Ray's), or None when it sets none."""
        cfg = self.config.logging_config
        return None if cfg is None else dataclasses.asdict(cfg)

    def set_logging_config(self, logging_config: dict[str, Any]) -> None:
        """Set its ``LoggingConfig`` (a dict or one) in place, as Ray's, for the next ``.bind()`` and deploy."""
        self.config = self.config.replace(logging_config=logging_config)

    def bind(self, *args: Any, **kwargs: Any) -> Application:
        """Bind constructor arguments (other bound deployments arrive as handles)."""
        return Application(self, args, kwargs)

    def options(self, **options: Any) -> "Deployment":
        """A copy with some options changed (the same keywords as ``@serve.deployment``)."""
        options.pop("_internal", None)
        return Deployment(self.func_or_class, self.config.replace(**drop_no_effect(options, self.name)))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise InvalidTypeError(
            f"Deployment {self.name!r} cannot be called or constructed directly; bind it with "
            f"{self.name}.bind(...) and pass that to serve.run(...), or call it through a DeploymentHandle."
        )

    def __repr__(self) -> str:
        return f"Deployment(name={self.name})"  # Ray's, word for word


def deployment(
    _func_or_class: Callable | type | None = None,
    /,
    name: str | None = None,
    num_replicas: int | str | None = None,
    ray_actor_options: dict[str, Any] | None = None,
    max_ongoing_requests: int = 5,
    max_queued_requests: int = -1,
    autoscaling_config: Any = None,
    user_config: Any = None,
    health_check_period_s: float = 10.0,
    health_check_timeout_s: float = 30.0,
    graceful_shutdown_timeout_s: float = 20.0,
    graceful_shutdown_wait_loop_s: float = 2.0,
    backpressure_config: Any = None,
    deployment_actors: list[Any] | None = None,
    logging_config: Any = None,
    gang_scheduling_config: Any = None,
    placement_group_bundles: list[dict[str, float]] | None = None,
    placement_group_strategy: str | None = None,
    placement_group_bundle_label_selector: list[dict[str, str]] | None = None,
    **ignored: Any,
) -> Any:
    """Make a class or function a Serve deployment (Ray Serve's ``@serve.deployment``).

    Args:
        name: the deployment's name (default: the class or function name).
        num_replicas: how many replicas, or ``"auto"`` to autoscale.
        ray_actor_options: per replica ``num_cpus`` (default 1), ``num_gpus``,
            ``resources``, ``runtime_env={"env_vars": {...}}``.
        max_ongoing_requests: requests one replica runs at once.
        max_queued_requests: requests a caller queues when every replica is
            full; past it, HTTP answers 503 (``-1``: no limit).
        backpressure_config: that answer instead: a ``BackpressureConfig``
            (or dict) with ``status_code`` 503 or 429 and ``retry_after_s``.
        autoscaling_config: ``min_replicas``, ``initial_replicas``,
            ``max_replicas``, ``target_ongoing_requests``,
            ``upscale_delay_s``, ``downscale_delay_s``.
        user_config: passed to the class's ``reconfigure(config)`` at start
            and on redeploy.
        deployment_actors: ``DeploymentActorConfig``s of actors the replicas share
            (``serve.get_deployment_actor(name)`` in a replica), started before them.
        logging_config: a ``LoggingConfig`` (or dict): ``log_level`` of the replicas' ``ray.serve`` logger.
        gang_scheduling_config: a ``GangSchedulingConfig`` (or dict): replicas start, stop and restart in
            gangs of ``gang_size``, each placed whole (``serve.get_replica_context().gang_context``).
        placement_group_bundles: each replica's own placement group, e.g. ``[{"CPU": 1}, {"CPU": 2}]``: the
            replica runs in bundle 0 (its ``ray_actor_options`` must fit there) and the tasks and actors it
            starts go into the group; the group goes when the replica stops.
        placement_group_strategy: how that group is placed: ``PACK`` (default), ``SPREAD``, ``STRICT_PACK``
            or ``STRICT_SPREAD``.
        placement_group_bundle_label_selector: a label selector per bundle (one: for all), as
            ``placement_group(bundle_label_selector=)`` takes.
        health_check_period_s / health_check_timeout_s: how often
            ``check_health()`` runs and how long it may take; a replica that
            fails it is replaced.
        graceful_shutdown_timeout_s: how long a stopping replica may finish
            its requests.

    Returns:
        A :class:`Deployment` (or a decorator, when called with options only).

    Raises:
        ValueError: a bad option value (the message names it).
        TypeError: an unknown option.
    """
    unknown = sorted(set(ignored) - set(NO_EFFECT))
    if unknown:
        raise InvalidTypeError(f"@serve.deployment got unknown option(s) {unknown}." + removed_options_hint(unknown))

    def wrap(target: Any) -> Deployment:
        if not (inspect.isclass(target) or callable(target)):
            raise InvalidTypeError(f"@serve.deployment goes on a class or a function, not {target!r}.")
        drop_no_effect(ignored, name or target.__name__)
        config = DeploymentConfig(
            name=name or target.__name__, num_replicas=num_replicas, ray_actor_options=dict(ray_actor_options or {}),
            max_ongoing_requests=max_ongoing_requests, max_queued_requests=max_queued_requests,
            autoscaling_config=autoscaling_config, user_config=user_config,
            health_check_period_s=health_check_period_s, health_check_timeout_s=health_check_timeout_s,
            graceful_shutdown_timeout_s=graceful_shutdown_timeout_s,
            graceful_shutdown_wait_loop_s=graceful_shutdown_wait_loop_s, backpressure_config=backpressure_config,
            deployment_actors=tuple(deployment_actors or ()), logging_config=logging_config,
            gang_scheduling_config=gang_scheduling_config, placement_group_bundles=placement_group_bundles,
            placement_group_strategy=placement_group_strategy,
            placement_group_bundle_label_selector=placement_group_bundle_label_selector,
        )
        return Deployment(target, config)

    if _func_or_class is not None:
        return wrap(_func_or_class)
    return wrap


def _keep_bound_args(self: Any, *args: Any, **kwargs: Any) -> None:
    """``serve.ingress(app)()``'s class takes what ``.bind()`` gives it (handles the app's routes look
    up themselves), as Ray's does."""
    self.args, self.kwargs = args, kwargs


def ingress(app: Any) -> Callable[..., type]:
    """Serve a FastAPI (or any ASGI) app from a deployment class: its routes may be the class's methods.

    Put it under ``@serve.deployment``::

        @serve.deployment
        @serve.ingress(app)
        class Api:
            @app.get("/hello")
            def hello(self) -> str: ...

    ``app`` may also be a function of no arguments that builds the app in each replica (Ray's
    factory pattern, for apps that do not pickle), and ``serve.ingress(app)()`` with no class makes
    a deployment that only serves it: ``serve.deployment(serve.ingress(make_app)())``.
    """

    def wrap(cls: type | None = None) -> type:
        if cls is None:
            cls = type("ASGIIngressDeployment", (), {"__doc__": "Serves the ASGI app given to serve.ingress.",
                                           "__init__": _keep_bound_args})
        if not inspect.isclass(cls):
            raise InvalidTypeError(f"@serve.ingress goes on a class, not {cls!r}.")
        setattr(cls, "__serve_asgi_app__", app)  # noqa: B010 - a marker the replica looks for
        return cls

    return wrap
