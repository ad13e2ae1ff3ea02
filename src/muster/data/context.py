"""``ray.data.context``: ``DataContext`` (muster.data's) and ``ShuffleStrategy``, for scripts that
import them from here."""

from __future__ import annotations

import enum
from typing import Any

from muster.data.execution import DataContext


class ShuffleStrategy(str, enum.Enum):
    """Ray's names for its cluster shuffle algorithms. ``DataContext.shuffle_strategy`` keeps the one a
    script sets and nothing here reads it: every shuffle, sort and keyed ``repartition`` gathers its input
    in this process whatever the strategy (Ray runs ``repartition(keys=)`` only under ``HASH_SHUFFLE``,
    ``SHUFFLE_V2`` or ``GPU_SHUFFLE``)."""

    SORT_SHUFFLE_PULL_BASED = "sort_shuffle_pull_based"
    SORT_SHUFFLE_PUSH_BASED = "sort_shuffle_push_based"
    HASH_SHUFFLE = "hash_shuffle"
    SHUFFLE_V2 = "shuffle_v2"
    GPU_SHUFFLE = "gpu_shuffle"


def __getattr__(name: str) -> Any:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.data.context", name)


__all__ = ["DataContext", "ShuffleStrategy"]
