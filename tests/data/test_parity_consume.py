"""Consumption and sampling as Ray 2.60 does them, each checked by running the same calls under Ray 2.60
(``ray.init(address="local", num_cpus=2)``): ``iter_torch_batches(dtypes=)``, ``to_pandas()`` of an empty
dataset, a group-by's key types where Ray aggregates through Python values, a lazy ``random_sample``."""

from __future__ import annotations

import pyarrow as pa
import pytest
import torch

import muster.data as md
from muster.exceptions import MusterError


def test_iter_torch_batches_dict_dtypes_must_name_every_column_as_rays():
    """Ray 2.60 raises ``KeyError: 'b'`` at the first batch when a dict of dtypes leaves a column out (a key
    that is no column is ignored), and refuses ``collate_fn`` with ``dtypes``; muster converted the left-out
    column with its own dtype and ignored ``dtypes`` beside a ``collate_fn``."""
    ds = md.from_items([{"a": 1, "b": 2.0}, {"a": 3, "b": 4.0}])
    batches = ds.iter_torch_batches(dtypes={"a": torch.float32})  # nothing runs yet, as in Ray
    with pytest.raises(KeyError, match=r"no dtype for column 'b'.*add 'b'") as info:
        next(iter(batches))
    assert isinstance(info.value, MusterError)
    whole = next(iter(ds.iter_torch_batches(dtypes={"a": torch.float32, "b": torch.float64, "zz": torch.int8})))
    assert (whole["a"].dtype, whole["b"].dtype) == (torch.float32, torch.float64)
    one = next(iter(ds.iter_torch_batches(dtypes=torch.float16)))  # one dtype: every column
    assert (one["a"].dtype, one["b"].dtype) == (torch.float16, torch.float16)
    with pytest.raises(ValueError, match="collate_fn cannot be used with dtypes"):
        ds.iter_torch_batches(dtypes=torch.float32, collate_fn=lambda batch: batch)
    with pytest.raises(KeyError, match="no dtype for column 'b'"):  # the iterator's too (a trainer's shard)
        next(iter(ds.iterator().iter_torch_batches(dtypes={"a": torch.float32})))


def test_random_sample_is_lazy_and_an_integer_seed_repeats_its_rows_as_rays(threads_only):
    """Ray 2.60's ``random_sample`` is a ``MapBatches(random_sample)`` that draws when the dataset runs (printed
    as such, a ``Dataset``, not materialized); an integer seed gives the same rows every pass and every new
    dataset, no seed other rows each pass. muster gathered every row at the call and returned a
    ``MaterializedDataset`` holding one draw."""
    calls = []
    source = md.range(200, override_num_blocks=4).map(lambda row: calls.append(1) or row)
    sampled = source.random_sample(0.2, seed=5)
    assert calls == [] and type(sampled) is md.Dataset  # lazy, as Ray's
    assert repr(md.range(100).random_sample(0.1, seed=5)) == (
        "MapBatches(random_sample)\n+- Dataset(num_rows=100, schema={id: int64})")  # Ray 2.60's print
    rows = sampled.take_all()
    assert 10 < len(rows) < 80 and rows == sampled.take_all()  # the same rows every pass
    assert md.range(200, override_num_blocks=4).random_sample(0.2, seed=5).take_all() == rows  # and every run
    per_pass = md.range(200, override_num_blocks=4).random_sample(0.2, seed=md.RandomSeedConfig(5))
    assert per_pass.take_all() != per_pass.take_all()  # a RandomSeedConfig's default: other rows each pass
    unseeded = md.range(200).random_sample(0.5)
    assert unseeded.take_all() != unseeded.take_all()
    with pytest.raises(ValueError, match=r"random_sample\(fraction=1.5\): use a number in \[0, 1\]"):
        md.range(3).random_sample(1.5)


def test_to_pandas_of_no_rows_has_no_columns_as_rays():
    """Ray 2.60's ``to_pandas()`` builds its DataFrame from the batches it gets, so a dataset with no rows gives
    ``Empty DataFrame, Columns: []``, whatever its schema (``range(10).filter(...)``, ``limit(0)``, an empty
    ``from_arrow``); muster kept the schema's columns."""
    for empty in (md.range(10).filter(lambda row: False), md.range(10).filter(expr="id > 100"), md.range(10).limit(0),
                  md.from_arrow(pa.table({"x": pa.array([], pa.int64())}))):
        df = empty.to_pandas()
        assert df.shape == (0, 0) and list(df.columns) == [], df
        assert empty.to_pandas(limit=5).shape == (0, 0)
    assert list(md.range(3).to_pandas().columns) == ["id"]


def test_groupby_through_rays_python_path_widens_numeric_columns_as_rays():
    """Ray 2.60 aggregates a group-by on Arrow's kernels only when every aggregation has one; with ``Quantile``,
    ``AbsMax`` or a mix of ``Unique`` with a reduction it builds the rows from Python values: an int32 key
    comes out int64, a float32 key double, ``min`` of int32 int64, lists keep their item type. The expected
    schemas are the ones Ray 2.60 gave for the same calls; muster kept every input type."""
    from muster.data.aggregate import AbsMax, Min, Quantile, Std, Sum, Unique

    ds = md.from_arrow(pa.table({"k": pa.array([1, 1, 2, 2, 2], pa.int32()), "s": list("aabbb"),
                                 "f": pa.array([1, 1, 2, 2, 2], pa.float32()),
                                 "v": pa.array([1, 2, 3, 4, 5], pa.int32())}))
    expected = {
        ("k", (Quantile("v"),)): "k: int64, quantile(v): double",
        ("k", (Quantile("v"), Min("v"))): "k: int64, quantile(v): double, min(v): int64",
        ("k", (AbsMax("v"),)): "k: int64, abs_max(v): int64",
        ("f", (Quantile("v"),)): "f: double, quantile(v): double",
        ("s", (Quantile("v"),)): "s: string, quantile(v): double",
        ("k", (Unique("v"), Sum("v"))): "k: int64, unique(v): list<item: int32>, sum(v): int64",
        # on Arrow's kernels in Ray: the input's types
        ("k", (Unique("v"),)): "k: int32, unique(v): list<item: int32>",
        ("k", (Sum("v"), Min("v"))): "k: int32, sum(v): int64, min(v): int32",
        ("k", (Std("v"),)): "k: int32, std(v): double",  # as Ray's schema() declares it (its rows: int64)
    }
    for (key, aggs), fields in expected.items():
        table = ds.groupby(key).aggregate(*aggs).sort(key).to_arrow()
        assert ", ".join(f"{f.name}: {f.type}" for f in table.schema) == fields
    medians = ds.groupby("k").aggregate(Quantile("v")).sort("k").take_all()
    assert medians == [{"k": 1, "quantile(v)": 1.5}, {"k": 2, "quantile(v)": 4.0}]  # Ray 2.60's values
