"""Ray's binning preprocessors: ``UniformKBinsDiscretizer`` (equal-width bins over the fitted range)
and ``CustomKBinsDiscretizer`` (bin edges you give). Both put each value's bin index (``pandas.cut``)
in its column."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from muster.data.aggregate import Max, Min
from muster.data.preprocessor import ColumnsPreprocessor, Preprocessor, check_present
from muster.data.preprocessors.version_support import SerializablePreprocessor
from muster.exceptions import InvalidArgumentError, InvalidTypeError

if TYPE_CHECKING:
    from muster.data.dataset import Dataset


class _KBinsDiscretizer(ColumnsPreprocessor):
    def __init__(self, columns: list[str], bins: Any, *, right: bool = True, include_lowest: bool = False,
                 duplicates: str = "raise", dtypes: dict[str, Any] | None = None,
                 output_columns: list[str] | None = None):
        super().__init__(columns, output_columns)
        name = type(self).__name__
        if isinstance(bins, dict) and any(c not in bins for c in self._columns):
            raise InvalidArgumentError(f"{name}(bins={bins!r}): bins is a dict, so give bins for every column of "
                                       f"{self._columns!r}.")
        if duplicates not in ("raise", "drop"):
            raise InvalidArgumentError(f"{name}(duplicates={duplicates!r}): use 'raise' or 'drop'.")
        self._bins, self._right, self._include_lowest = bins, right, include_lowest
        self._duplicates, self._dtypes = duplicates, dtypes

    bins = property(lambda self: self._bins)
    right = property(lambda self: self._right)
    include_lowest = property(lambda self: self._include_lowest)
    duplicates = property(lambda self: self._duplicates)
    dtypes = property(lambda self: self._dtypes)

    def _edges(self, column: str) -> Any:
        return self._bins[column] if isinstance(self._bins, dict) else self._bins

    def _transform_pandas(self, df: Any) -> Any:
        import pandas as pd

        for column, out in zip(self._columns, self._output_columns):
            labels: Any = False
            ordered = True
            dtype = (self._dtypes or {}).get(column)
            if isinstance(dtype, pd.CategoricalDtype):
                labels, ordered = list(dtype.categories), bool(dtype.ordered)
            binned = pd.cut(df[column], self._edges(column), right=self._right, labels=labels, ordered=ordered,
                            include_lowest=self._include_lowest, duplicates=self._duplicates)
            if dtype is not None and not isinstance(dtype, pd.CategoricalDtype):
                binned = binned.astype(dtype)
            df[out] = binned
        return df

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(columns={self._columns!r}, bins={self._bins!r}, right={self._right!r}, "
                f"include_lowest={self._include_lowest!r}, duplicates={self._duplicates!r}, "
                f"dtypes={self._dtypes!r}, output_columns={self._output_columns!r})")


@SerializablePreprocessor(version=1, identifier="io.muster.preprocessors.custom_k_bins_discretizer")
class CustomKBinsDiscretizer(_KBinsDiscretizer):
    """Bins with the edges given (``bins=[0, 1, 5, 10]``, a ``pandas.IntervalIndex``, or a dict of them
    per column); nothing to fit."""

    _is_fittable = False


@SerializablePreprocessor(version=1, identifier="io.muster.preprocessors.uniform_k_bins_discretizer")
class UniformKBinsDiscretizer(_KBinsDiscretizer):
    """``bins`` equal-width bins (an int, or ``{col: int}``) between each column's fitted min and max
    (the lowest edge moved down by 0.1% of the range so the min falls in the first bin, as in Ray).
    ``stats_``: ``{col: bin edges}``."""

    def __init__(self, columns: list[str], bins: int | dict[str, int], **options: Any):
        super().__init__(columns, bins, **options)
        counts = bins.values() if isinstance(bins, dict) else [bins]
        if not all(isinstance(b, int) and b > 0 for b in counts):
            raise InvalidTypeError(f"UniformKBinsDiscretizer(bins={bins!r}): pass a positive integer, or a dict of "
                                   "them per column.")

    def _fit(self, ds: "Dataset") -> Preprocessor:
        check_present(f"{self!r}.fit", ds, self._columns)
        ends = ds.aggregate(*[Min(c) for c in self._columns], *[Max(c) for c in self._columns])
        for c in self._columns:
            low, high = ends[f"min({c})"], ends[f"max({c})"]
            if low is None or high is None:
                raise InvalidArgumentError(f"{self!r}.fit: column {c!r} has no values to bin; fit on data with some.")
            self.stats_[c] = _uniform_edges(float(low), float(high), self._bins[c] if isinstance(self._bins, dict)
                                            else self._bins, self._right)
        return self

    def _edges(self, column: str) -> Any:
        return self.stats_[column]


def _uniform_edges(low: float, high: float, bins: int, right: bool) -> np.ndarray:
    if np.isinf(low) or np.isinf(high):
        raise InvalidArgumentError("UniformKBinsDiscretizer: a column holds infinity, so equal-width bins cannot be "
                                   "made; filter it out or use CustomKBinsDiscretizer with your own edges.")
    if low == high:  # one value: a small range around it
        pad = 0.001 * abs(low) if low != 0 else 0.001
        return np.linspace(low - pad, high + pad, bins + 1)
    edges = np.linspace(low, high, bins + 1)
    if right:
        edges[0] -= (high - low) * 0.001
    else:
        edges[-1] += (high - low) * 0.001
    return edges


__all__ = ["CustomKBinsDiscretizer", "UniformKBinsDiscretizer"]
