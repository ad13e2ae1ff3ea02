"""``Dataset.summary()``: per-column statistics in one streaming pass over the blocks (Ray's ``DatasetSummary``).

Each column gets the statistics Ray 2.60 picks for its type: numbers (and booleans) ``count``, ``mean``,
``min``, ``max``, ``std`` (population), ``approx_quantile[0]`` (the median), ``missing_pct``, ``zero_pct``;
dates and times ``count``, ``min``, ``max``, ``missing_pct``; everything else ``count``, ``missing_pct`` and
``approx_topk[i]`` (the 10 most frequent values, as ``{column: value, "count": n}``).  Each block adds
its pyarrow aggregates to a running state per column; only the median keeps a column's values (as
float64), and only the top-k keeps a count per distinct value.

As in Ray, the statistics are split by type: those of the column's own type (``min`` of an int column,
``mean`` of a float64 one) and the others; ``to_pandas()`` lays both out as one table, one row per
statistic, sorted by name.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from muster.exceptions import InvalidArgumentError, InvalidTypeError

if TYPE_CHECKING:
    import pandas as pd

    from muster.data.dataset import Dataset

TOP_K = 10
Stat = tuple[Any, pa.DataType]  # a statistic's value and its Arrow type


def _is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t) or pa.types.is_boolean(t)


class _Column:
    """The running statistics of one column; ``add`` takes each block's column, ``stats`` the results."""

    def __init__(self, name: str, type_: pa.DataType):
        self.name, self.type = name, type_
        self.rows = self.missing = 0

    def add(self, column: pa.ChunkedArray) -> None:
        self.rows += len(column)
        nulls = pc.is_null(column, nan_is_null=pa.types.is_floating(column.type))
        self.missing += pc.sum(nulls).as_py() or 0

    def missing_pct(self) -> float | None:
        return self.missing / self.rows * 100.0 if self.rows else None

    def stats(self) -> dict[str, Stat]:
        return {"count": (self.rows, pa.int64())}


class _Ranged(_Column):
    """Adds ``min`` and ``max`` (of the column's own type)."""

    def __init__(self, name: str, type_: pa.DataType):
        super().__init__(name, type_)
        self.low: Any = None
        self.high: Any = None

    def add(self, column: pa.ChunkedArray) -> None:
        super().add(column)
        if len(column) == column.null_count:
            return
        bounds = pc.min_max(column)
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if low is not None and (self.low is None or low < self.low):
            self.low = low
        if high is not None and (self.high is None or high > self.high):
            self.high = high

    def stats(self) -> dict[str, Stat]:
        return {**super().stats(), "min": (self.low, self.type), "max": (self.high, self.type),
                "missing_pct": (self.missing_pct(), pa.float64())}


class _Numeric(_Ranged):
    """Adds ``mean``, population ``std`` (blocks merged by Chan's formula), the median and ``zero_pct``."""

    def __init__(self, name: str, type_: pa.DataType):
        super().__init__(name, type_)
        self.n, self.mean, self.m2, self.zeros = 0, 0.0, 0.0, 0
        self.values: list[np.ndarray] = []

    def add(self, column: pa.ChunkedArray) -> None:
        super().add(column)
        valid = pc.drop_null(column).cast(pa.float64())
        n = len(valid)
        if not n:
            return
        mean = pc.mean(valid).as_py()
        m2 = (pc.variance(valid, ddof=0).as_py() or 0.0) * n
        delta, total = mean - self.mean, self.n + n
        self.m2 += m2 + delta * delta * self.n * n / total
        self.mean += delta * n / total
        self.n = total
        self.zeros += pc.sum(pc.equal(valid, 0.0)).as_py() or 0
        values = valid.to_numpy()
        self.values.append(values[~np.isnan(values)])

    def median(self) -> float | None:
        """The value at rank ``n // 2`` of the sorted values, as Ray's sketch gives it (no interpolation)."""
        values = np.concatenate(self.values) if self.values else np.empty(0)
        if not len(values):
            return None
        return float(np.partition(values, len(values) // 2)[len(values) // 2])

    def stats(self) -> dict[str, Stat]:
        some = self.n > 0
        return {**super().stats(), "mean": (self.mean if some else None, pa.float64()),
                "std": (float(np.sqrt(self.m2 / self.n)) if some else None, pa.float64()),
                "approx_quantile[0]": (self.median(), pa.float64()),
                "zero_pct": (self.zeros / self.n * 100.0 if some else None, pa.float64())}


class _Frequent(_Column):
    """Adds the ``TOP_K`` most frequent values (exact counts; ties in the order first seen)."""

    def __init__(self, name: str, type_: pa.DataType):
        super().__init__(name, type_)
        self.counts: Counter = Counter()
        self.values: dict[Any, Any] = {}

    def add(self, column: pa.ChunkedArray) -> None:
        super().add(column)
        valid = pc.drop_null(column)
        try:
            pairs: Iterable[tuple[Any, int]] = ((p["values"], p["counts"]) for p in pc.value_counts(valid).to_pylist())
        except pa.ArrowNotImplementedError:  # lists, structs: count their Python values
            pairs = ((v, 1) for v in valid.to_pylist())
        for value, count in pairs:
            key = _hashable(value)
            self.values.setdefault(key, value)
            self.counts[key] += count

    def stats(self) -> dict[str, Stat]:
        plain = self.type.storage_type if isinstance(self.type, pa.BaseExtensionType) else self.type
        item = pa.struct([(self.name, plain), ("count", pa.int64())])
        top = {f"approx_topk[{i}]": ({self.name: self.values[key], "count": count}, item)
               for i, (key, count) in enumerate(self.counts.most_common(TOP_K))}
        return {**super().stats(), "missing_pct": (self.missing_pct(), pa.float64()), **top}


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _hashable(v)) for k, v in value.items())
    return value


