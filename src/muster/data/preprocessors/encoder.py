"""Ray's categorical encoders: ``OrdinalEncoder``, ``OneHotEncoder``, ``MultiHotEncoder``, ``LabelEncoder``,
``Categorizer``.

``fit`` counts each column's distinct values in one streaming pass over the dataset's batches
(Arrow's ``value_counts`` per batch, merged); the categories, sorted, get the indices 0, 1, ... and
``stats_["unique_values(col)"]`` holds ``{value: index}``, as in Ray. A null (or NaN) in a column to
fit or encode is refused: impute it first (``SimpleImputer``).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from muster.data.preprocessor import ColumnsPreprocessor, Preprocessor, check_in, check_present
from muster.data.preprocessors.version_support import SerializablePreprocessor
from muster.data.preprocessors.utils import count_into, object_column
from muster.exceptions import InvalidArgumentError, InvalidTypeError

if TYPE_CHECKING:
    from muster.data.dataset import Dataset


def _is_list(type_: pa.DataType) -> bool:
    return bool(pa.types.is_list(type_) or pa.types.is_large_list(type_) or pa.types.is_fixed_size_list(type_))


def _count_values(ds: "Dataset", columns: list[str], encode_lists: bool, who: str) -> dict[str, Counter]:
    """Each column's distinct values and their counts, in one pass. A list column counts its elements
    (``encode_lists``) or each whole list as a tuple. A null is counted under ``None``."""
    check_present(who, ds, columns)
    counts: dict[str, Counter] = {c: Counter() for c in columns}
    for table in ds.select_columns(columns).iter_batches(batch_size=None, batch_format="pyarrow"):
        for c in columns:
            column = table.column(c)
            if _is_list(column.type):
                lists = column.to_pylist()
                if encode_lists:
                    counts[c].update(v for row in lists if row is not None for v in row)
                    counts[c].update(None for row in lists if row is None)
                else:
                    counts[c].update(None if row is None else tuple(row) for row in lists)
                continue
            for pair in pc.value_counts(column).to_pylist():
                value = pair["values"]
                counts[c][None if value is None or value != value else value] += pair["counts"]  # NaN: null
    return counts


def _index(who: str, column: str, counts: Counter, top: int | None = None, drop_nulls: bool = False) -> dict:
    """``{value: index}`` over the sorted values (the ``top`` most frequent when given)."""
    if None in counts and not drop_nulls:
        raise InvalidArgumentError(f"{who}: column {column!r} holds null values, so it cannot be fitted; impute "
                                   f"them first, e.g. Chain(SimpleImputer([{column!r}], strategy='most_frequent'), "
                                   "...).")
    kept = [v for v, _ in counts.most_common(top)] if top is not None else list(counts)
    return {v: i for i, v in enumerate(sorted(v for v in kept if v is not None))}


def _refuse_nulls(who: str, table_or_df: Any, columns: list[str]) -> None:
    if isinstance(table_or_df, pa.Table):
        bad = [c for c in columns if pc.any(pc.is_null(table_or_df.column(c), nan_is_null=True)).as_py()]
    else:
        bad = [c for c in columns if table_or_df[c].isnull().to_numpy().any()]
    if bad:
        raise InvalidArgumentError(f"{who}: column(s) {bad!r} hold null values, which cannot be encoded; impute "
                                   "them first (SimpleImputer) or filter those rows out.")


def _lookup(stats: dict, column: pa.ChunkedArray) -> pa.Array:
    """The index of each value among ``stats``' keys (null where it is not one of them)."""
    keys = pa.array(list(stats))
    if len(keys) and keys.type != column.type:
        keys = pc.cast(keys, column.type)
    return pc.index_in(column, value_set=keys)


def _upsert(table: pa.Table, name: str, values: Any) -> pa.Table:
    if name in table.column_names:
        return table.set_column(table.column_names.index(name), name, values)
    return table.append_column(name, values)


class _Encoder(ColumnsPreprocessor):
    @classmethod
    def preferred_batch_format(cls) -> str:
        return "pyarrow"

    def _transform_arrow(self, table: pa.Table) -> pa.Table:
        _refuse_nulls(f"{self!r}.transform", table, self._columns)
        for column, out in zip(self._columns, self._output_columns):
            table = _upsert(table, out, self._encode(table.column(column), column))
        return table

    def _encode(self, values: pa.ChunkedArray, column: str) -> pa.Array:
        raise NotImplementedError


