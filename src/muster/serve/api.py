"""``serve.start / run / status / delete / shutdown`` and handle lookup."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.serve.config import HTTPOptions, LoggingConfig, ProxyLocation
from muster.serve.context import (  # noqa: F401 - Ray's ray.serve.api has them too
    get_deployment_actor,
    get_deployment_actor_context,
    get_replica_context,
)
from muster.serve.deployment import Application, Deployment, deployment, ingress  # noqa: F401 - as Ray's
from muster.serve.handle import DeploymentHandle
from muster.serve.multiplex import get_multiplexed_model_id, multiplexed  # noqa: F401 - as Ray's

T = TypeVar("T")

_controller: Any = None
_lock = threading.RLock()


def _get() -> Any:
    from muster.serve.exceptions import RayServeException

    if _controller is None:
        raise RayServeException("Serve is not running in this process: call serve.run(app) (or serve.start()) first.")
    return _controller


def start(proxy_location: ProxyLocation | str | None = None, http_options: HTTPOptions | dict[str, Any] | None = None,
          grpc_options: Any = None, logging_config: Any = None, tracing_config: Any = None,
          controller_options: Any = None, **_ignored: Any) -> None:
    """Start Serve's HTTP ingress (``serve.run`` does it for you on first use). Ray's arguments, in Ray's order.

    Args:
        proxy_location: Ray's ``ProxyLocation`` (or its name): muster's one ingress runs on the driver's node
            (``HeadOnly``; ``EveryNode`` is the same on one node); ``Disabled`` runs no HTTP ingress (the port
            stays free, ``serve.status().proxies`` is empty) and apps are reached through handles.
        http_options: ``{"host": "127.0.0.1", "port": 8000}`` (the defaults);
            also ``request_timeout_s``, ``max_body_bytes``, ``server``
            ("granian" or "uvicorn"; left out: granian, moved to uvicorn
            once an app with WebSocket routes is deployed).  ``port=0`` picks a free port.
        grpc_options, logging_config, tracing_config, controller_options: Ray's; given, each warns that it has no
            effect here (HTTP only; the replicas' logs are set by ``serve.run(logging_config=...)``).

    Raises:
        ValueError: a bad option (a ``proxy_location`` that names no ``ProxyLocation``).
        TypeError: a ``proxy_location`` that is not one (an ``http_options`` dict passed first).
        RayServeException: the ingress could not listen (port in use).
    """
    location = ProxyLocation._normalize(proxy_location)
    opts = HTTPOptions.coerce(http_options)
    _warn_ignored_start_options({"grpc_options": grpc_options, "logging_config": logging_config,
                                 "tracing_config": tracing_config, "controller_options": controller_options})
    proxy = location is not ProxyLocation.Disabled
    if _controller is not None and location is not None and _controller.proxy != proxy:
        import warnings

        warnings.warn(f"serve.start: Serve already runs {'with' if _controller.proxy else 'without'} an HTTP "
                      f"ingress; proxy_location={location.value!r} applies to a new start (call serve.shutdown() "
                      "first).", stacklevel=2)
    _start(opts, proxy=proxy)


def _start(opts: HTTPOptions, websockets: bool = False, proxy: bool = True) -> None:
    """Start Serve unless it runs; ``websockets``: the app about to be deployed has WebSocket routes (an ingress
    whose server the user left out then starts on uvicorn, instead of granian and a move); ``proxy``: False
    runs no HTTP ingress (Ray's ``ProxyLocation.Disabled``)."""
    global _controller
    with _lock:
        if _controller is not None:
            return
        from muster.serve._internal import admin
        from muster.serve._internal.controller import ServeController

        _controller = ServeController(opts, websockets, proxy)
        admin.start(_controller)
        from muster.tasks import owner

        owner.register(StatusRequest, _answer_status)  # replicas, tasks and actors ask this process


def _start_for(apps: list[tuple[Application, str | None]], http_options: dict[str, Any] | None) -> None:
    """Start Serve unless it runs, on the server ``apps`` (each with its route prefix) need."""
    if _controller is None:
        from muster.serve._internal import server_choice

        _start(HTTPOptions.coerce(http_options), any(
            prefix is not None and server_choice.serves_websockets(app.deployment.func_or_class)
            for app, prefix in apps))


def _warn_ignored_start_options(options: dict[str, Any]) -> None:
    """Say which of Ray's other ``serve.start`` options would change something here, and what happens instead."""
    import warnings

    said = []
    if options.get("logging_config") is not None:
        said.append("logging_config sets the logs of Ray's controller and proxies, and muster's write none (give it "
                    "to serve.run(logging_config=...) or @serve.deployment(logging_config=...) for the replicas')")
    if options.get("grpc_options") is not None:
        said.append("grpc_options: muster serves HTTP only")
    if options.get("tracing_config") is not None:
        said.append("tracing_config: muster has no request tracing")
    if options.get("controller_options") is not None:
        said.append("controller_options sets Ray's controller actor, and muster's controller runs in the driver "
                    "(set its environment before starting the script)")
    for what in said:
        warnings.warn(f"serve.start: {what}; it has no effect in muster.", stacklevel=3)


def run(
    target: Application,
    blocking: bool = False,
    name: str = "default",
    route_prefix: str | None = "/",
    logging_config: Any = None,
    _local_testing_mode: bool = False,
    external_scaler_enabled: bool = False,  # Ray's; muster's autoscaler is its own
    controller_options: Any = None,  # Ray's Serve controller actor's options; muster has no controller actor
    **unknown: Any,
) -> DeploymentHandle:
    """Deploy an application and return a handle to its ingress deployment.

    Returns once every replica is up.  Running it again with the same name
    replaces that app's replicas without dropping requests, whatever changed,
    as Ray's ``serve.run`` does (a config file's deploy, ``muster serve deploy``,
    keeps them when only ``user_config`` or the replica count changed: they run
    ``reconfigure``). If the new replicas fail to start, the previous version
    keeps serving and ``serve.status()`` shows the app ``DEPLOY_FAILED``.

    Args:
        target: a bound deployment (``MyDeployment.bind(...)``).
        name: the app's name (several apps run side by side).
        route_prefix: the HTTP path it serves (``None``: handles only).
        blocking: keep serving until Ctrl-C, then raise the ``KeyboardInterrupt`` again, as Ray does, so the
            code after ``serve.run`` does not run. As in Ray, Serve is left running: it ends with the driver
            (its workers stop when the process exits), and code that catches the interrupt may still call the
            apps, or ``serve.shutdown()`` to drain them. (``muster serve run`` drains and stops on Ctrl-C.)
        logging_config: a ``LoggingConfig`` (or dict) for the deployments that set none.
        _local_testing_mode: run the app's deployments in this process, one instance each, with no Serve,
            HTTP or resources (Ray's unit-test mode; see ``muster.serve.local_testing``).

    Raises:
        ResourcesUnavailableError: its replicas can never fit (names what was asked and what exists).
        DeployFailedError: a replica's constructor, or its ``reconfigure(user_config)``, raised (a
            ``RayServeException`` and, as Ray's, a ``RuntimeError``).
        TypeError / ValueError: bad arguments (a keyword Ray 2.60's ``serve.run`` does not take is a
            ``TypeError``, as in Ray: ``_blocking``, ``host``, ``port`` of older Rays, or a misspelt one).
        KeyboardInterrupt: ``blocking=True`` and Ctrl-C stopped it (Serve still runs).
    """
    _refuse_unknown("serve.run", unknown, "target, blocking, name, route_prefix, logging_config, "
                    "_local_testing_mode, external_scaler_enabled, controller_options")
    if _local_testing_mode:
        from muster.serve.local_testing import run_local

        return run_local(target, name)
    handle = _run(target, name=name, route_prefix=route_prefix, logging_config=logging_config)
    if blocking:
        _serve_until_interrupted()
    return handle


@dataclass
class RunTarget:
    """One application for :func:`run_many` (Ray's): what ``serve.run`` takes, as fields."""

    target: Application
    name: str = "default"
    route_prefix: str | None = "/"
    logging_config: Any = None  # a LoggingConfig (or dict) for its deployments that set none, as serve.run's
    external_scaler_enabled: bool = False  # Ray's; muster's autoscaler is its own


def run_many(targets: list[RunTarget], blocking: bool = False, wait_for_ingress_deployment_creation: bool = True,
             wait_for_applications_running: bool = True, _local_testing_mode: bool = False,
             controller_options: Any = None, **unknown: Any) -> list[DeploymentHandle]:
    """Deploy several applications; the handles to their ingress deployments, in order (Ray's ``run_many``).

    Each is deployed as ``serve.run`` deploys one, and every replica is up when it returns.

    Raises:
        ValueError: no targets, a target that is not a ``RunTarget``, or two with the same name.
        TypeError: a keyword Ray 2.60's ``run_many`` does not take, as in Ray.
    """
    _refuse_unknown("serve.run_many", unknown, "targets, blocking, wait_for_ingress_deployment_creation, "
                    "wait_for_applications_running, _local_testing_mode, controller_options")
    targets = list(targets)
    if not targets:
        raise InvalidArgumentError("serve.run_many([]): give at least one "
                                   "serve.RunTarget(target=App.bind(), name=...).")
    bad = [t for t in targets if not isinstance(t, RunTarget)]
    if bad:
        raise InvalidArgumentError(f"serve.run_many: {bad[0]!r} is not a RunTarget; wrap each app as "
                                   "serve.RunTarget(target=App.bind(), name='app', route_prefix='/app').")
    names = [t.name for t in targets]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidArgumentError(f"serve.run_many: the app name(s) {twice} are given more than once; each "
                                   "application needs a name of its own (RunTarget(name=...)).")
    if _local_testing_mode:
        from muster.serve.local_testing import run_local

        return [run_local(t.target, t.name) for t in targets]
    handles = [_run(t.target, name=t.name, route_prefix=t.route_prefix, logging_config=t.logging_config)
               for t in targets]
    if blocking:
        _serve_until_interrupted()
    return handles


def _refuse_unknown(call: str, unknown: dict[str, Any], takes: str) -> None:
    """A keyword ``call`` does not take is a ``TypeError``, as Ray's Python raises it (it was dropped unread)."""
    if not unknown:
        return
    name = sorted(unknown)[0]
    why = (" Ray 2.60's serve.run returns once the app runs; blocking=True serves until Ctrl-C."
           if name == "_blocking" else " (host and port go to serve.start(http_options=...).)"
           if name in ("host", "port") else "")
    raise InvalidTypeError(f"{call}() got an unexpected keyword argument {name!r}: it takes {takes}.{why} "
                           f"Drop {name}=, as Ray 2.60 refuses it too.")


def _serve_until_interrupted() -> None:
    """Sleep until Ctrl-C; then say so and re-raise it, leaving Serve running, as Ray's blocking ``serve.run``."""
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        logging.getLogger("muster.serve").warning(
            "serve.run(blocking=True): got KeyboardInterrupt; Serve keeps running until this process exits "
            "(call serve.shutdown() to drain and stop it first).")
        raise


def _run(target: Application, *, name: str, route_prefix: str | None,
         overrides: dict[str, dict[str, Any]] | None = None, env_vars: dict[str, str] | None = None,
         config: dict[str, Any] | None = None, logging_config: Any = None,
         autoscaling_policy: Any = None, http_options: dict[str, Any] | None = None,
         new_code: bool = False) -> DeploymentHandle:
    """``serve.run``'s work; ``http_options``: those to start Serve with if it is not running; ``new_code``:
    the app's modules were imported again (``serve run --reload``)."""
    from muster.serve._internal import plan

    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"serve.run(name={name!r}): give the app a non-empty name.")
    if route_prefix is not None and (not isinstance(route_prefix, str) or not route_prefix.startswith("/")
                                     or (len(route_prefix) > 1 and route_prefix.endswith("/"))):
        raise InvalidArgumentError(f"serve.run(route_prefix={route_prefix!r}): use a path such as '/' or '/api' "
                                   "(no trailing /).")
    ingress, plans = plan.build(target, name, overrides, env_vars, LoggingConfig.coerce(logging_config))
    _start_for([(target, route_prefix)], http_options)
    _get().deploy(name, route_prefix, ingress, plans, config=config, policy=autoscaling_policy, new_code=new_code)
    return DeploymentHandle(ingress, name)


@dataclass
class DeploymentStatusOverview:
    status: str
    replica_states: dict[str, int] = field(default_factory=dict)
    message: str = ""
    target_replicas: int = 0
    restarts: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)  # requests_per_s, p50_ms, p99_ms, served, errors, ...
    #: Ray's: what brought it to ``status`` (a ``schema.DeploymentStatusTrigger`` value, e.g. CONFIG_UPDATE_COMPLETED)
    status_trigger: str = "UNSPECIFIED"


