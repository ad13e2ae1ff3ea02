"""``GroupedData``: what ``Dataset.groupby(key)`` returns."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from muster.data import alltoall
from muster.data import block as blk
from muster.data.plan import AllToAll

if TYPE_CHECKING:
    from muster.data.dataset import Dataset


class GroupedData:
    """Rows grouped by one or more key columns; each method returns a new ``Dataset``."""

    def __init__(self, dataset: "Dataset", keys: list[str]):
        self._ds, self._keys = dataset, keys

    def _agg(self, aggs: list[tuple[str, str, str]]) -> "Dataset":
        name = f"Aggregate({', '.join(n for _, _, n in aggs)})"
        return self._ds._then(AllToAll(name, alltoall.aggregate(self._keys, aggs)))

    def count(self) -> "Dataset":
        """One row per group: the keys and ``count()``."""
        return self._agg([("", "count", "count()")])

    def sum(self, on: str | list[str]) -> "Dataset":
        """One row per group: the keys and ``sum(<col>)`` for each column in ``on``."""
        cols = [on] if isinstance(on, str) else list(on)
        return self._agg([(c, "sum", f"sum({c})") for c in cols])

    def mean(self, on: str | list[str]) -> "Dataset":
        """One row per group: the keys and ``mean(<col>)`` for each column in ``on``."""
        cols = [on] if isinstance(on, str) else list(on)
        return self._agg([(c, "mean", f"mean({c})") for c in cols])

    def min(self, on: str) -> "Dataset":
        return self._agg([(on, "min", f"min({on})")])

    def max(self, on: str) -> "Dataset":
        return self._agg([(on, "max", f"max({on})")])

    def map_groups(self, fn: Callable[[Any], Any], *, batch_format: str = "numpy") -> "Dataset":
        """Apply ``fn`` to each group (a batch in ``batch_format``); its outputs form the new dataset."""
        fmt = blk.check_batch_format(batch_format, "map_groups")
        return self._ds._then(AllToAll("MapGroups", alltoall.map_groups(self._keys, fn, fmt)))