@SerializablePreprocessor(version=1, identifier="io.muster.preprocessors.ordinal_encoder")
class OrdinalEncoder(_Encoder):
    """Each category as its index among the column's sorted categories (int64); a category not seen
    in ``fit`` becomes null. A list column has each element encoded (``encode_lists=True``), or
    each whole list as one category (``False``)."""

    def __init__(self, columns: list[str], *, encode_lists: bool = True, output_columns: list[str] | None = None):
        super().__init__(columns, output_columns)
        self._encode_lists = encode_lists

    @property
    def encode_lists(self) -> bool:
        return self._encode_lists

    def _fit(self, ds: "Dataset") -> Preprocessor:
        who = f"{self!r}.fit"
        counts = _count_values(ds, self._columns, self._encode_lists, who)
        self.stats_ = {f"unique_values({c})": _index(who, c, counts[c]) for c in self._columns}
        return self

    def _encode(self, values: pa.ChunkedArray, column: str) -> pa.Array:
        stats = self.stats_[f"unique_values({column})"]
        if not _is_list(values.type):
            return pc.cast(_lookup(stats, values), pa.int64())
        if self._encode_lists:
            return pa.array([[stats.get(v) for v in row] for row in values.to_pylist()], pa.list_(pa.int64()))
        return pa.array([stats.get(tuple(row)) for row in values.to_pylist()], pa.int64())

    def __repr__(self) -> str:
        return (f"OrdinalEncoder(columns={self._columns!r}, encode_lists={self._encode_lists!r}, "
                f"output_columns={self._output_columns!r})")


class _TopCategories(ColumnsPreprocessor):
    """Fits each column's sorted categories, only the ``max_categories={col: k}`` most frequent where given;
    ``_count_lists``: a list value's elements are the categories (else the whole list, as a tuple)."""

    _count_lists = False

    def __init__(self, columns: list[str], *, max_categories: dict[str, int] | None = None,
                 output_columns: list[str] | None = None):
        super().__init__(columns, output_columns)
        self._max_categories = dict(max_categories or {})
        unknown = [c for c in self._max_categories if c not in self._columns]
        if unknown:
            raise InvalidArgumentError(f"{type(self).__name__}(max_categories={self._max_categories!r}): {unknown!r} "
                                       f"are not in columns={self._columns!r}; set max_categories only for encoded "
                                       "columns.")

    @property
    def max_categories(self) -> dict[str, int]:
        return self._max_categories

    def _fit(self, ds: "Dataset") -> Preprocessor:
        who = f"{self!r}.fit"
        counts = _count_values(ds, self._columns, self._count_lists, who)
        self.stats_ = {f"unique_values({c})": _index(who, c, counts[c], self._max_categories.get(c))
                       for c in self._columns}
        return self

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(columns={self._columns!r}, max_categories={self._max_categories!r}, "
                f"output_columns={self._output_columns!r})")


@SerializablePreprocessor(version=1, identifier="io.muster.preprocessors.one_hot_encoder")
class OneHotEncoder(_Encoder, _TopCategories):
    """Each category as a one-hot vector: one column per input column, of ``uint8`` vectors as long as
    the number of categories (Ray 2.60's format; numpy batches hold a 2-D array). A category not seen
    in ``fit``, or outside the ``max_categories={col: k}`` most frequent, is all zeros. A list value
    is one category (its tuple)."""

    def _encode(self, values: pa.ChunkedArray, column: str) -> pa.Array:
        stats = self.stats_[f"unique_values({column})"]
        if _is_list(values.type):
            codes = np.array([stats.get(tuple(row), -1) for row in values.to_pylist()], dtype=np.int64)
        else:
            codes = pc.fill_null(_lookup(stats, values), -1).to_numpy().astype(np.int64)
        one_hot = np.zeros((len(codes), len(stats)), dtype=np.uint8)
        hit = codes >= 0
        one_hot[np.nonzero(hit)[0], codes[hit]] = 1
        return pa.FixedSizeListArray.from_arrays(pa.array(one_hot.ravel()), len(stats))


