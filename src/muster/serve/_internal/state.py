"""What the Serve controller knows of its apps, deployments and replicas, and the periodic reads it
makes of them: each replica's health check, and each deployment's round of ``stats()`` calls.

The controller (:mod:`controller`) starts, replaces and stops replicas; these classes hold their
state and answer "is this replica healthy?" and "what did this round of stats say?" without
starting or stopping anything.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from muster.core import resources as res
from muster.core.runtime import RuntimeActor
from muster.serve._internal import autoscaling, replica_groups
from muster.serve._internal.metrics import DeploymentMetrics
from muster.serve._internal.plan import DeploymentPlan
from muster.serve.gang import Gang

WAITING = "waiting for resources"  # how a deployment's status message starts while a replica waits for room
STATS_LATE_S = 5.0  # a round of stats is folded in without the replies still missing after this long


@dataclass(eq=False)
class ReplicaState:
    id: str
    socket: str
    resources: dict[str, float]
    number: int = 0  # the ``#N`` of its log label: what ``muster logs --replica N`` names
    rank: int = 0  # Ray's replica rank: the lowest not held by another live replica of the deployment
    actor: RuntimeActor | None = None
    state: str = "STARTING"  # STARTING, RUNNING, STOPPING, DEAD
    health: concurrent.futures.Future | None = None
    health_started: float = 0.0
    last_health: float = field(default_factory=time.monotonic)
    stats_acks: dict[str, int] = field(default_factory=dict)  # from the last stats() folded in (ReplicaActor.stats)
    owned: Any = None  # the tasks layer's owner of what the replica starts (a ``Gang``): closed when it ends
    gang: str | None = None  # the id of its gang, in a gang-scheduled deployment
    group: Any = None  # its own PlacementGroup (placement_group_bundles), removed once it ends

    def release(self) -> None:
        """Kill the actors the replica created (not detached ones): they share its fate, as in Ray; then
        give its own placement group back."""
        if self.owned is not None:
            self.owned.close()
        group, self.group = self.group, None
        replica_groups.remove(group)

    def holds(self) -> dict[str, float]:
        """What it holds: its whole placement group when it has one, else its actor's resources."""
        return self.resources if self.group is None else dict(res.summed(self.group.bundle_specs))

    def check_health(self, now: float, period_s: float, timeout_s: float) -> str | None:
        """Start this replica's ``check_health`` call every ``period_s``, or read the one under way;
        why the replica is unhealthy, or ``None``."""
        if self.actor is None:
            return None
        if self.health is None:
            if now - self.last_health >= period_s:
                self.health, self.health_started = self.actor.call("check_health"), now
            return None
        if self.health.done():
            exc = self.health.exception()
            self.health, self.last_health = None, now
            return None if exc is None else f"check_health raised {type(exc).__name__}: {exc}"
        if now - self.health_started > timeout_s:
            self.health = None
            return f"check_health did not answer within {timeout_s} s"
        return None


