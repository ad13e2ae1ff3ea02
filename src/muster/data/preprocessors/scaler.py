"""Ray's scalers: ``StandardScaler``, ``MinMaxScaler``, ``MaxAbsScaler``, ``RobustScaler``.

Each scales every column of ``columns`` on its own with statistics ``fit`` computes (muster's
``Mean``/``Std``/``Min``/``Max`` aggregations; ``RobustScaler``'s quantiles from one pass over the
columns). Results are float64; they replace the input columns unless ``output_columns`` names others.
A statistic that is None (the column held no values) makes that output all NaN, as in Ray.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from muster.data.aggregate import Max, Mean, Min, Std
from muster.data.preprocessor import ColumnsPreprocessor, Preprocessor, check_present
from muster.data.preprocessors.version_support import SerializablePreprocessor
from muster.exceptions import InvalidArgumentError, InvalidTypeError

if TYPE_CHECKING:
    from muster.data.dataset import Dataset

_EPSILON = 1e-8  # a spread below this divides by 1 (a constant column is only shifted), as in Ray


class _ColumnScaler(ColumnsPreprocessor):
    """Scales each column as ``(x - center) / scale`` from its fitted statistics."""

    def _center_and_scale(self, column: str) -> tuple[float, float] | None:
        raise NotImplementedError

    def _transform_pandas(self, df: Any) -> Any:
        for column, out in zip(self._columns, self._output_columns):
            fitted = self._center_and_scale(column)
            if fitted is None:
                df[out] = np.nan
            else:
                df[out] = (df[column].astype("float64") - fitted[0]) / fitted[1]
        return df

    def __repr__(self) -> str:
        return f"{type(self).__name__}(columns={self._columns!r}, output_columns={self._output_columns!r})"


def _spread(value: float) -> float:
    return 1.0 if value < _EPSILON else float(value)


@SerializablePreprocessor(version=1, identifier="io.muster.preprocessors.standard_scaler")
class StandardScaler(_ColumnScaler):
    """``(x - mean) / std`` per column (the population std, ``ddof=0``; a constant column is only
    centered). ``stats_``: ``{"mean(col)": ..., "std(col)": ...}``. Computes in Arrow, as Ray's does."""

    def _fit(self, ds: "Dataset") -> Preprocessor:
        check_present(f"{self!r}.fit", ds, self._columns)
        self.stats_ = ds.aggregate(*[Mean(c) for c in self._columns], *[Std(c, ddof=0) for c in self._columns])
        return self

    def _center_and_scale(self, column: str) -> tuple[float, float] | None:
        mean, std = self.stats_[f"mean({column})"], self.stats_[f"std({column})"]
        return None if mean is None or std is None else (float(mean), _spread(std))

    def _transform_arrow(self, table: pa.Table) -> pa.Table:
        for column, out in zip(self._columns, self._output_columns):
            fitted = self._center_and_scale(column)
            values = table.column(column)
            if fitted is None:
                scaled = pa.array(np.full(len(values), np.nan))
            else:
                scaled = pc.divide(pc.subtract(pc.cast(values, pa.float64()), fitted[0]), fitted[1])
            table = _upsert(table, out, scaled)
        return table

    @classmethod
    def preferred_batch_format(cls) -> str:
        return "pyarrow"


def _upsert(table: pa.Table, name: str, values: Any) -> pa.Table:
    if name in table.column_names:
        return table.set_column(table.column_names.index(name), name, values)
    return table.append_column(name, values)


@SerializablePreprocessor(version=1, identifier="io.muster.preprocessors.min_max_scaler")
class MinMaxScaler(_ColumnScaler):
    """``(x - min) / (max - min)`` per column, into [0, 1] (a constant column becomes 0).
    ``stats_``: ``{"min(col)": ..., "max(col)": ...}``."""

    def _fit(self, ds: "Dataset") -> Preprocessor:
        check_present(f"{self!r}.fit", ds, self._columns)
        self.stats_ = ds.aggregate(*[Min(c) for c in self._columns], *[Max(c) for c in self._columns])
        return self

    def _center_and_scale(self, column: str) -> tuple[float, float] | None:
        low, high = self.stats_[f"min({column})"], self.stats_[f"max({column})"]
        return None if low is None or high is None else (float(low), _spread(high - low))


