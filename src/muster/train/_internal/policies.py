"""Pure decisions the controller acts on: no I/O, no processes.

Kept apart so they can be tested exhaustively with plain values.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

from muster.exceptions import ResourcesUnavailableError, StorageNotSharedError


class Decision(enum.Enum):
    RETRY = "retry"
    RAISE = "raise"


def on_failure(max_failures: int, failures_so_far: int, retryable: bool = True) -> Decision:
    """After the ``failures_so_far``-th failure (counting this one), retry or give up?
    ``retryable=False``: a restart would fail the same way (storage a worker cannot see)."""
    if not retryable:
        return Decision.RAISE
    if max_failures == -1 or failures_so_far <= max_failures:
        return Decision.RETRY
    return Decision.RAISE


def retryable(error: BaseException) -> bool:
    """Whether a restart could help: not where a worker found the run's storage invisible from its node,
    or a resource it was given unusable (a GPU under a torch built without CUDA)."""
    final = (StorageNotSharedError, ResourcesUnavailableError)
    return not (isinstance(getattr(error, "cause", None), final) or isinstance(error, final))


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


#: How many rounds a reporting rank may fall behind the leading rank before a warning names it.
LAG_ROUNDS = 3
#: How many rounds into an attempt the leading rank must be, with some ranks that have not
#: entered ``report()`` once, before those are taken for ranks that never report (the
#: ``if rank == 0: report(...)`` pattern).  Large on purpose: a slow rank mistaken for a
#: silent one would make partial checkpoints; a silent one mistaken for a slow one only
#: delays commits.  A rank's first ``report()`` is always the attempt's first round.
SILENT_ROUNDS = 10


def expected_reporters(
    world_size: int, reporters: frozenset[int] | None, finished_at: dict[int, int], round_: int
) -> frozenset[int]:
    """The ranks whose report of ``round_`` its checkpoint must hold.

    ``reporters``: the ranks known to report (``None`` while not known: then
    every rank).  A rank that finished its loop after reporting round
    ``finished_at[rank]`` reports nothing later, so it is not waited for.
    """
    ranks = frozenset(range(world_size)) if reporters is None else reporters
    return frozenset(r for r in ranks if finished_at.get(r, round_) >= round_)


def round_ready(
    reported: set[int],
    world_size: int,
    reporters: frozenset[int] | None,
    round_: int,
    finished_at: dict[int, int] | None = None,
) -> bool:
    """May round ``round_`` be committed now?  Only when every expected rank reported it.

    There is no clock in this rule: a slow rank delays the commit of its
    rounds, it never makes a round commit without it.  ``report()`` itself
    never waits for other ranks, so a slow rank holds nothing up but the
    commit.
    """
    expected = expected_reporters(world_size, reporters, finished_at or {}, round_)
    return bool(reported) and expected <= reported


def settle_reporters(
    world_size: int, last_round: dict[int, int], start_round: int, finished: set[int], lag: int = SILENT_ROUNDS
) -> frozenset[int] | None:
    """Which ranks report, once that can be told from the reports alone (else ``None``).

    ``last_round``: each rank that has reported in this attempt -> its latest
    round.  Known when every rank has reported; or when every rank that has
    not is finished; or when the leading rank is more than ``lag`` rounds
    into the attempt and some ranks have still reported nothing (they never
    will: a rank's first report is always the attempt's first round).
    """
    seen = frozenset(last_round)
    if len(seen) >= world_size or (set(range(world_size)) - seen) <= finished:
        return seen
    if seen and max(last_round.values()) - start_round > lag:
        return seen
    return None


def behind(
    last_round: dict[int, int], reporters: frozenset[int], start_round: int, lag: int = LAG_ROUNDS
) -> list[int]:
    """Reporting ranks ``lag`` or more rounds behind the leading rank (one that has not
    reported in this attempt yet stands at ``start_round``)."""
    if not last_round:
        return []
    lead = max(last_round.values())
    return sorted(r for r in reporters if lead - last_round.get(r, start_round) >= lag)


# -- elastic runs -------------------------------------------------------------------
def elastic_size(min_workers: int, max_workers: int, fit_now: int) -> int:
    """How many workers the next gang of an elastic run asks for: as many as fit now,
    within ``[min, max]`` (below ``min`` it asks for ``min`` and waits)."""
    return max(min_workers, min(max_workers, fit_now))


def should_grow(size: int, max_workers: int, fit_more: int, checkpoint_since_start: bool) -> bool:
    """Grow a running elastic gang? Only when it is below ``max``, more workers fit now,
    and a checkpoint committed during this attempt keeps the restart's lost work small."""
    return size < max_workers and fit_more >= 1 and checkpoint_since_start
