"""``GroupedData``: what ``Dataset.groupby(key)`` returns."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from muster.data import alltoall
from muster.data import block as blk
from muster.data.plan import AllToAll, RayCall

if TYPE_CHECKING:
    from muster.data.dataset import Dataset


class GroupedData:
    """Rows grouped by one or more key columns; each method returns a new ``Dataset``."""

    def __init__(self, dataset: "Dataset", keys: list[str]):
        self._ds, self._keys = dataset, keys

    def _agg(self, aggs: list[tuple[str, str, str]]) -> "Dataset":
        name = f"Aggregate({', '.join(n for _, _, n in aggs)})"
        kinds = {kind for _, kind, _ in aggs}
        cols = [c for c, _, _ in aggs]
        # ray.data: groupby(keys or None) then one aggregation over the columns (same output names)
        ray = self._ray().then(aggs[0][1], *([] if kinds == {"count"} else [cols if len(cols) > 1 else cols[0]]))
        return self._ds._then(AllToAll(name, alltoall.aggregate(self._keys, aggs), ray=ray))

    def _ray(self) -> RayCall:
        return RayCall.of("groupby", (self._keys if len(self._keys) > 1 else self._keys[0]) if self._keys else None)

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
        ray = self._ray().then("map_groups", fn, batch_format=fmt)
        return self._ds._then(AllToAll("MapGroups", alltoall.map_groups(self._keys, fn, fmt), ray=ray))