@dataclass(eq=False)
class DeploymentState:
    app: str
    plan: DeploymentPlan
    replicas: dict[str, ReplicaState] = field(default_factory=dict)
    target: int = 1
    restarts: int = 0
    message: str = ""
    scale: autoscaling.ScaleState = field(default_factory=autoscaling.ScaleState)
    stats: dict[str, concurrent.futures.Future] | None = None
    metrics: DeploymentMetrics = field(default_factory=DeploymentMetrics)
    last_stats: float = 0.0
    counter: itertools.count = field(default_factory=itertools.count)
    pending: int = 0  # replacements submitted, not yet started
    actors: dict[str, Any] = field(default_factory=dict)  # its deployment-scoped actors' handles, by name
    code_version: str = ""  # its generation (a deploy that replaces the replicas makes a new one): Ray's code_version
    retry_at: float = 0.0
    fresh: float | None = None  # an app policy's input: the ongoing total of a stats round not yet given to it
    queued: int = 0  # requests routers hold for it while no replica runs (autoscaler.Waiting)
    holds: dict[tuple[str, str], int] = field(default_factory=dict)  # its replicas' calls waiting, by deployment
    gangs: dict[str, Gang] = field(default_factory=dict)  # its gangs by id (gang_scheduling_config), oldest first
    #: what last changed its status (Ray's ``status_trigger``; see :meth:`shown_trigger`)
    trigger: str = "CONFIG_UPDATE_STARTED"
    scaled_up: bool = True  # the last autoscaling decision added replicas (it removed some: False)

    def running(self) -> list[ReplicaState]:
        return [r for r in self.replicas.values() if r.state == "RUNNING"]

    def live(self) -> int:
        """Replicas starting or running: what the target is compared with."""
        return len([r for r in self.replicas.values() if r.state in ("STARTING", "RUNNING")])

    def new_target(self) -> int:
        """The replica count a redeployed deployment's new options ask for: ``num_replicas``, or the
        current count kept within the new autoscaling bounds."""
        auto = self.plan.config.autoscaling_config
        if auto is None:
            return self.plan.config.initial_replicas
        return max(auto.min_replicas, min(self.target, auto.max_replicas))

    def poll_stats(self, now: float, lock: AbstractContextManager[Any]) -> dict[str, dict[str, Any]] | None:
        """Start a round of ``stats()`` calls to the running replicas every metrics interval. Once
        every reply is in, or :data:`STATS_LATE_S` has passed, fold the replies into :attr:`metrics`
        (under ``lock``) and return them; ``None`` until then. A late reply is left out and loses
        nothing (see ``ReplicaActor.stats``)."""
        auto = self.plan.config.autoscaling_config
        interval = auto.metrics_interval_s if auto is not None else 1.0
        if self.stats is None:
            if now - self.last_stats >= interval:
                self.stats = {r.id: r.actor.call("stats", r.stats_acks) for r in self.running()
                              if r.actor is not None}
                self.last_stats = now
            return None
        if not all(f.done() for f in self.stats.values()) and now - self.last_stats < STATS_LATE_S:
            return None
        snaps = {rid: f.result() for rid, f in self.stats.items() if f.done() and f.exception() is None}
        self.stats = None
        with lock:
            self.metrics.update(snaps, now, live=list(self.replicas))
            self.holds = {}
            for snap in snaps.values():
                for key, n in snap.get("waiting", {}).items():
                    self.holds[key] = self.holds.get(key, 0) + n
            for rid, snap in snaps.items():
                if rid in self.replicas:
                    self.replicas[rid].stats_acks = snap["acks"]
        return snaps

    def shown_trigger(self, status: str) -> str:
        """Ray's ``status_trigger`` for ``status``: :attr:`trigger`, except once healthy again, when an autoscaling
        decision shows as the up- or downscale it completed and a failure as ``UNSPECIFIED`` (as Ray's do)."""
        if status == "HEALTHY" and self.trigger == "AUTOSCALING":
            return "UPSCALE_COMPLETED" if self.scaled_up else "DOWNSCALE_COMPLETED"
        if status == "HEALTHY" and self.trigger in ("HEALTH_CHECK_FAILED", "REPLICA_STARTUP_FAILED"):
            return "UNSPECIFIED"
        return self.trigger

    def status(self) -> dict[str, Any]:
        """This deployment's entry in ``serve.status()``."""
        states: dict[str, int] = {}
        for r in self.replicas.values():
            states[r.state] = states.get(r.state, 0) + 1
        healthy = states.get("RUNNING", 0) >= self.target
        status = "HEALTHY" if healthy else ("UPSCALING" if self.message.startswith("autoscaling")
                                            else "UPDATING" if not self.message or self.message.startswith(WAITING)
                                            else "UNHEALTHY")
        return {
            "status": status, "status_trigger": self.shown_trigger(status),
            "replica_states": states, "target_replicas": self.target, "restarts": self.restarts,
            "message": self.message, "metrics": self.metrics.as_dict(),
        }


@dataclass(eq=False)
class AppState:
    name: str
    route_prefix: str | None
    ingress: str
    deployments: dict[str, DeploymentState]
    status: str = "DEPLOYING"
    message: str = ""
    deployed_at: float = field(default_factory=time.time)
    config: dict[str, Any] | None = None  # the config file's entry it was deployed from (None: serve.run)
    policy: autoscaling.AppPolicy | None = None  # its app-level autoscaling policy (a config file's)
    websockets: bool | None = None  # serves WebSocket routes over HTTP (None: unknown; server_choice.websockets_of)
    #: a redeploy of it failed while this version kept serving: that deploy's ``overview(failed=...)``; its status
    #: shows ``DEPLOY_FAILED`` (as Ray's) until a deploy succeeds or it is deleted
    update_failed: dict[str, Any] | None = None

    def overview(self, failed: str | None = None) -> dict[str, Any]:
        """This app's entry in ``serve.status()``; ``failed``: why its deploy failed (Ray's ``DEPLOY_FAILED``: the
        deployment whose replica did not start says so, the others were still ``UPDATING``; none has replicas)."""
        deps = {d.plan.name: d.status() for d in self.deployments.values()}
        if failed is not None:
            for d in self.deployments.values():
                deps[d.plan.name].update(status="DEPLOY_FAILED" if d.message else "UPDATING", replica_states={},
                                         status_trigger=d.trigger if d.message else "CONFIG_UPDATE_STARTED")
        elif self.update_failed is not None:  # the running version's replicas, the failed update's verdicts
            for name, dep in self.update_failed["deployments"].items():
                if dep["status"] == "DEPLOY_FAILED":
                    deps[name] = {**dep, **{k: deps[name][k] for k in ("replica_states", "target_replicas",
                                                                         "restarts", "metrics") if name in deps}}
            failed = self.update_failed["message"]
        return {"status": "DEPLOY_FAILED" if failed is not None else self.status,
                "message": failed if failed is not None else self.message, "route_prefix": self.route_prefix,
                "last_deployed_time_s": self.deployed_at, "deployments": deps}

    def set_policy(self, spec: Any) -> None:
        """Use ``spec`` (an ``AutoscalingPolicy``, or None) as the app's policy; kept, with what it built, when
        a redeploy gives the same one."""
        if spec is None:
            self.policy = None
        elif self.policy is None or self.policy.spec != spec:
            self.policy = autoscaling.AppPolicy(spec)
