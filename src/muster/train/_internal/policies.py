"""Pure decisions the controller acts on: no I/O, no processes.

Kept apart so they can be tested exhaustively with plain values.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any


class Decision(enum.Enum):
    RETRY = "retry"
    RAISE = "raise"


def on_failure(max_failures: int, failures_so_far: int) -> Decision:
    """After the ``failures_so_far``-th failure (counting this one), retry or give up?"""
    if max_failures == -1 or failures_so_far <= max_failures:
        return Decision.RETRY
    return Decision.RAISE


@dataclass(frozen=True)
class CheckpointRecord:
    round: int
    path: str
    metrics: dict[str, Any]


def score_of(record: CheckpointRecord, attribute: str | None) -> float | None:
    if attribute is None:
        return None
    value: Any = record.metrics
    for part in attribute.split("/"):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def rank_best(records: list[CheckpointRecord], attribute: str | None, order: str) -> list[CheckpointRecord]:
    """Best first. Without an attribute, newest is best; records lacking the score go last."""
    if attribute is None:
        return sorted(records, key=lambda r: -r.round)
    sign = -1.0 if order == "max" else 1.0
    scored = [r for r in records if score_of(r, attribute) is not None]
    unscored = [r for r in records if score_of(r, attribute) is None]
    scored.sort(key=lambda r: (sign * score_of(r, attribute), -r.round))  # type: ignore[operator]
    return scored + sorted(unscored, key=lambda r: -r.round)


def to_delete(
    records: list[CheckpointRecord], num_to_keep: int | None, attribute: str | None, order: str
) -> list[CheckpointRecord]:
    """Which committed checkpoints retention removes: keep the best ``num_to_keep`` and the latest."""
    if num_to_keep is None or len(records) <= num_to_keep:
        return []
    latest = max(records, key=lambda r: r.round)
    keep = set(r.round for r in rank_best(records, attribute, order)[:num_to_keep])
    keep.add(latest.round)
    return [r for r in records if r.round not in keep]


def round_ready(
    reported: set[int],
    world_size: int,
    usual_reporters: frozenset[int] | None,
    newest_round_seen: int,
    round_: int,
    age_s: float = math.inf,
    grace_s: float = 2.0,
) -> bool:
    """May report round ``round_`` be closed (its checkpoint committed) now?

    ``report()`` never waits for other ranks, so the controller cannot know
    whether a rank that has not reported yet ever will.  A round is closed as
    soon as (a) every rank has reported it, or (b) the ranks that reported the
    last closed round have all reported it (the ``rank == 0`` pattern closes
    at once after its first round); or, failing those, (c) some rank already
    reported a later round and the round has been open ``grace_s`` seconds.
    The grace matters where ranks are not in step (no collective between
    their reports): a rank still uploading its files is not left out because
    a faster rank moved on.  The end of an attempt closes every open round.
    """
    if len(reported) >= world_size:
        return True
    if usual_reporters and usual_reporters <= reported:
        return True
    return newest_round_seen > round_ and age_s >= grace_s


# -- elastic runs -------------------------------------------------------------------
def elastic_size(min_workers: int, max_workers: int, fit_now: int) -> int:
    """How many workers the next gang of an elastic run asks for: as many as fit now,
    within ``[min, max]`` (below ``min`` it asks for ``min`` and waits)."""
    return max(min_workers, min(max_workers, fit_now))


def should_grow(size: int, max_workers: int, fit_more: int, checkpoint_since_start: bool) -> bool:
    """Grow a running elastic gang? Only when it is below ``max``, more workers fit now,
    and a checkpoint committed during this attempt keeps the restart's lost work small."""
    return size < max_workers and fit_more >= 1 and checkpoint_since_start
