"""The autoscaling policy: a pure function from what was observed to a replica count.

As Ray Serve's default policy: the ongoing requests of all replicas,
sampled every ``metrics_interval_s``, are aggregated (``aggregation_function``)
over the last ``look_back_period_s``; the wanted count moves from the current
one toward ``aggregate / target_ongoing_requests`` by the smoothing factor;
and a change happens once it has been wanted for ``upscale_delay_s`` (or
``downscale_delay_s``) without a break. A config's custom ``policy`` (Ray's
``AutoscalingPolicy``) replaces the middle step: it says the count it wants.
An application's policy (Ray 2.60's app-level ``autoscaling_policy``,
:func:`decide_app`) does so for all of its autoscaling deployments at once.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field
from typing import Any, Callable, cast

from muster.exceptions import InvalidArgumentError
from muster.serve.autoscaling_policy import AutoscalingContext, AutoscalingPolicy, TimeStampedValue
from muster.serve.config import AutoscalingConfig
from muster.serve.context import DeploymentID, ReplicaID

_MAX_SAMPLES = 100_000  # a bound on the window's memory, whatever look_back_period_s / metrics_interval_s are


@dataclass
class ScaleState:
    """What the policy remembers between ticks: the samples in its window, and since when it has wanted more,
    or fewer, replicas."""

    want_up_since: float | None = None
    want_down_since: float | None = None
    samples: collections.deque = field(default_factory=lambda: collections.deque(maxlen=_MAX_SAMPLES))
    policy: Callable[[AutoscalingContext], Any] | None = None  # a custom policy, once built (a class's instance)
    policy_of: Any = None  # the AutoscalingPolicy it was built from
    policy_state: dict[str, Any] = field(default_factory=dict)  # what it returned last time
    last_up: float | None = None
    last_down: float | None = None
    #: replicas' ``record_autoscaling_stats()`` samples: metric -> replica id -> samples, oldest first
    custom: dict[str, dict[str, collections.deque]] = field(default_factory=dict)


def record_custom(cfg: AutoscalingConfig, state: ScaleState,
                  reports: dict[str, list[tuple[float, dict[str, float]]]], now: float) -> None:
    """Keep a stats round's custom metrics (replica id -> its samples since the last round, oldest first, each
    ``(age in seconds at now, {metric: value})``); samples older than ``look_back_period_s`` go."""
    for rid, samples in reports.items():
        for age, values in samples:
            for name, value in values.items():
                series = state.custom.setdefault(name, {}).setdefault(rid, collections.deque(maxlen=_MAX_SAMPLES))
                series.append(TimeStampedValue(now - age, value))
    for name, by_replica in list(state.custom.items()):
        for rid, series in list(by_replica.items()):
            while series and series[0].timestamp < now - cfg.look_back_period_s:
                series.popleft()
            if not series:
                del by_replica[rid]
        if not by_replica:
            del state.custom[name]


def _custom_metrics(cfg: AutoscalingConfig, state: ScaleState, now: float, running: list[str]) -> tuple[dict, dict]:
    """Ray's ``(aggregated_metrics, raw_metrics)`` of the running replicas, from the samples in the window."""
    aggregated: dict[str, dict[ReplicaID, float]] = {}
    raw: dict[str, dict[ReplicaID, list[TimeStampedValue]]] = {}
    for name, by_replica in state.custom.items():
        for rid, series in by_replica.items():
            kept = [p for p in series if p.timestamp >= now - cfg.look_back_period_s]
            if rid in running and kept:
                raw.setdefault(name, {})[ReplicaID._of_tag(rid)] = kept
                aggregated.setdefault(name, {})[ReplicaID._of_tag(rid)] = _over_time(cfg, kept, now)
    return aggregated, raw


def _over_time(cfg: AutoscalingConfig, series: list[TimeStampedValue], now: float) -> float:
    """One replica's samples by ``aggregation_function``; ``"mean"`` weighs each value by how long it held (the
    last one until ``now``), as Ray's time-weighted average."""
    values = [p.value for p in series]
    if cfg.aggregation_function == "max":
        return max(values)
    if cfg.aggregation_function == "min":
        return min(values)
    ends = [p.timestamp for p in series[1:]] + [now]
    spans = [max(end - p.timestamp, 0.0) for p, end in zip(series, ends)]
    total = sum(spans)
    return values[-1] if total <= 0 else sum(v * w for v, w in zip(values, spans)) / total


