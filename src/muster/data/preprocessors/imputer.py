"""Ray's ``SimpleImputer``: fill the missing values (null, NaN) of columns."""

from __future__ import annotations

from collections import Counter
from numbers import Number
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc

from muster.data.aggregate import Mean
from muster.data.preprocessor import ColumnsPreprocessor, Preprocessor, check_present
from muster.data.preprocessors.version_support import SerializablePreprocessor
from muster.exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from muster.data.dataset import Dataset

_STRATEGIES = ("mean", "most_frequent", "constant")


def _most_frequent(ds: "Dataset", columns: list[str]) -> dict[str, Any]:
    """Each column's most frequent non-null value (None for a column with none), in one pass."""
    counts: dict[str, Counter] = {c: Counter() for c in columns}
    for table in ds.select_columns(columns).iter_batches(batch_size=None, batch_format="pyarrow"):
        for c in columns:
            for pair in pc.value_counts(pc.drop_null(table.column(c))).to_pylist():
                if pair["values"] == pair["values"]:  # NaN is missing, not a value
                    counts[c][pair["values"]] += pair["counts"]
    return {c: (counts[c].most_common(1)[0][0] if counts[c] else None) for c in columns}


@SerializablePreprocessor(version=1, identifier="io.muster.preprocessors.simple_imputer")
class SimpleImputer(ColumnsPreprocessor):
    """Fill each column's missing values with its mean (``strategy="mean"``), its most frequent value
    (``"most_frequent"``, which also works for strings) or ``fill_value`` (``"constant"``, nothing to fit).

    ``stats_``: ``{"mean(col)": ...}`` or ``{"most_frequent(col)": ...}``. A column missing from a batch
    is added, filled with the value, as in Ray.
    """

    def __init__(self, columns: list[str], strategy: str = "mean", fill_value: str | Number | None = None, *,
                 output_columns: list[str] | None = None):
        super().__init__(columns, output_columns)
        if strategy not in _STRATEGIES:
            raise InvalidArgumentError(f"SimpleImputer(strategy={strategy!r}): use one of {list(_STRATEGIES)}.")
        if strategy == "constant":
            self._is_fittable = False
            if fill_value is None:
                raise InvalidArgumentError("SimpleImputer(strategy='constant'): also pass the value to fill with, "
                                           "fill_value=0 for example.")
        self._strategy = strategy
        self._fill_value = fill_value

    @property
    def strategy(self) -> str:
        return self._strategy

    @property
    def fill_value(self) -> str | Number | None:
        return self._fill_value

    def _fit(self, ds: "Dataset") -> Preprocessor:
        check_present(f"{self!r}.fit", ds, self._columns)
        if self._strategy == "mean":
            self.stats_ = ds.aggregate(*[Mean(c) for c in self._columns])
        else:
            self.stats_ = {f"most_frequent({c})": v for c, v in _most_frequent(ds, self._columns).items()}
        return self

    def _value(self, column: str) -> Any:
        if self._strategy == "constant":
            return self._fill_value
        value = self.stats_[f"{self._strategy}({column})"]
        if value is None:
            raise InvalidArgumentError(f"{self!r}: column {column!r} had no values when fitted, so there is nothing "
                                       "to fill with; fit on data that has some, or use strategy='constant'.")
        return value

    def _transform_pandas(self, df: Any) -> Any:
        import pandas as pd

        for column, out in zip(self._columns, self._output_columns):
            value = self._value(column)
            if column not in df.columns:
                df[out] = value
                continue
            values = df[column]
            if isinstance(values.dtype, pd.CategoricalDtype) and value not in values.cat.categories:
                values = values.cat.add_categories([value])
            df[out] = values.fillna(value)
        return df

    def __repr__(self) -> str:
        return (f"SimpleImputer(columns={self._columns!r}, strategy={self._strategy!r}, "
                f"fill_value={self._fill_value!r}, output_columns={self._output_columns!r})")


__all__ = ["SimpleImputer"]