@dataclass
class ApplicationStatusOverview:
    status: str
    message: str = ""
    route_prefix: str | None = None
    last_deployed_time_s: float = 0.0
    deployments: dict[str, DeploymentStatusOverview] = field(default_factory=dict)


@dataclass
class ServeStatus:
    """What ``serve.status()`` returns (Ray's shape: ``.applications[name].deployments[name]``)."""

    proxies: dict[str, str] = field(default_factory=dict)
    applications: dict[str, ApplicationStatusOverview] = field(default_factory=dict)
    http: dict[str, Any] = field(default_factory=dict)
    target_capacity: float | None = None  # Ray's; muster has no target capacity: always None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ServeStatus":
        apps = {
            n: ApplicationStatusOverview(
                a["status"], a["message"], a["route_prefix"], a["last_deployed_time_s"],
                {dn: DeploymentStatusOverview(dd["status"], dd["replica_states"], dd["message"],
                                              dd["target_replicas"], dd["restarts"], dd.get("metrics", {}),
                                              dd.get("status_trigger", "UNSPECIFIED"))
                 for dn, dd in a["deployments"].items()},
            )
            for n, a in d.get("applications", {}).items()
        }
        return cls(d.get("proxies", {}), apps, d.get("http", {}))


@dataclass(frozen=True)
class StatusRequest:
    """A muster worker (a replica, a task, an actor) asks the driver running Serve for ``serve.status()``."""


