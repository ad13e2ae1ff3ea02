"""The autoscaling policy: a pure function from what was observed to a replica count.

As Ray Serve's default policy: the ongoing requests of all replicas,
sampled every ``metrics_interval_s``, are aggregated (``aggregation_function``)
over the last ``look_back_period_s``; the wanted count moves from the current
one toward ``aggregate / target_ongoing_requests`` by the smoothing factor;
and a change happens once it has been wanted for ``upscale_delay_s`` (or
``downscale_delay_s``) without a break.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field

from muster.serve.config import AutoscalingConfig

_MAX_SAMPLES = 100_000  # a bound on the window's memory, whatever look_back_period_s / metrics_interval_s are


@dataclass
class ScaleState:
    """What the policy remembers between ticks: the samples in its window, and since when it has wanted more,
    or fewer, replicas."""

    want_up_since: float | None = None
    want_down_since: float | None = None
    samples: collections.deque = field(default_factory=lambda: collections.deque(maxlen=_MAX_SAMPLES))


def _aggregate(cfg: AutoscalingConfig, total_ongoing: float, now: float, state: ScaleState) -> float:
    samples = state.samples
    samples.append((now, total_ongoing))
    while samples and samples[0][0] < now - cfg.look_back_period_s:
        samples.popleft()
    values = [v for _, v in samples]
    if cfg.aggregation_function == "max":
        return max(values)
    if cfg.aggregation_function == "min":
        return min(values)
    return sum(values) / len(values)


def wanted(cfg: AutoscalingConfig, current: int, ongoing: float) -> int:
    """The count ``ongoing`` requests (aggregated) call for, from ``current``, within the config's bounds."""
    floor = max(cfg.min_replicas, 1)
    ideal = ongoing / cfg.target_ongoing_requests
    if current <= 0:
        desired = math.ceil(ideal)
    else:
        desired = math.ceil(round(current + (ideal - current) * cfg.factor(ideal > current), 9))
    return min(max(desired, floor), cfg.max_replicas)


def decide(cfg: AutoscalingConfig, current: int, total_ongoing: float, now: float, state: ScaleState) -> int:
    """The replica count to run now, given ``total_ongoing`` requests across ``current`` replicas at ``now``.

    Scaling up waits until the need has lasted ``upscale_delay_s``, scaling
    down ``downscale_delay_s``; the result stays within
    ``[max(min_replicas, 1), max_replicas]``.
    """
    desired = wanted(cfg, current, _aggregate(cfg, total_ongoing, now, state))
    if desired > current:
        state.want_down_since = None
        if state.want_up_since is None:
            state.want_up_since = now
        if now - state.want_up_since >= cfg.upscale_delay_s:
            state.want_up_since = None
            return desired
        return current
    if desired < current:
        state.want_up_since = None
        if state.want_down_since is None:
            state.want_down_since = now
        if now - state.want_down_since >= cfg.downscale_delay_s:
            state.want_down_since = None
            return desired
        return current
    state.want_up_since = state.want_down_since = None
    return current