def _aggregate(cfg: AutoscalingConfig, total_ongoing: float | None, now: float, state: ScaleState) -> float:
    """The window's aggregate, after adding ``total_ongoing`` (None: no new sample this time)."""
    samples = state.samples
    if total_ongoing is not None:
        samples.append((now, total_ongoing))
    while samples and samples[0][0] < now - cfg.look_back_period_s:
        samples.popleft()
    values = [v for _, v in samples]
    if not values:
        return 0.0
    if cfg.aggregation_function == "max":
        return max(values)
    if cfg.aggregation_function == "min":
        return min(values)
    return sum(values) / len(values)


def wanted(cfg: AutoscalingConfig, current: int, ongoing: float) -> int:
    """The count ``ongoing`` requests (aggregated) call for, from ``current``, within the config's bounds."""
    floor = cfg.min_replicas
    ideal = ongoing / cfg.target_ongoing_requests
    if current <= 0:
        desired = math.ceil(ideal)
    else:
        desired = math.ceil(round(current + (ideal - current) * cfg.factor(ideal > current), 9))
    return min(max(desired, floor), cfg.max_replicas)


def decide(cfg: AutoscalingConfig, current: int, total_ongoing: float, now: float, state: ScaleState,
           facts: "Facts | None" = None) -> int:
    """The replica count to run now, given ``total_ongoing`` requests across ``current`` replicas at ``now``.

    The config's custom ``policy`` (given the deployment's ``facts``), or the default one, says what it wants;
    scaling up waits until that has lasted ``upscale_delay_s``, scaling down ``downscale_delay_s``; the result
    stays within ``[min_replicas, max_replicas]``. From zero replicas, any request (queued at a router) starts
    one at once, with no delay (Ray's cold start).
    """
    total = _aggregate(cfg, total_ongoing, now, state)
    if (cold := cold_start(cfg, current, total, state, facts.target if facts else 0)) is not None:
        return cold
    if cfg.policy is not None and facts is not None:
        desired = _custom(cfg, current, total, now, state, facts)
    else:
        desired = wanted(cfg, current, total)
    return _after_delay(cfg, current, desired, now, state)


def cold_start(cfg: AutoscalingConfig, current: int, total: float, state: ScaleState,
               target: int = 0) -> int | None:
    """The count to start at once for a deployment at zero replicas that has requests waiting (as Ray: the
    upscaling factor rounded up, at least the target, within the bounds); None when that does not apply."""
    if current > 0 or total <= 0:
        return None
    state.want_up_since = state.want_down_since = None
    return min(max(math.ceil(cfg.factor(True)), target, cfg.min_replicas, 1), cfg.max_replicas)


@dataclass(frozen=True)
class Facts:
    """What a custom policy's context says of the deployment besides the requests (the controller's view)."""

    app: str
    deployment: str
    target: int
    running: list[str]


def _custom(cfg: AutoscalingConfig, current: int, total: float, now: float, state: ScaleState, facts: Facts) -> int:
    """What the custom policy wants, through the config's factors and bounds, as Ray applies them."""
    assert cfg.policy is not None
    if state.policy is None or state.policy_of != cfg.policy:  # built once (again after a redeploy changed it)
        state.policy, state.policy_of = cfg.policy.load(), cfg.policy
    asked, policy_state = state.policy(_context(cfg, current, total, now, state, facts))
    state.policy_state = dict(policy_state or {})
    return _through_factors(cfg, current, asked)


def _context(cfg: AutoscalingConfig, current: int, total: float, now: float, state: ScaleState,
             facts: Facts) -> AutoscalingContext:
    aggregated, raw = _custom_metrics(cfg, state, now, facts.running)
    return AutoscalingContext(
        deployment_id=DeploymentID(facts.deployment, facts.app), current_num_replicas=current,
        target_num_replicas=facts.target, running_replicas=[ReplicaID._of_tag(r) for r in facts.running],
        total_num_requests=total, capacity_adjusted_min_replicas=cfg.min_replicas,
        capacity_adjusted_max_replicas=cfg.max_replicas, policy_state=dict(state.policy_state),
        last_scale_up_time=state.last_up, last_scale_down_time=state.last_down, current_time=now, config=cfg,
        aggregated_metrics=aggregated, raw_metrics=raw,
    )