def _answer_status(handle: Any, request: StatusRequest) -> dict[str, Any]:
    """In the driver: what ``serve.status()`` says here, for a worker's :class:`StatusRequest`."""
    c = _controller
    return {} if c is None else c.status()


def status() -> ServeStatus:
    """Every app's and deployment's state (empty when Serve is not running).

    Works in the driver running Serve and, as in Ray, in its replicas, tasks and actors (they ask the driver).
    """
    c = _controller
    if c is not None:
        return ServeStatus.from_dict(c.status())
    from muster.core import context

    if context.in_worker():
        try:
            got = context.send_event(StatusRequest(), timeout=30.0)
        except Exception:  # noqa: BLE001 - a child forked by user code, or a driver without Serve
            got = None
        if isinstance(got, dict) and got:
            return ServeStatus.from_dict(got)
    return ServeStatus()


def delete(name: str, _blocking: bool = True) -> None:
    """Stop app ``name``: it leaves the routes, its replicas finish their requests, then stop. An app whose deploy
    failed leaves its route (answering 503 until then) and ``serve.status()``. A name no app has: nothing to do.

    Raises:
        RayServeException: Serve is not running in this process (Ray's: no Serve instance runs).
    """
    from muster.serve.exceptions import RayServeException

    c = _controller
    if c is None:
        raise RayServeException(
            f"There is no Serve instance running: serve.delete({name!r}) has no app to delete. Call it in the process "
            "that started Serve (serve.run / serve.start), before serve.shutdown()."
        )
    c.delete(name)


