"""The autoscaling policy: a pure function from what was observed to a replica count."""

from __future__ import annotations

import math
from dataclasses import dataclass

from muster.serve.config import AutoscalingConfig


@dataclass
class ScaleState:
    """What the policy remembers between ticks: since when it has wanted more, or fewer, replicas."""

    want_up_since: float | None = None
    want_down_since: float | None = None


def decide(cfg: AutoscalingConfig, current: int, total_ongoing: float, now: float, state: ScaleState) -> int:
    """The replica count to run now, given ``total_ongoing`` requests across ``current`` replicas.

    Scaling up waits until the need has lasted ``upscale_delay_s``, scaling
    down ``downscale_delay_s``; the result stays within
    ``[max(min_replicas, 1), max_replicas]``.
    """
    floor = max(cfg.min_replicas, 1)
    desired = math.ceil(total_ongoing / cfg.target_ongoing_requests) if total_ongoing > 0 else floor
    desired = min(max(desired, floor), cfg.max_replicas)
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