def _tracker(name: str, type_: pa.DataType) -> _Column:
    if pa.types.is_null(type_):
        return _Column(name, type_)
    if _is_numeric(type_):
        return _Numeric(name, type_)
    if pa.types.is_temporal(type_):
        return _Ranged(name, type_)
    return _Frequent(name, type_)


@dataclass
class DatasetSummary:
    """What ``Dataset.summary()`` returns (Ray's ``ray.data.stats.DatasetSummary``).

    Attributes:
        dataset_schema: the dataset's pyarrow schema.
        columns: the columns summarized.
    """

    STATISTIC_COLUMN = "statistic"

    _stats_matching_column_dtype: pa.Table
    _stats_mismatching_column_dtype: pa.Table
    dataset_schema: pa.Schema
    columns: list[str]

    def _frames(self) -> list["pd.DataFrame"]:
        return [_to_pandas(t) for t in (self._stats_matching_column_dtype, self._stats_mismatching_column_dtype)
                if self.STATISTIC_COLUMN in t.column_names]

    def to_pandas(self) -> "pd.DataFrame":
        """Every statistic of every column: a ``statistic`` column, then one column per dataset column
        (sorted by name), one row per statistic (sorted by name)."""
        import pandas as pd

        frames = [f.set_index(self.STATISTIC_COLUMN) for f in self._frames()]
        if not frames:
            return pd.DataFrame(columns=[self.STATISTIC_COLUMN])
        merged = frames[0] if len(frames) == 1 else frames[0].combine_first(frames[1])
        return merged.reset_index().sort_values(self.STATISTIC_COLUMN).reset_index(drop=True)

    def get_column_stats(self, column: str) -> "pd.DataFrame":
        """The statistics of one column: columns ``statistic`` and ``value``, sorted by statistic.

        Raises:
            InvalidArgumentError: the column was not summarized.
        """
        import pandas as pd

        parts = [f[[self.STATISTIC_COLUMN, column]].rename(columns={column: "value"})
                 for f in self._frames() if column in f.columns]
        if not parts:
            raise InvalidArgumentError(
                f"get_column_stats({column!r}): no such column in the summary; pick one of {self.columns}."
            )
        rows = pd.concat(parts, ignore_index=True)
        rows = rows[rows["value"].map(_present)].drop_duplicates(self.STATISTIC_COLUMN)
        every = pd.DataFrame({self.STATISTIC_COLUMN: pd.unique(pd.concat(parts)[self.STATISTIC_COLUMN])})
        out = every.merge(rows, on=self.STATISTIC_COLUMN, how="left")
        return out.sort_values(self.STATISTIC_COLUMN).reset_index(drop=True)


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and np.isnan(value))


def _to_pandas(table: pa.Table) -> "pd.DataFrame":
    import pandas as pd

    return pd.DataFrame({name: _series(table.column(name)) for name in table.column_names})


def _series(column: pa.ChunkedArray) -> Any:
    try:
        return column.to_pandas()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError):
        import pandas as pd

        return pd.Series(column.to_pylist(), dtype=object)


def _table(stats: dict[str, dict[str, Stat]], columns: list[str], schema: pa.Schema, own_type: bool) -> pa.Table:
    """One half of the summary: a ``statistic`` column and one column per dataset column (sorted)."""
    if not stats:
        return pa.table({})
    names = sorted(stats)
    data: dict[str, pa.Array] = {DatasetSummary.STATISTIC_COLUMN: pa.array(names, pa.string())}
    for col in sorted(columns):
        cells = [stats[s].get(col, (None, None)) for s in names]
        data[col] = _array(cells, schema.field(col).type if own_type else None)
    return pa.table(data)


