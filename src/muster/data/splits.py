"""``Dataset``'s splits (Ray's ``split``, ``split_at_indices``, ``split_proportionately``,
``train_test_split``, ``streaming_split``): materialized parts, or iterators that stream shards."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa

from muster.data import _ray_plan, combine
from muster.data.iterator import DataIterator
from muster.exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from muster.data.dataset import Dataset, MaterializedDataset


def _positive(value: Any, name: str, where: str) -> None:
    if value is not None and (not isinstance(value, int) or value < 1):
        raise InvalidArgumentError(f"{where}({name}={value!r}): use a positive integer or None.")


def from_blocks(blocks: list[pa.Table]) -> "MaterializedDataset":
    """``dataset.from_blocks`` (imported when called: ``dataset`` builds on this module)."""
    from muster.data.dataset import from_blocks as make

    return make(blocks)


class Splits:
    """The split methods of ``Dataset``, which defines what they use."""

    if TYPE_CHECKING:
        def to_arrow(self) -> pa.Table: ...

        def count(self) -> int: ...

        def materialize(self) -> MaterializedDataset: ...

        def random_shuffle(self, *, seed: Any = None) -> Dataset: ...

    def split(self, n: int, *, equal: bool = False, locality_hints: Any = None) -> list["Dataset"]:
        """``n`` materialized parts, in order; ``equal=True`` drops the remainder so all have the same rows."""
        _positive(n, "n", "split")
        table = self.to_arrow()
        per = table.num_rows // n
        if equal:
            return [from_blocks([table.slice(i * per, per)]) for i in range(n)]
        bounds = np.linspace(0, table.num_rows, n + 1).astype(int)
        return [from_blocks([table.slice(int(a), int(b - a))]) for a, b in zip(bounds[:-1], bounds[1:])]

    def split_at_indices(self, indices: list[int]) -> list["Dataset"]:
        if any(b < a for a, b in zip(indices, indices[1:])) or any(i < 0 for i in indices):
            raise InvalidArgumentError(f"split_at_indices({indices!r}): indices must be >= 0 and sorted.")
        table = self.to_arrow()
        edges = [0, *[min(i, table.num_rows) for i in indices], table.num_rows]
        return [from_blocks([table.slice(a, b - a)]) for a, b in zip(edges[:-1], edges[1:])]

    def split_proportionately(self, proportions: list[float]) -> list["Dataset"]:
        """``len(proportions) + 1`` parts in order: each given fraction of the rows, then the rest."""
        if not proportions or any(not 0 < p < 1 for p in proportions) or sum(proportions) >= 1:
            raise InvalidArgumentError(
                f"split_proportionately({proportions!r}): pass fractions in (0, 1) that sum to less than 1 "
                "(the last part takes the rest)."
            )
        n = self.count()
        edges = np.cumsum([int(p * n) for p in proportions]).tolist()
        return self.materialize().split_at_indices(edges)

    def train_test_split(self, test_size: float | int, *, shuffle: bool = False, seed: int | None = None,
                         stratify: str | None = None) -> tuple["Dataset", "Dataset"]:
        """``(train, test)``: the last ``test_size`` (a fraction, or a row count) of the rows go to test.

        ``stratify``: split each value of that column alike, so both parts keep its proportions.
        """
        ds = self.random_shuffle(seed=seed) if shuffle else self
        if stratify is not None:
            train_rows, test_rows = combine.stratified_split(ds.to_arrow(), test_size, stratify)
            return from_blocks([train_rows]), from_blocks([test_rows])
        n = ds.count()
        share = combine.test_share(test_size, n)
        cut = n - (test_size if isinstance(test_size, int) else int(np.ceil(n * share)))
        train, test = ds.materialize().split_at_indices([cut])
        return train, test

    def streaming_split(self, n: int, *, equal: bool = True, locality_hints: Any = None) -> list[DataIterator]:
        """``n`` iterators; iterator ``i`` streams rows ``i, i+n, ...`` of each pass (see ``DataIterator``)."""
        _positive(n, "n", "streaming_split")
        if _ray_plan.on_ray_engine():
            return _ray_plan.streaming_split(cast("Dataset", self), n, equal, locality_hints)
        return [DataIterator(cast("Dataset", self), i, n, equal) for i in range(n)]