def shutdown() -> None:
    """Stop every app (draining requests), the HTTP ingress, and Serve's state. Safe to call twice."""
    global _controller
    with _lock:
        c, _controller = _controller, None
    if c is not None:
        from muster.serve._internal import admin

        admin.stop(c)
        c.shutdown()


async def shutdown_async() -> None:
    """``shutdown()`` for code on an event loop (Ray's): the loop keeps running while Serve drains and stops."""
    import asyncio

    await asyncio.to_thread(shutdown)


def get_app_handle(name: str) -> DeploymentHandle:
    """A handle to app ``name``'s ingress deployment (in the driver, a replica, a task or a training loop).

    An app whose deploy failed (``DEPLOY_FAILED``, no version of it running) gives a handle too, as Ray's; its calls
    raise ``DeploymentUnavailableError`` until a deploy succeeds.

    Raises:
        RayServeException: no app of that name runs.
    """
    from muster.serve.exceptions import RayServeException

    c = _controller
    apps = ({**{n: r.ingress for n, r in c.failed_routes.items()}, **{n: a.ingress for n, a in c.apps.items()}}
            if c is not None else _on_serve_loop(_apps, name))
    if name not in apps:
        raise RayServeException(f"no Serve app named {name!r} is running here; running apps: {sorted(apps) or 'none'}."
                                + _elsewhere(name))
    return DeploymentHandle(apps[name], name)


