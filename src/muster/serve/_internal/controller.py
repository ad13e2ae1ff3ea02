"""The Serve controller: lives in the driver, owns apps, replicas and the route table.

It starts replicas as actors on the runtime (all of an app's replicas, or a
clear error at once if they can never fit), pushes a new
:class:`RouteTable` to the ingress, every replica and this process whenever
the set of live replicas changes, replaces replicas that die or fail their
health check, drains replicas it stops, and autoscales on ongoing requests
(:mod:`autoscaler`, :mod:`autoscaling`).  One supervisor thread does the periodic work.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import Any

from muster.core import resources as res
from muster.core.api import get_runtime
from muster.core.runtime import BundleRef
from muster.serve import multiplex
from muster.serve._internal import (admission, autoscaler, deployment_actors, gangs, ingress_life, plan,
                                    replica_groups, router, server_choice)
from muster.serve._internal.ingress import InProcess, IngressActor, NoProxy, check_port_free
from muster.serve._internal.plan import DeploymentPlan
from muster.serve._internal.record import ServeRecorder
from muster.serve._internal.replica import ReplicaActor, ReplicaSpec
from muster.serve._internal.state import WAITING, AppState, DeploymentState, ReplicaState
from muster.serve.config import HTTPOptions
from muster.serve.exceptions import DeployFailedError, RayServeException, RoutePrefixTakenError
from muster.serve.gang import Gang, round_up
from muster.tasks import owner as task_owner

_BUSY_WAIT_S = 120.0  # how long a replica waits for resources other work holds
_PUSH_TIMEOUT_S = 10.0
_TABLE_VERSIONS = itertools.count(1)  # route tables this process has made, across serve.start/shutdown


class ServeController:
    """Everything ``serve.*`` does in the driver (thread-safe)."""

    def __init__(self, http_options: HTTPOptions, websockets: bool = False, proxy: bool = True):
        """``websockets``: the first app has WebSocket routes (an ingress left to choose starts on uvicorn);
        ``proxy``: False (Ray's ``ProxyLocation.Disabled``) runs no HTTP ingress, and handles alone reach apps."""
        self.proxy = proxy
        if proxy:
            check_port_free(http_options)
        self.runtime = get_runtime()
        self.chosen = http_options.server is not None  # the user named the server: it stays, whatever the apps
        self.options = http_options = server_choice.resolve(http_options, websockets)
        # on uvicorn because an app serves WebSockets (not the user's choice, nor a crash's fallback): it may move back
        self.moved_for_websockets = not self.chosen and http_options.server == server_choice.WEBSOCKETS
        self.dir = tempfile.mkdtemp(prefix="muster-serve-", dir="/tmp")
        self.apps: dict[str, AppState] = {}
        self.failed: dict[str, dict[str, Any]] = {}  # the status of apps whose deploy failed (Ray's DEPLOY_FAILED)
        self.failed_routes: dict[str, router.AppRoute] = {}  # their routes, kept as Ray's: requests to them get 503
        self.deploying: dict[str, AppState] = {}  # apps whose replicas are starting: DEPLOYING in status, as in Ray
        self.lock = threading.RLock()
        self.version = _TABLE_VERSIONS  # process-wide: a later Serve instance's tables outrank an earlier one's
        self.table = router.RouteTable()
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="muster-serve-ctl")
        self.local = self.runtime.name == "local"
        self.record = ServeRecorder(self.runtime)
        self.ingress_lock = threading.Lock()
        self.ingress_checked = 0.0
        self.waiting = autoscaler.Waiting()
        self.ingress: Any = ingress_life.start(self, http_options) if proxy else NoProxy()
        # with no proxy: the configured address, unbound (the admin record has no port)
        address: tuple[str, int] = self.ingress.call("address").result(30) or (http_options.host, http_options.port)
        self.host, self.port = address
        self._stop = threading.Event()
        threading.Thread(target=self._supervise, name="muster-serve-supervisor", daemon=True).start()

    # -- apps -------------------------------------------------------------------
    def deploy(self, name: str, route_prefix: str | None, ingress: str, plans: list[DeploymentPlan],
               config: dict[str, Any] | None = None, policy: Any = None, new_code: bool = False) -> None:
        """Start (or replace) app ``name``; returns once every replica is up. ``config``: the config file's
        entry for it (``muster serve deploy``), kept for ``muster serve config``; None from ``serve.run``.
        ``policy``: its app-level ``AutoscalingPolicy`` (the entry's ``autoscaling_policy``).
        ``new_code``: its modules were imported again (``serve run --reload``), so replicas are replaced even
        where the import paths and options are unchanged.

        Raises:
            ResourcesUnavailableError: its replicas can never fit next to the other apps.
            DeployFailedError: a replica failed to start (its constructor, or ``reconfigure`` with the new
                ``user_config``, raised); the app's status is then ``DEPLOY_FAILED``, as in Ray. An earlier version
                of it that still runs keeps serving until a deploy succeeds.
        """
        with self.lock:
            holders = [(a.name, a.route_prefix) for a in self.apps.values()]  # an app whose deploy failed holds too
            for other, prefix in holders + [(r.name, r.route_prefix) for r in self.failed_routes.values()]:
                if other != name and route_prefix is not None and prefix == route_prefix:
                    raise RoutePrefixTakenError(
                        f"serve.run(name={name!r}, route_prefix={route_prefix!r}): app {other!r} already serves "
                        "that prefix; pick another route_prefix or serve.delete the other app."
                    )
            admission.check_fits(self.runtime, self.apps, name, plans)
            old = self.apps.get(name)
        if policy is not None:
            autoscaler.warn_overridden(name, plans)
        if new_code:
            plans = [dataclasses.replace(p, fresh_import=True) for p in plans]
        elif old is not None and config is not None and self._reconfigure_in_place(old, route_prefix, ingress, plans):
            # a config file's deploy only, as Ray's: serve.run gives the code a new version each time, so its
            # redeploy replaces the replicas whatever changed
            old.config = config
            old.set_policy(policy)
            server_choice.follow_apps(self, name)
            return
        for p in plans:
            plan.check_picklable(p, name)
            old = self.apps.get(name)
        new = AppState(name, route_prefix, ingress, {
            p.name: DeploymentState(name, p, target=p.config.initial_replicas) for p in plans
        }, config=config)
        new.set_policy(policy)
        need = admission.need(plans)
        stop_old_first = old is not None and not res.fits(need, self.runtime.available())
        if stop_old_first and old is not None:
            self._stop_app(old)
        with self.lock:
            self.deploying[name] = new  # status shows what its replicas wait for (resources, a constructor)
        try:
            gen = os.urandom(4).hex()  # a redeploy's actors are new ones, beside the old app's until it stops
            for d in new.deployments.values():
                d.code_version = gen
                d.actors = deployment_actors.start(name, d.plan.name, gen, d.plan.config.deployment_actors)
            futs: list[concurrent.futures.Future] = []
            for d in new.deployments.values():
                size = gangs.size(d)
                if size:
                    d.target = round_up(d.target, size)
                futs += ([self.pool.submit(gangs.start, self, d) for _ in range(d.target // size)] if size
                         else [self.pool.submit(self._start_replica, d) for _ in range(d.target)])
            for f in futs:
                f.result()
        except BaseException as exc:
            for d in new.deployments.values():
                self._stop_replicas(d, list(d.replicas.values()), drain=False)
                deployment_actors.stop(d.actors)
            with self.lock:
                if self.apps.get(name) is old and old is not None and stop_old_first:
                    self.apps.pop(name, None)
                self.deploying.pop(name, None)
                if not isinstance(exc, DeployFailedError):
                    raise
                first = name not in self.apps  # no version of it runs: its route stays, answering 503
                if first:
                    self.failed[name] = new.overview(failed=str(exc))
                    why = str(exc).partition("\n")[0]  # no remote traceback in HTTP answers: serve.status() has it
                    self.failed_routes[name] = router.AppRoute(name, route_prefix, ingress, failed=why)
                else:
                    why = (f"{exc}\nApp {name!r} keeps serving its previous version (serve.status() shows it "
                           "DEPLOY_FAILED) until a deploy succeeds: fix the error and deploy it again.")
                    self.apps[name].update_failed = new.overview(failed=why)
            if first:
                self._push()
                raise
            raise DeployFailedError(why) from exc
        with self.lock:
            self.deploying.pop(name, None)
            new.status = "RUNNING"
            for d in new.deployments.values():
                d.trigger = "CONFIG_UPDATE_COMPLETED"
            self.apps[name] = new
            self.failed.pop(name, None)
            self.failed_routes.pop(name, None)
        self.record.event(name, None, None, "deploy", f"app {name!r} deployed"
                          f"{' (replacing the running one)' if old is not None else ''}: "
                          + ", ".join(f"{d.plan.name} x{d.target}" for d in new.deployments.values()))
        self._push()
        server_choice.follow_apps(self, name)
        ingress_life.confirm(self)
        if old is not None and not stop_old_first:
            self._stop_app(old, push=False)

    def _reconfigure_in_place(self, app: AppState, route_prefix: str | None, ingress: str,
                              plans: list[DeploymentPlan]) -> bool:
        """Keep ``app``'s replicas when the redeploy changes nothing, or only ``user_config`` (each live replica
        then runs ``reconfigure`` with the new one) and the replica count (replicas are added or drained);
        ``False`` when they must be replaced."""
        same = (app.route_prefix, app.ingress, app.status) == (route_prefix, ingress, "RUNNING") \
            and app.update_failed is None
        changes = plan.in_place_changes({n: d.plan for n, d in app.deployments.items()}, plans) if same else None
        if changes is None:
            return False
        by_name = {p.name: p for p in plans}
        for dep, changed in changes.items():
            d = app.deployments[dep]
            d.plan = by_name[dep]  # replicas started from now on get the new options
            d.trigger = "CONFIG_UPDATE_STARTED"
            if changed & {"num_replicas", "autoscaling_config"}:
                self._resize(d, d.new_target(), wait=True)  # serve.run returns with the new ones up
            if "user_config" not in changed:
                d.trigger = "CONFIG_UPDATE_COMPLETED"
                continue
            config = d.plan.config.user_config
            calls = [(r, r.actor.call("reconfigure", config)) for r in list(d.replicas.values())
                     if r.state == "RUNNING" and r.actor is not None]
            for r, fut in calls:
                try:
                    fut.result(d.plan.config.health_check_timeout_s)
                except Exception as exc:
                    err = DeployFailedError(
                        f"deployment {dep!r} of app {app.name!r}: replica {r.id} failed to apply user_config="
                        f"{config!r} in reconfigure(): {type(exc).__name__}: {exc}\nFix reconfigure or the config "
                        "and deploy again (serve.status() shows the app DEPLOY_FAILED until then)."
                    )
                    with self.lock:
                        d.trigger = "CONFIG_UPDATE_COMPLETED"  # its replicas serve on; the failure shows below
                        app.update_failed = app.overview()
                        app.update_failed["message"] = str(err)
                        app.update_failed["deployments"][dep].update(
                            status="DEPLOY_FAILED", status_trigger="REPLICA_STARTUP_FAILED",
                            message=f"reconfigure() raised {type(exc).__name__}: {exc}")
                    raise err from exc
            d.trigger = "CONFIG_UPDATE_COMPLETED"
        what = ", ".join(f"{dep} {'/'.join(sorted(changed))}" for dep, changed in changes.items()) or "nothing changed"
        self.record.event(app.name, None, None, "deploy", f"app {app.name!r} updated in place ({what})")
        return True

    def delete(self, name: str) -> bool:
        with self.lock:
            app = self.apps.pop(name, None)
            failed = self.failed.pop(name, None)
            route = self.failed_routes.pop(name, None)
        if app is None:
            if route is not None:
                self._push()  # its route goes
            return failed is not None
        self._stop_app(app)
        self.record.event(name, None, None, "delete", f"app {name!r} deleted")
        server_choice.follow_apps(self)
        return True

    def _stop_app(self, app: AppState, push: bool = True) -> None:
        with self.lock:
            if self.apps.get(app.name) is app:
                del self.apps[app.name]
        for d in app.deployments.values():
            for r in d.replicas.values():
                r.state = "STOPPING"
        if push:
            self._push()
        futs = [self.pool.submit(self._stop_replicas, d, list(d.replicas.values())) for d in app.deployments.values()]
        concurrent.futures.wait(futs, timeout=max(
            [d.plan.config.graceful_shutdown_timeout_s for d in app.deployments.values()] + [0]) + 10)
        for d in app.deployments.values():
            deployment_actors.stop(d.actors)

    # -- replicas ------------------------------------------------------------------
    def _start_replica(self, d: DeploymentState, pending: bool = False, gang: Gang | None = None,
                       gang_rank: int = 0) -> ReplicaState:
        """Start one replica of ``d`` (``pending``: it was counted as on its way); in ``gang``, the member of
        rank ``gang_rank``, in that bundle of the gang's placement group."""
        n = next(d.counter)
        rid = gang.members[gang_rank] if gang is not None else f"{d.app}#{d.plan.name}#{os.urandom(4).hex()}"
        where = os.path.join(self.dir, f"{os.urandom(6).hex()}.sock") if self.local else "tcp:"
        rep = ReplicaState(rid, where, d.plan.config.resources(), n, gang=None if gang is None else gang.id)
        with self.lock:
            held = {r.rank for r in d.replicas.values() if r.state in ("STARTING", "RUNNING")}
            rep.rank = next(i for i in itertools.count() if i not in held)
            d.replicas[rid] = rep
            if pending:
                d.pending -= 1
        label = f"serve {d.app}/{d.plan.name} #{n}"  # the prefix of its log lines, and their key in the store
        target = plan.portable(d.plan.target, reload=d.plan.fresh_import)
        spec = ReplicaSpec(d.app, d.plan.name, rid, rep.socket, target, d.plan.args, d.plan.kwargs,
                           d.plan.config, self.table, rep.rank, max(d.target, rep.rank + 1), d.actors,
                           d.code_version, None if gang is None else gang.context(gang_rank))
        try:
            bundle = None if gang is None else BundleRef(gang.group, gang_rank)
            if d.plan.config.placement_group_bundles is not None:  # its own group: it runs in bundle 0
                rep.group = replica_groups.reserve(self, d, rid)
                bundle, spec = BundleRef(rep.group.id, 0), dataclasses.replace(spec, placement_group=rep.group)
            elif gang is None:  # a gang's members start into the bundles held for them
                self._wait_for_room(d, rep)
            # The replica's tasks, actors and gets are served as any actor's; the actors it makes die with it.
            rep.owned = task_owner.Gang(f"the Serve replica {label} that created it")
            actor = self.runtime.create_actor(ReplicaActor, (spec,), {}, rep.resources, label=label,
                                              on_event=rep.owned.handle_event, bundle=bundle)
        except BaseException as exc:
            rep.release()
            rep.state = "DEAD"
            with self.lock:
                d.replicas.pop(rid, None)
                d.message = f"replica failed to start: {type(exc).__name__}: {exc}"
                d.trigger = "REPLICA_STARTUP_FAILED"
            raise DeployFailedError(
                f"deployment {d.plan.name!r} of app {d.app!r}: a replica failed to start: {type(exc).__name__}: "
                f"{exc}"
            ) from exc
        rep.actor = actor
        if not self.local:
            rep.socket = actor.call("address").result(30)
        actor.set_handlers(rep.owned.handle_event, lambda _h, err, d=d, rep=rep: self._died(d, rep, err))
        rep.state = "RUNNING"
        rep.last_health = time.monotonic()
        self.record.replica_started(d.app, d.plan.name, n, rid, actor.pid, here=self.local, label=label)
        return rep

    def _wait_for_room(self, d: DeploymentState, rep: ReplicaState) -> None:
        deadline = time.monotonic() + _BUSY_WAIT_S
        while self.runtime.capacity(rep.resources) < 1 if rep.resources else False:
            with self.lock:
                d.message = (f"{WAITING}: a replica needs {res.fmt(rep.resources)}, "
                             f"free now: {res.fmt(res.machine(self.runtime.available()))} (other work holds the rest)")
            if time.monotonic() > deadline or self._stop.is_set():
                raise RayServeException(f"deployment {d.plan.name!r} of app {d.app!r}: {d.message}; gave up after "
                                        f"{_BUSY_WAIT_S:.0f} s.")
            time.sleep(0.1)
        if not d.message.startswith("autoscaling"):  # an upscale's stays until its replicas run (UPSCALING)
            d.message = ""

    def _died(self, d: DeploymentState, rep: ReplicaState, err: BaseException, what: str = "died") -> None:
        rep.release()
        with self.lock:
            if rep.state in ("STOPPING", "DEAD"):
                rep.state = "DEAD"
                return
            rep.state = "DEAD"
            d.replicas.pop(rep.id, None)
            d.restarts += 1
            d.message = f"replica {rep.id} {what} ({err}); replacing {'its gang' if rep.gang else 'it'}"
            d.trigger = "HEALTH_CHECK_FAILED"  # as Ray's, which finds a dead replica by its failed health check
            live = self.apps.get(d.app)
            keep = live is not None and live.deployments.get(d.plan.name) is d
            gang = gangs.claim_restart(d, rep.gang) if keep and rep.gang is not None else None
        print(f"[serve] {d.message}", file=sys.stderr, flush=True)
        self.record.replica_ended(d.app, d.plan.name, rep.number, rep.id, "DEAD", str(err))
        if keep:
            self.record.event(d.app, d.plan.name, rep.number, "restart",
                              f"replacing replica #{rep.number} (restart {d.restarts})")
        self.pool.submit(self._push)
        if gang is not None:
            gangs.restart(self, d, gang, what)
        elif keep and rep.gang is None:
            self._ensure(d)

    def _ensure(self, d: DeploymentState) -> None:
        """Start replicas (whole gangs, in a gang-scheduled deployment) until the deployment has its target
        count (counting those on their way)."""
        size = gangs.size(d)
        with self.lock:
            if self._stop.is_set() or time.monotonic() < d.retry_at:
                return
            missing = d.target - len([r for r in d.replicas.values() if r.state in ("STARTING", "RUNNING")]) - d.pending
            starts = max(missing, 0) if not size else -(-max(missing, 0) // size)
            d.pending += starts * (size or 1)
        for _ in range(starts):
            self.pool.submit(self._replace, d, bool(size))

    def _replace(self, d: DeploymentState, gang: bool = False) -> None:
        try:
            gangs.start(self, d, pending=True) if gang else self._start_replica(d, pending=True)
            d.message = ""
            self._push()
        except BaseException as exc:  # noqa: BLE001 - shown in status; the supervisor retries
            d.message = f"could not replace a replica: {exc}"
            d.retry_at = time.monotonic() + 2.0

    def _stop_replicas(self, d: DeploymentState, reps: list[ReplicaState], drain: bool = True) -> None:
        for r in reps:
            if r.state != "DEAD":
                r.state = "STOPPING"
        grace = d.plan.config.graceful_shutdown_timeout_s
        drains = [(r, r.actor.call("drain", grace)) for r in reps if r.actor is not None and drain]
        for r, f in drains:
            try:
                f.result(grace + 5)
            except BaseException:  # noqa: BLE001 - it is being stopped anyway
                pass
        for r in reps:
            if r.actor is not None:
                self.runtime.kill(r.actor, grace_s=1.0)
                r.release()
                if r.state != "DEAD":
                    self.record.replica_ended(d.app, d.plan.name, r.number, r.id, "STOPPED")
            r.state = "DEAD"
            with self.lock:
                d.replicas.pop(r.id, None)
                if r.gang is not None and r.gang in d.gangs:
                    d.gangs[r.gang].stopping = True
        gangs.release(self, d)

    # -- the HTTP ingress (ingress_life.py) ---------------------------------------------
    #: The class the ingress process runs (a test swaps in one that crashes, to check the fallback).
    ingress_class: type = IngressActor

    # -- the route table ---------------------------------------------------------------
    def _push(self) -> None:
        with self.lock:
            apps = {**self.failed_routes,
                    **{a.name: router.AppRoute(a.name, a.route_prefix, a.ingress) for a in self.apps.values()}}
            deps = {
                (a.name, d.plan.name): router.DeploymentRoute(
                    tuple(router.ReplicaRoute(r.id, r.socket) for r in d.running()),
                    d.plan.config.max_ongoing_requests, d.plan.config.max_queued_requests,
                    rejection=d.plan.config.rejection(), multiplexed=multiplex.is_multiplexed(d.plan.target),
                )
                for a in self.apps.values() for d in a.deployments.values()
            }
            self.table = table = router.RouteTable(next(self.version), apps, deps)
            actors = [r.actor for a in self.apps.values() for d in a.deployments.values() for r in d.running()
                      if r.actor is not None]
        router.set_table(table)
        futs = [self.ingress.call("update_routes", table)] + [a.call("update_routes", table) for a in actors]
        concurrent.futures.wait(futs, timeout=_PUSH_TIMEOUT_S)

    # -- periodic work: health checks and autoscaling ----------------------------------
    def _supervise(self) -> None:
        while not self._stop.wait(0.1):
            try:
                self._tick(time.monotonic())
            except Exception as exc:  # noqa: BLE001 - keep supervising
                print(f"[serve] supervisor: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)

    def _tick(self, now: float) -> None:
        if now - self.ingress_checked >= 1.0:
            self.ingress_checked = now
            why = ingress_life.down(self)
            if why is not None:
                ingress_life.replace(self, why)
        with self.lock:
            apps = [a for a in self.apps.values() if a.status == "RUNNING"]
        self.waiting.read(apps, self.ingress, isinstance(self.ingress, InProcess))
        for a in apps:
            for d in a.deployments.values():
                cfg = d.plan.config
                for r in d.running():
                    why = r.check_health(now, cfg.health_check_period_s, cfg.health_check_timeout_s)
                    if why is not None:
                        self._unhealthy(d, r, why)
                self._ensure(d)
                self._poll(d, now, a.policy is not None)
            if a.policy is not None:
                autoscaler.autoscale_app(a, now, self._resize)

    def _unhealthy(self, d: DeploymentState, r: ReplicaState, why: str) -> None:
        if r.actor is not None:
            self.runtime.kill(r.actor)  # an expected exit: the runtime sends no death notice
        self._died(d, r, RuntimeError(why), what="is unhealthy")  # said once, there

    def _poll(self, d: DeploymentState, now: float, app_policy: bool = False) -> None:
        """Record each round of the replicas' stats and, if on, feed the autoscaler (``app_policy``: the app's,
        which :func:`autoscaler.autoscale_app` calls)."""
        snaps = d.poll_stats(now, self.lock)
        if snaps is None:
            return
        with self.lock:
            numbers = {r.id: r.number for r in d.replicas.values()}
            running = len(d.running())
        self.record.sample(d.app, d.plan.name, d.metrics.as_dict(), numbers, running, d.target, d.restarts, now)
        if d.plan.config.autoscaling_config is not None:
            autoscaler.record_custom(d, snaps, now)
            ongoing = float(sum(s["ongoing"] for s in snaps.values()) + d.queued)
            if app_policy:
                d.fresh = ongoing
            else:
                autoscaler.autoscale(d, ongoing, now, self._resize)

    def _resize(self, d: DeploymentState, want: int, wait: bool = False) -> None:
        """Start replicas up to ``want`` (``wait``: and return once they are up, raising if one cannot
        start), or drain the extra ones (the routes drop them first)."""
        size = gangs.size(d)
        want = round_up(want, size) if size else want  # whole gangs, as Ray's gang policy rounds
        with self.lock:
            current = d.live()
            more = want - current - d.pending
            d.target = want
            starts = max(more, 0) if not size else -(-max(more, 0) // size)
            if more > 0 and wait:
                d.pending += starts * (size or 1)  # counted as on their way: the supervisor starts no more
        if more > 0 and wait:
            for fut in [self.pool.submit(gangs.start, self, d, True) if size
                        else self.pool.submit(self._start_replica, d, True) for _ in range(starts)]:
                fut.result()
            self._push()
        elif want > current:
            self._ensure(d)
        elif want < current and size:
            gangs.shrink(self, d, current - want)
        elif want < current:
            victims = d.running()[: current - want]
            for r in victims:
                r.state = "STOPPING"
            self.pool.submit(self._push)
            self.pool.submit(self._stop_replicas, d, victims)

    # -- status and shutdown ---------------------------------------------------------
    def status(self) -> dict[str, Any]:
        with self.lock:
            apps = {**self.failed, **{a.name: a.overview() for a in (*self.apps.values(), *self.deploying.values())}}
        if not self.proxy:  # as Ray's with ProxyLocation.Disabled: no proxy, no HTTP address
            return {"proxies": {}, "http": {}, "applications": apps}
        return {"proxies": {"ingress": "HEALTHY" if self.ingress.is_alive() else "UNHEALTHY"},
                "http": {"host": self.host, "port": self.port, "server": self.options.server,
                         "loop": self.options.loop}, "applications": apps}

    def app_configs(self) -> dict[str, Any]:
        """Each app's config file entry (None for an app ``serve.run`` started), for ``muster serve config``."""
        with self.lock:
            return {a.name: a.config for a in self.apps.values()}

    def shutdown(self) -> None:
        self._stop.set()
        with self.lock:
            apps = list(self.apps.values())
        for a in apps:
            self._stop_app(a, push=False)
        router.set_table(router.RouteTable(next(self.version), {}, {}))  # this process's handles: nothing runs
        with self.ingress_lock:  # a replacement under way finishes first; none starts after
            try:
                self.ingress.call("stop").result(10)
            except BaseException:  # noqa: BLE001 - killed next anyway
                pass
            if self.local and self.proxy:
                self.runtime.kill(self.ingress, grace_s=1.0)
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.record.close()
        shutil.rmtree(self.dir, ignore_errors=True)