def _array(cells: list[tuple[Any, pa.DataType | None]], type_: pa.DataType | None) -> pa.Array:
    """The cells' values as one Arrow type (``type_``, or theirs when they agree), else as a dense union
    of their types (a count beside a top-k item), which reads back as Python objects."""
    types = list(dict.fromkeys(t for v, t in cells if t is not None))
    if type_ is not None or len(types) <= 1:
        return _typed([v for v, _ in cells], type_ or (types[0] if types else pa.null()))
    children: list[list[Any]] = [[] for _ in types]
    codes, offsets = [], []
    for value, t in cells:
        code = types.index(t) if t is not None else 0
        codes.append(code)
        offsets.append(len(children[code]))
        children[code].append(value)
    arrays = [_typed(values, t) for values, t in zip(children, types)]
    return pa.UnionArray.from_dense(pa.array(codes, pa.int8()), pa.array(offsets, pa.int32()), arrays,
                                    [str(t) for t in types])


def _typed(values: list[Any], type_: pa.DataType) -> pa.Array:
    if isinstance(type_, pa.BaseExtensionType):  # a tensor column: only nulls land in its own-type half
        return pa.ExtensionArray.from_storage(type_, pa.array(values, type=type_.storage_type))
    return pa.array(values, type=type_)


def _overrides(mapping: dict[Any, Callable[[str], list[Any]]] | None, schema: pa.Schema,
               columns: list[str]) -> dict[str, list[Any]]:
    """The columns whose type ``mapping`` names, each with the aggregations its factory makes."""
    from muster.data.datatype import DataType

    if not mapping:
        return {}
    if not isinstance(mapping, dict) or not all(isinstance(k, (pa.DataType, DataType)) and callable(f)
                                                for k, f in mapping.items()):
        raise InvalidTypeError(
            f"summary(override_dtype_agg_mapping={mapping!r}): pass a dict of types (DataType.int64() as Ray's "
            "docs do, or pyarrow's pa.int64()) to functions of a column name returning muster.data.aggregate "
            "objects, e.g. {DataType.int64(): lambda c: [Count(on=c), Sum(on=c)]}."
        )
    mapping = {k.to_arrow_dtype() if isinstance(k, DataType) else k: f for k, f in mapping.items()}
    return {c: list(mapping[schema.field(c).type](c)) for c in columns if schema.field(c).type in mapping}


def _custom_stats(ds: "Dataset", aggs: list[Any]) -> dict[str, dict[str, Stat]]:
    """The overriding aggregations' results, per column, named as Ray names them (``sum``, ``quantile[0]``)."""
    out: dict[str, dict[str, Stat]] = {}
    if not aggs:
        return out
    row = ds.groupby(None).aggregate(*aggs).to_arrow()
    for agg in aggs:
        value, type_ = row.column(agg.name)[0].as_py(), row.schema.field(agg.name).type
        stat = agg.name.split("(")[0]
        column = out.setdefault(agg.on, {})
        if isinstance(value, list) and (pa.types.is_list(type_) or pa.types.is_large_list(type_)):
            column.update({f"{stat}[{i}]": (v, type_.value_type) for i, v in enumerate(value)})
        else:
            column[stat] = (value, type_)
    return out


def summarize(ds: "Dataset", columns: list[str] | None = None,
              override_dtype_agg_mapping: dict[Any, Callable[[str], list[Any]]] | None = None) -> DatasetSummary:
    """``Dataset.summary``: one pass over ``ds``'s blocks (another for overridden types' aggregations)."""
    blocks = iter(ds._execute())
    first = next((b for b in blocks if b.num_columns), None)
    schema = first.schema if first is not None else pa.schema([])
    chosen = list(schema.names) if columns is None else list(columns)
    missing = [c for c in chosen if c not in schema.names]
    if missing:
        raise InvalidArgumentError(f"summary(columns={columns!r}): {missing} not in the dataset; its columns are "
                                   f"{list(schema.names)}.")
    if not chosen:
        raise InvalidArgumentError(f"summary(columns={columns!r}): name at least one column; the dataset has "
                                   f"{list(schema.names)}.")
    custom = _overrides(override_dtype_agg_mapping, schema, chosen)
    trackers = [_tracker(c, schema.field(c).type) for c in chosen if c not in custom]
    for block in _chain(first, blocks):
        for t in trackers:
            t.add(block.column(t.name))
    per_column = {t.name: t.stats() for t in trackers}
    per_column.update(_custom_stats(ds, [a for aggs in custom.values() for a in aggs]))
    halves: tuple[dict[str, dict[str, Stat]], dict[str, dict[str, Stat]]] = ({}, {})
    for col, stats in per_column.items():
        for name, (value, type_) in stats.items():
            halves[0 if type_ == schema.field(col).type else 1].setdefault(name, {})[col] = (value, type_)
    return DatasetSummary(_table(halves[0], chosen, schema, True), _table(halves[1], chosen, schema, False),
                          schema, chosen)


def _chain(first: pa.Table | None, rest: Iterable[pa.Table]) -> Iterable[pa.Table]:
    if first is not None:
        yield first
    yield from (b for b in rest if b.num_rows)