def _elsewhere(name: str) -> str:
    """A hint when app ``name`` runs in another process of this machine (``muster serve run``)."""
    import os

    from muster.serve._internal import admin

    try:
        others = [r for r in admin.instances() if r.get("pid") != os.getpid()]
    except Exception:  # noqa: BLE001 - only a hint
        return ""
    for rec in others:
        try:
            running = admin.request(rec, "status", timeout_s=5).get("applications", {})
        except Exception:  # noqa: BLE001 - it went away meanwhile
            continue
        if name in running and rec.get("port") is None:
            return (f" It runs in another process (pid {rec['pid']}) that serves no HTTP (proxy_location=Disabled), "
                    "and handles reach only the apps of their own process: take the handle inside that process.")
        if name in running:
            prefix = running[name].get("route_prefix") or "/"
            return (f" It runs in another process (pid {rec['pid']}, `muster serve run`), and handles reach only the "
                    f"apps of their own process: call it over HTTP at http://{rec['host']}:{rec['port']}{prefix}, or "
                    "take the handle inside that process.")
    return ""


def _on_serve_loop(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on the Serve loop, the one thread that touches the route table: called at once when the
    caller already runs there (an async replica method), else from this thread, waiting for it."""
    from muster.serve._internal import eventloop

    if eventloop.on_loop():
        return fn(*args)

    async def call() -> T:
        return fn(*args)

    return eventloop.run_sync(call())


def _apps(wanted: str) -> dict[str, str]:
    from muster.serve._internal import router

    known = router.registry.table.apps.get(wanted)
    if known is None or known.failed:  # in a task or a training loop: ask the driver (it may be deleted since)
        router.registry.pull()
    return {n: a.ingress for n, a in router.registry.table.apps.items()}


def _deployments(app: str, wanted: str) -> list[str]:
    """The deployments of ``app`` this process's route table knows (pulled from the driver if needed)."""
    from muster.serve._internal import router

    if (app, wanted) not in router.registry.table.deployments:
        router.registry.pull()
    return [d for a, d in router.registry.table.deployments if a == app]


def get_deployment_handle(deployment_name: str, app_name: str | None = None) -> DeploymentHandle:
    """A handle to one deployment of a running app (``app_name`` defaults to the current replica's app).

    Raises:
        RayServeException: no ``app_name`` outside a replica.
        KeyError: the app has no such deployment (or is not running).
    """
    from muster.serve import context
    from muster.serve.exceptions import RayServeException

    if app_name is None:
        if context._current is None:
            raise RayServeException(
                f"get_deployment_handle({deployment_name!r}) outside a Serve replica needs the app's name: "
                f"get_deployment_handle({deployment_name!r}, app_name=...)."
            )
        app_name = context._current.app_name
    c = _controller
    if c is not None:
        app = c.apps.get(app_name)  # or one whose deploy failed: its handle's calls raise, as Ray's
        deps = list(app.deployments) if app is not None else list(c.failed.get(app_name, {}).get("deployments", {}))
    elif context._current is None:  # a task, an actor, a training loop (a replica's app may still be starting)
        deps = _on_serve_loop(_deployments, app_name, deployment_name)
    else:
        deps = [deployment_name]
    if deployment_name not in deps:
        where = f"its deployments are {sorted(deps)}" if deps else f"app {app_name!r} is not running here"
        raise KeyError(f"Deployment {deployment_name!r} does not exist in app {app_name!r}: {where}."
                       + ("" if deps else _elsewhere(app_name)))
    return DeploymentHandle(deployment_name, app_name)