def _through_factors(cfg: AutoscalingConfig, current: int, asked: float) -> int:
    """A policy's count moved to by the config's up/downscaling factor, within its bounds (as Ray does)."""
    desired = math.ceil(asked)
    if current > 0 and desired != current:
        scaled = math.ceil(round(current + cfg.factor(desired > current) * (asked - current), 9))
        desired = scaled - 1 if desired < current and scaled == current else scaled  # a factor never stalls a move
    return min(max(desired, cfg.min_replicas), cfg.max_replicas)


@dataclass
class AppPolicy:
    """An application's policy (Ray 2.60's app-level ``autoscaling_policy``), built once on first use."""

    spec: AutoscalingPolicy
    fn: Callable[[dict[DeploymentID, AutoscalingContext]], Any] | None = None


@dataclass(frozen=True)
class Member:
    """One autoscaling deployment of an app with a policy, as the controller sees it this tick."""

    cfg: AutoscalingConfig
    current: int
    ongoing: float | None  # the total of a stats round that just ended; None: none ended since the last call
    state: ScaleState
    facts: Facts


def decide_app(policy: AppPolicy, members: list[Member], now: float) -> dict[str, int]:
    """The replica count to run now for each of ``members`` (by deployment name), as Ray 2.60 applies an
    application-level policy: it gets ``{DeploymentID: AutoscalingContext}`` and returns ``({DeploymentID:
    replicas}, {DeploymentID: state})``; each count then goes through that deployment's factors, bounds and
    delays. A deployment it leaves out keeps its count.

    Raises:
        InvalidArgumentError: it returned something else, or named a deployment that is not one of ``members``.
    """
    if policy.fn is None:
        policy.fn = cast(Callable[[dict[DeploymentID, AutoscalingContext]], Any], policy.spec.load())
    ids = {m.facts.deployment: DeploymentID(m.facts.deployment, m.facts.app) for m in members}
    ctxs = {ids[m.facts.deployment]: _context(m.cfg, m.current, _aggregate(m.cfg, m.ongoing, now, m.state), now,
                                              m.state, m.facts) for m in members}
    out = policy.fn(ctxs)
    decisions, states = out if isinstance(out, tuple) and len(out) == 2 else (out, None)
    if not isinstance(decisions, dict) or any(k not in ctxs for k in decisions) \
            or not isinstance(states or {}, dict):
        raise InvalidArgumentError(
            f"application autoscaling policy {policy.spec.policy_function!r} returned {out!r}; return "
            f"({{DeploymentID: replicas}}, {{DeploymentID: state dict}}) keyed by the ctx dict's keys {list(ctxs)}.")
    wants = {}
    for m in members:
        dep = ids[m.facts.deployment]
        m.state.policy_state = dict((states or {}).get(dep) or {})
        cold = cold_start(m.cfg, m.current, _aggregate(m.cfg, None, now, m.state), m.state, m.facts.target)
        if cold is not None:
            wants[m.facts.deployment] = cold
        elif dep in decisions:
            desired = _through_factors(m.cfg, m.current, decisions[dep])
            wants[m.facts.deployment] = _after_delay(m.cfg, m.current, desired, now, m.state)
    return wants


def _after_delay(cfg: AutoscalingConfig, current: int, desired: int, now: float, state: ScaleState) -> int:
    """``desired`` once it has been wanted for the up- or downscale delay without a break, else ``current``."""
    if desired > current:
        state.want_down_since = None
        if state.want_up_since is None:
            state.want_up_since = now
        if now - state.want_up_since >= cfg.upscale_delay_s:
            state.want_up_since, state.last_up = None, now
            return desired
        return current
    if desired < current:
        state.want_up_since = None
        if state.want_down_since is None:
            state.want_down_since = now
        delay = cfg.downscale_delay_s
        if current > 1:
            desired = max(desired, 1)  # to zero only from one replica (as Ray)
        elif cfg.downscale_to_zero_delay_s is not None:
            delay = cfg.downscale_to_zero_delay_s
        if now - state.want_down_since >= delay:
            state.want_down_since, state.last_down = None, now
            return desired
        return current
    state.want_up_since = state.want_down_since = None
    return current
