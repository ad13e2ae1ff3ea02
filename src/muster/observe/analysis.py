"""Pure functions over a run's recorded figures: which workers straggle, and why.

A rank straggles when its typical step takes clearly longer than the other
ranks' (``SLOWER_BY`` times their median, and at least ``MIN_GAP_S`` more).
In synchronous data parallel training every rank's step ends at the same
all-reduce, so step times even out; the slow rank then shows instead as the
one whose *data wait* stands out while its peers wait in the collective.
Both are flagged, with the reason.
"""

from __future__ import annotations

import statistics
from typing import Any, Mapping, Sequence

SLOWER_BY = 1.25
MIN_GAP_S = 0.02
WINDOW = 20  # the most recent reports of each rank that count
MIN_REPORTS = 3  # fewer than this per rank is too little to judge


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def straggler_report(per_rank: Mapping[int, Sequence[tuple[float | None, float | None]]]) -> dict[int, dict[str, Any]]:
    """Per rank: median step time, data wait and compute of its recent reports, and a verdict.

    Args:
        per_rank: rank -> its reports' ``(step_s, data_wait_s)`` in order (``None`` where unknown).

    Returns:
        rank -> ``{"step_s", "data_wait_s", "compute_s", "data_share", "straggler", "reason"}``.
    """
    typical: dict[int, tuple[float, float]] = {}
    counts: dict[int, int] = {}
    for rank, rows in per_rank.items():
        recent = [(s, w or 0.0) for s, w in list(rows)[-WINDOW:] if s is not None]
        counts[rank] = len(recent)
        typical[rank] = (_median([s for s, _ in recent]), _median([w for _, w in recent]))
    out: dict[int, dict[str, Any]] = {}
    for rank, (step, wait) in typical.items():
        others = [v for r, v in typical.items() if r != rank]
        base_step = _median([s for s, _ in others])
        base_wait = _median([w for _, w in others])
        reason = ""
        judged = bool(others) and counts[rank] >= MIN_REPORTS
        if judged and step > SLOWER_BY * base_step and step - base_step >= MIN_GAP_S:
            reason = f"steps take {step / base_step if base_step else float('inf'):.1f}x the other ranks' median"
        elif judged and wait > SLOWER_BY * base_wait and wait - base_wait >= MIN_GAP_S:
            reason = f"waits {wait:.3g} s per step on data, the other ranks {base_wait:.3g} s"
        out[rank] = {
            "step_s": step,
            "data_wait_s": wait,
            "compute_s": max(step - wait, 0.0),
            "data_share": wait / step if step > 0 else 0.0,
            "straggler": bool(reason),
            "reason": reason,
        }
    return out