@SerializablePreprocessor(version=1, identifier="io.muster.preprocessors.max_abs_scaler")
class MaxAbsScaler(_ColumnScaler):
    """``x / max(|x|)`` per column, into [-1, 1] (an all-zero column is left as zeros; sparse data
    stays sparse). ``stats_``: ``{"abs_max(col)": ...}``."""

    def _fit(self, ds: "Dataset") -> Preprocessor:
        check_present(f"{self!r}.fit", ds, self._columns)
        ends = ds.aggregate(*[Min(c) for c in self._columns], *[Max(c) for c in self._columns])
        for c in self._columns:
            low, high = ends[f"min({c})"], ends[f"max({c})"]
            self.stats_[f"abs_max({c})"] = None if low is None or high is None else max(abs(low), abs(high))
        return self

    def _center_and_scale(self, column: str) -> tuple[float, float] | None:
        top = self.stats_[f"abs_max({column})"]
        return None if top is None else (0.0, 1.0 if top == 0 else float(top))


@SerializablePreprocessor(version=1, identifier="io.muster.preprocessors.robust_scaler")
class RobustScaler(_ColumnScaler):
    """``(x - median) / (high quantile - low quantile)`` per column: robust to outliers. A column whose
    quantiles are equal becomes 0. ``stats_``: ``{"low_quantile(col)", "median(col)", "high_quantile(col)"}``.

    The quantiles are exact (numpy's linear interpolation over every value of the column, gathered in
    one pass); Ray's are approximate (a sketch of ``quantile_precision``, accepted and unused here).
    """

    DEFAULT_QUANTILE_PRECISION = 800

    def __init__(self, columns: list[str], quantile_range: tuple[float, float] = (0.25, 0.75),
                 output_columns: list[str] | None = None, quantile_precision: int = DEFAULT_QUANTILE_PRECISION):
        super().__init__(columns, output_columns)
        if (not isinstance(quantile_range, (tuple, list)) or len(quantile_range) != 2
                or not all(isinstance(q, (int, float)) for q in quantile_range)):
            raise InvalidTypeError(f"RobustScaler(quantile_range={quantile_range!r}): pass two numbers (low, high), "
                                   "e.g. (0.25, 0.75).")
        if not 0 <= quantile_range[0] < quantile_range[1] <= 1:
            raise InvalidArgumentError(f"RobustScaler(quantile_range={quantile_range!r}): use 0 <= low < high <= 1.")
        self._quantile_range = tuple(quantile_range)
        self._quantile_precision = quantile_precision

    @property
    def quantile_range(self) -> tuple[float, ...]:
        return self._quantile_range

    @property
    def quantile_precision(self) -> int:
        return self._quantile_precision

    def _fit(self, ds: "Dataset") -> Preprocessor:
        check_present(f"{self!r}.fit", ds, self._columns)
        table = ds.select_columns(self._columns).to_arrow()
        low, high = self._quantile_range
        for c in self._columns:
            values = pc.drop_null(table.column(c)).to_numpy(zero_copy_only=False).astype("float64")
            values = values[~np.isnan(values)]
            q = [None] * 3 if len(values) == 0 else [float(v) for v in np.quantile(values, [low, 0.5, high])]
            self.stats_[f"low_quantile({c})"], self.stats_[f"median({c})"], self.stats_[f"high_quantile({c})"] = q
        return self

    def _center_and_scale(self, column: str) -> tuple[float, float] | None:
        low, median, high = (self.stats_[f"{k}({column})"] for k in ("low_quantile", "median", "high_quantile"))
        if low is None or median is None or high is None:
            return None
        return float(median), (float(high - low) if high != low else np.inf)  # equal quantiles: 0 everywhere


__all__ = ["MaxAbsScaler", "MinMaxScaler", "RobustScaler", "StandardScaler"]
