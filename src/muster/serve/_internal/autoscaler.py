"""The controller's autoscaling step: give each policy what a round of stats said, and resize as it decides.

A deployment's own policy (the default one, or its ``AutoscalingConfig(policy=...)``) decides after each of
its stats rounds (:func:`autoscale`); an app with an app-level policy (a config file's ``autoscaling_policy``,
Ray 2.60's) decides for all its autoscaling deployments together, once one of their rounds has ended
(:func:`autoscale_app`). The decisions themselves are :mod:`autoscaling`'s pure functions; a policy that
raises leaves the counts as they are and says why on stderr and in ``serve.status()``.
"""

from __future__ import annotations

import concurrent.futures
import sys
import time
from typing import Any, Callable

from muster.serve._internal import autoscaling, router
from muster.serve._internal.plan import DeploymentPlan
from muster.serve._internal.state import AppState, DeploymentState
from muster.serve.gang import round_up

_ASK_AGAIN_S = 2.0  # an ask of the ingress unanswered this long is made again

Resize = Callable[[DeploymentState, int], None]  # the controller's: start or drain replicas to a count


def _facts(d: DeploymentState) -> autoscaling.Facts:
    return autoscaling.Facts(d.app, d.plan.name, d.target, [r.id for r in d.running()])


def autoscale(d: DeploymentState, ongoing: float, now: float, resize: Resize) -> None:
    """After a stats round of ``d`` (``ongoing`` requests in all): its policy's count, applied."""
    cfg = d.plan.config.autoscaling_config
    assert cfg is not None
    current = d.live()
    gang = d.plan.config.gang_scheduling_config
    # a gang-scheduled deployment moves in whole gangs (see _scale_to); as in Ray, its one gang counts as one replica
    # for a policy that may scale to zero, so the policy's last step down, 1 -> 0, is still reached
    seen = 1 if gang is not None and cfg.min_replicas == 0 and current == gang.gang_size else current
    try:
        want = autoscaling.decide(cfg, seen, ongoing, now, d.scale, _facts(d))
    except Exception as exc:  # noqa: BLE001 - a custom policy's failure: keep the count, say why
        _failed([d], exc, "the autoscaling policy")
        return
    _scale_to(d, want, current, ongoing, resize)


def record_custom(d: DeploymentState, snaps: dict[str, dict[str, Any]], now: float) -> None:
    """Keep the custom metrics (``record_autoscaling_stats()``) of a stats round of ``d`` for its policy."""
    cfg = d.plan.config.autoscaling_config
    assert cfg is not None
    autoscaling.record_custom(cfg, d.scale, {rid: s["autoscaling_stats"] for rid, s in snaps.items()
                                             if "autoscaling_stats" in s}, now)


def autoscale_app(a: AppState, now: float, resize: Resize) -> None:
    """Call ``a``'s app-level policy once a stats round of one of its autoscaling deployments has ended
    (``DeploymentState.fresh``), and apply the counts it decides."""
    if a.policy is None:
        return
    members: list[tuple[DeploymentState, autoscaling.Member]] = []
    for d in a.deployments.values():
        cfg = d.plan.config.autoscaling_config
        if cfg is not None:
            members.append((d, autoscaling.Member(cfg, d.live(), d.fresh, d.scale, _facts(d))))
    if not any(m.ongoing is not None for _, m in members):
        return
    for d, _ in members:
        d.fresh = None
    try:
        wants = autoscaling.decide_app(a.policy, [m for _, m in members], now)
    except Exception as exc:  # noqa: BLE001 - the policy's failure: keep the counts, say why
        _failed([d for d, _ in members], exc, f"app {a.name!r}'s autoscaling policy")
        return
    for d, m in members:
        if d.plan.name in wants:
            _scale_to(d, wants[d.plan.name], m.current, m.ongoing or 0.0, resize)


class Waiting:
    """The requests that routers hold for autoscaling deployments with no running replica (scaled to zero, or
    starting from it): the controller's cold-start signal, as Ray counts the requests queued at handles.

    Each call of :meth:`read` asks the ingress for its count, or reads the answer of the last ask, and sets each
    such deployment's ``queued`` to the ingress's count plus those of the driver's own handles, of the replicas'
    (their last stats) and of the workers' that pull the route table (their last pull); ``queued`` is 0 for the
    others.
    """

    def __init__(self) -> None:
        self.asked: concurrent.futures.Future | None = None
        self.asked_at = 0.0

    def read(self, apps: list[AppState], ingress: Any, ingress_here: bool) -> None:
        """``ingress_here``: the ingress runs in this process, and shares its routers."""
        idle = []
        for a in apps:
            for d in a.deployments.values():
                if d.plan.config.autoscaling_config is not None and not d.running():
                    idle.append(d)
                else:
                    d.queued = 0
        if not idle:
            self.asked = None
            return
        now = time.monotonic()
        if self.asked is None or (not self.asked.done() and now - self.asked_at > _ASK_AGAIN_S):
            self.asked, self.asked_at = ingress.call("queued"), now  # again: a replaced ingress never answers
            return
        if not self.asked.done():
            return
        fut, self.asked = self.asked, None
        counts = dict(fut.result()) if fut.exception() is None else {}
        held = [router.pulled_counts()] + ([] if ingress_here else [router.queued_counts()])
        held += [d.holds for a in apps for d in a.deployments.values()]  # calls made in replicas
        for more in held:
            for key, n in more.items():
                counts[key] = counts.get(key, 0) + n
        for d in idle:
            d.queued = counts.get((d.app, d.plan.name), 0)


def warn_overridden(app: str, plans: list[DeploymentPlan]) -> None:
    """Say which deployments' own custom policies an app-level policy replaces (Ray warns so too)."""
    for p in plans:
        cfg = p.config.autoscaling_config
        if cfg is not None and cfg.policy is not None and not cfg.policy.is_default_policy_function():
            print(f"[serve] app {app!r}: deployment {p.name!r} has a custom autoscaling policy and the app has an "
                  "application-level one; the application-level policy takes precedence.", file=sys.stderr,
                  flush=True)


def _failed(deps: list[DeploymentState], exc: Exception, what: str) -> None:
    for d in deps:
        d.message = f"{what} raised {type(exc).__name__}: {exc}; keeping {d.live()} replicas"
        print(f"[serve] {d.plan.name}: {d.message}", file=sys.stderr, flush=True)


def _scale_to(d: DeploymentState, want: int, current: int, ongoing: float, resize: Resize) -> None:
    gang = d.plan.config.gang_scheduling_config
    if gang is not None:  # whole gangs: a decision is rounded up, as Ray's gang policy does
        want = round_up(want, gang.gang_size)
    if want != d.target:
        d.trigger, d.scaled_up = "AUTOSCALING", want > d.target
        d.message = f"autoscaling from {d.target} to {want} replicas ({ongoing:g} ongoing requests)"
        print(f"[serve] {d.plan.name}: {d.message}", file=sys.stderr, flush=True)
    if want != current:
        resize(d, want)