@SerializablePreprocessor(version=1, identifier="io.muster.preprocessors.multi_hot_encoder")
class MultiHotEncoder(_TopCategories):
    """Each list of categories as a ``list<int64>`` as long as the column's categories: item ``i`` counts
    how often category ``i`` (of the sorted categories ``fit`` saw in the lists) is in the row's list, as
    Ray's does (so usually 0 or 1). A scalar value is a list of one; a category not seen in ``fit``, or
    outside the ``max_categories={col: k}`` most frequent, is not counted. ``stats_``:
    ``{"unique_values(col)": {category: index}}``. A null is refused: impute it first."""

    _count_lists = True

    def _transform_pandas(self, df: Any) -> Any:
        who = f"{self!r}.transform"
        check_in(who, df.columns, self._columns)
        _refuse_nulls(who, df, self._columns)
        for column, out in zip(self._columns, self._output_columns):
            index = self.stats_[f"unique_values({column})"]
            rows = [count_into(value if isinstance(value, (list, np.ndarray)) else [value], len(index), index.get)
                    for value in df[column]]
            df[out] = object_column(rows, df.index)
        return df


@SerializablePreprocessor(version=1, identifier="io.muster.preprocessors.label_encoder")
class LabelEncoder(Preprocessor):
    """The label column's classes as their index among the sorted classes (an unseen class becomes NaN);
    ``inverse_transform`` maps indices back to classes."""

    def __init__(self, label_column: str, *, output_column: str | None = None):
        super().__init__()
        if not isinstance(label_column, str):
            raise InvalidTypeError(f"LabelEncoder(label_column={label_column!r}): pass one column name.")
        self._label_column = label_column
        self._output_column = output_column or label_column

    @property
    def label_column(self) -> str:
        return self._label_column

    @property
    def output_column(self) -> str:
        return self._output_column

    def get_input_columns(self) -> list[str]:
        return [self._label_column]

    def get_output_columns(self) -> list[str]:
        return [self._output_column]

    def _fit(self, ds: "Dataset") -> Preprocessor:
        who = f"{self!r}.fit"
        counts = _count_values(ds, [self._label_column], True, who)
        self.stats_ = {f"unique_values({self._label_column})": _index(who, self._label_column,
                                                                      counts[self._label_column])}
        return self

    def _transform_pandas(self, df: Any) -> Any:
        _refuse_nulls(f"{self!r}.transform", df, [self._label_column])
        df[self._output_column] = df[self._label_column].map(self.stats_[f"unique_values({self._label_column})"])
        return df

    def inverse_transform(self, ds: "Dataset") -> "Dataset":
        """A lazy dataset whose ``label_column`` holds the classes of the indices in ``output_column``."""
        self._check_fitted("inverse_transform")
        return ds.map_batches(self._inverse_transform_pandas, batch_format="pandas")

    def _inverse_transform_pandas(self, df: Any) -> Any:
        classes = {i: v for v, i in self.stats_[f"unique_values({self._label_column})"].items()}
        df[self._label_column] = df[self._output_column].map(classes)
        return df

    def __repr__(self) -> str:
        return f"LabelEncoder(label_column={self._label_column!r}, output_column={self._output_column!r})"


@SerializablePreprocessor(version=1, identifier="io.muster.preprocessors.categorizer")
class Categorizer(ColumnsPreprocessor):
    """Columns as pandas categoricals (Arrow dictionary columns): the categories are the sorted values
    ``fit`` saw (nulls left out), or the ``dtypes={col: pandas.CategoricalDtype(...)}`` given.
    ``stats_``: ``{col: CategoricalDtype}``."""

    def __init__(self, columns: list[str], dtypes: dict[str, Any] | None = None,
                 output_columns: list[str] | None = None):
        super().__init__(columns, output_columns)
        self._dtypes = dict(dtypes or {})

    @property
    def dtypes(self) -> dict[str, Any]:
        return self._dtypes

    def _fit(self, ds: "Dataset") -> Preprocessor:
        import pandas as pd

        self.stats_ = dict(self._dtypes)
        to_learn = [c for c in self._columns if c not in self._dtypes]
        if to_learn:
            counts = _count_values(ds, to_learn, True, f"{self!r}.fit")
            for c in to_learn:
                self.stats_[c] = pd.CategoricalDtype(list(_index("", c, counts[c], drop_nulls=True)))
        return self

    def _transform_pandas(self, df: Any) -> Any:
        for column, out in zip(self._columns, self._output_columns):
            df[out] = df[column].astype(self.stats_[column])
        return df

    def __repr__(self) -> str:
        return (f"Categorizer(columns={self._columns!r}, dtypes={self._dtypes!r}, "
                f"output_columns={self._output_columns!r})")


__all__ = ["Categorizer", "LabelEncoder", "MultiHotEncoder", "OneHotEncoder", "OrdinalEncoder"]
