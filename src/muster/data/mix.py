"""``Dataset.mix``: blocks of several datasets interleaved, streaming, so that the rows drawn from each
keep to given weights (Ray's ``mix`` and ``MixStoppingCondition``)."""

from __future__ import annotations

import enum
from typing import Any, Iterator

import pyarrow as pa

from muster.exceptions import InvalidArgumentError


class MixStoppingCondition(enum.Enum):
    """When a mix ends: ``STOP_ON_SHORTEST``, as soon as one input has given its last block (the others
    are cut short); ``STOP_ON_LONGEST_DROP`` (the default), when every input has, each dropping out as it
    ends so the last blocks all come from the longer ones."""

    STOP_ON_SHORTEST = "stop_on_shortest"
    STOP_ON_LONGEST_DROP = "stop_on_longest_drop"


def check(weights: Any, inputs: int, stopping_condition: Any) -> tuple[tuple[float, ...], bool]:
    """The weights, summing to 1 (one each when None), and whether the mix stops on its shortest input."""
    weights = [1.0] * inputs if weights is None else weights
    if (not isinstance(weights, (list, tuple)) or len(weights) != inputs
            or not all(isinstance(w, (int, float)) and not isinstance(w, bool) and w > 0 for w in weights)):
        raise InvalidArgumentError(f"mix(weights={weights!r}): give {inputs} positive numbers, one per dataset "
                                   "(this one first), or None for equal weights.")
    condition = MixStoppingCondition(getattr(stopping_condition, "value", stopping_condition)) \
        if stopping_condition in (*MixStoppingCondition, *(c.value for c in MixStoppingCondition)) else None
    if condition is None:
        raise InvalidArgumentError(f"mix(stopping_condition={stopping_condition!r}): use a MixStoppingCondition "
                                   "(STOP_ON_SHORTEST or STOP_ON_LONGEST_DROP).")
    total = float(sum(weights))
    return tuple(w / total for w in weights), condition is MixStoppingCondition.STOP_ON_SHORTEST


def mix_blocks(streams: list[Iterator[pa.Table]], weights: tuple[float, ...],
               stop_on_shortest: bool) -> Iterator[pa.Table]:
    """Whole blocks of ``streams``, each next one from the input furthest behind its share of the rows
    given so far (ties: the larger weight, then the earlier input), as Ray's mix operator picks; an input
    is known to have ended as soon as its last block is taken (each stream is read one block ahead)."""
    ahead = [_next(s) for s in streams]
    given = [0] * len(streams)
    while not (stop_on_shortest and any(b is None for b in ahead)):
        total = sum(given)
        live = [i for i, b in enumerate(ahead) if b is not None]
        if not live:
            return
        i = max(live, key=lambda j: (weights[j] * total - given[j], weights[j], -j))
        block = ahead[i]
        assert block is not None
        given[i] += block.num_rows
        ahead[i] = _next(streams[i])
        yield block


def _next(stream: Iterator[pa.Table]) -> pa.Table | None:
    """The stream's next block with rows (None once it has ended)."""
    return next((b for b in stream if b.num_rows), None)
