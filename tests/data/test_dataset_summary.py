"""``Dataset.summary()``: Ray 2.60's per-column statistics, computed block by block."""

import datetime as dt
import math

import numpy as np
import pyarrow as pa
import pytest

import muster.data as md
from muster.data.aggregate import Count, Sum
from muster.data.datatype import DataType
from muster.data.stats import DatasetSummary
from muster.exceptions import InvalidArgumentError, InvalidTypeError

ITEMS = [
    {"age": 25, "salary": 50000, "name": "Alice", "city": "NYC"},
    {"age": 30, "salary": 60000, "name": None, "city": "LA"},
    {"age": 0, "salary": None, "name": "Bob", "city": None},
]


def test_summary_gives_rays_docstring_values():
    summary = md.from_items(ITEMS).summary()
    assert isinstance(summary, DatasetSummary)
    df = summary.to_pandas()
    assert list(df.columns) == ["statistic", "age", "city", "name", "salary"]
    assert list(df["statistic"]) == ["approx_quantile[0]", "approx_topk[0]", "approx_topk[1]", "count", "max",
                                     "mean", "min", "missing_pct", "std", "zero_pct"]
    age = dict(zip(df["statistic"], df["age"]))
    salary = dict(zip(df["statistic"], df["salary"]))
    assert age["approx_quantile[0]"] == 25 and salary["approx_quantile[0]"] == 60000  # the sketch's rank n // 2
    assert (age["count"], age["min"], age["max"], age["zero_pct"]) == (3, 0, 30, pytest.approx(100 / 3))
    assert age["mean"] == pytest.approx(18.333333) and age["std"] == pytest.approx(13.123346)
    assert (salary["mean"], salary["std"], salary["missing_pct"]) == (55000, 5000, pytest.approx(100 / 3))
    city = summary.get_column_stats("city")
    assert list(city.columns) == ["statistic", "value"]
    stats = dict(zip(city["statistic"], city["value"]))
    assert stats["count"] == 3 and stats["missing_pct"] == pytest.approx(100 / 3)
    assert sorted([stats["approx_topk[0]"]["city"], stats["approx_topk[1]"]["city"]]) == ["LA", "NYC"]
    assert stats["approx_topk[0]"]["count"] == 1
    # as in Ray: the int columns' count/min/max keep their type, the rest is float
    assert summary._stats_matching_column_dtype.schema.field("age").type == pa.int64()
    assert summary.dataset_schema.field("name").type == pa.string()


def test_summary_merges_blocks_exactly():
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 2.0, 1001)
    x[::7] = 0.0
    tables = [pa.table({"x": x[i:i + 100], "k": [f"k{v}" for v in rng.integers(0, 12, len(x[i:i + 100]))]})
              for i in range(0, len(x), 100)]
    summary = md.from_arrow(tables).summary()
    got = dict(zip(*summary.get_column_stats("x").T.values))
    assert got["mean"] == pytest.approx(x.mean()) and got["std"] == pytest.approx(x.std())
    assert (got["min"], got["max"], got["count"]) == (x.min(), x.max(), 1001)
    assert got["approx_quantile[0]"] == np.sort(x)[500]
    assert got["zero_pct"] == pytest.approx((x == 0).mean() * 100)
    keys = np.concatenate([t.column("k").to_numpy(zero_copy_only=False) for t in tables])
    values, counts = np.unique(keys, return_counts=True)
    top = dict(zip(*summary.get_column_stats("k").T.values))
    tops = [top[f"approx_topk[{i}]"] for i in range(10)]
    assert "approx_topk[10]" not in top  # 12 distinct values, the 10 most frequent kept
    assert [t["count"] for t in tops] == sorted(counts, reverse=True)[:10]
    assert all(dict(zip(values, counts))[t["k"]] == t["count"] for t in tops)


def test_summary_by_type_nan_bool_temporal_null_and_tensor_columns():
    table = pa.table({"b": [True, False, None, True], "f": [1.5, math.nan, 0.0, None],
                      "t": [dt.datetime(2020, 1, d) for d in range(1, 5)], "n": pa.nulls(4)})
    df = md.from_arrow([table.slice(0, 2), table.slice(2)]).summary().to_pandas().set_index("statistic")
    assert df.loc["missing_pct", "f"] == 50.0  # NaN counts as missing, as in Ray
    assert df.loc["approx_quantile[0]", "f"] == 1.5 and df.loc["zero_pct", "f"] == pytest.approx(100 / 3)
    assert df.loc["mean", "b"] == pytest.approx(2 / 3) and df.loc["max", "b"] == True  # noqa: E712
    assert df.loc["min", "t"] == dt.datetime(2020, 1, 1) and df.loc["max", "t"] == dt.datetime(2020, 1, 4)
    assert df["t"].isna()["mean"] and df.loc["count", "n"] == 4
    tensor = md.range_tensor(3, shape=(2,)).summary().get_column_stats("data")
    assert dict(zip(tensor["statistic"], tensor["value"]))["count"] == 3


def test_summary_columns_overrides_and_errors():
    ds = md.from_items(ITEMS)
    only = ds.summary(columns=["age"]).to_pandas()
    assert list(only.columns) == ["statistic", "age"]
    custom = ds.summary(columns=["age", "name"],
                        override_dtype_agg_mapping={pa.int64(): lambda c: [Count(c), Sum(c)]}).to_pandas()
    age = dict(zip(custom["statistic"], custom["age"]))
    assert age["sum"] == 55 and age["count"] == 3 and "mean" not in age
    # Ray's docstring keys the mapping by DataType (refused before: "pass a dict of pyarrow types")
    by_datatype = ds.summary(override_dtype_agg_mapping={DataType.int64(): lambda c: [Count(on=c), Sum(on=c)]})
    assert by_datatype.to_pandas().equals(ds.summary(override_dtype_agg_mapping={
        pa.int64(): lambda c: [Count(on=c), Sum(on=c)]}).to_pandas())
    with pytest.raises(InvalidArgumentError, match=r"\['nope'\] not in the dataset"):
        ds.summary(columns=["nope"])
    with pytest.raises(InvalidArgumentError, match="at least one column"):
        ds.summary(columns=[])
    with pytest.raises(InvalidTypeError, match=r"pass a dict of types \(DataType.int64\(\)"):
        ds.summary(override_dtype_agg_mapping={"int64": lambda c: [Count(c)]})
    with pytest.raises(InvalidArgumentError, match="no such column"):
        ds.summary().get_column_stats("nope")
