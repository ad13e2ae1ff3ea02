"""Small gaps to Ray 2.60, each checked by running one script under Ray 2.60 and muster: the Arrow type of an
``add_column`` pandas function's result, ``ExecutionResources`` being immutable and hashable,
``write_parquet(min_bytes_per_file=)``, a lazy ``zip``, and the schema a group-by's aggregation is known to
have unread, and ``schema(fetch_if_missing=False)``."""

from __future__ import annotations

import copy
import math
import os
import pickle

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import muster.data as md
from muster.data.exceptions import UserFunctionError
from muster.exceptions import InvalidArgumentError

R = md.ExecutionResources


def _people():
    return md.from_arrow(pa.table({"id": [0, 1, 2, 3], "name": ["n0", "n1", "n2", "n3"]}))  # one block


def test_add_column_pandas_results_have_rays_arrow_types():
    """Ray assigns the result into the pandas batch (``batch.loc[:, col] = ...``) and pyarrow converts the typed
    column: pandas 3 text (``str``) is ``large_string``, as in Ray's ``map_batches(batch_format="pandas")``.
    muster went through numpy, so its text was ``string``, nullable ``Int64`` became float64 with NaN and a
    category plain text."""
    ds = _people()
    text = ds.add_column("s", lambda df: df["id"].astype(str))
    assert [str(t) for t in text.schema().types] == ["int64", "string", "large_string"]
    assert text.take_batch(batch_format="pyarrow").schema.field("s").type == pa.large_string()
    assert text.take_all()[1] == {"id": 1, "name": "n1", "s": "1"}
    for made in (lambda df: [f"x{i}" for i in df["id"]], lambda df: np.array([f"x{i}" for i in df["id"]])):
        assert ds.add_column("s", made).schema().types[2] == pa.large_string()  # pandas infers str, as Ray's
    objects = ds.add_column("s", lambda df: pd.Series([f"x{i}" for i in df["id"]], dtype=object))
    assert objects.schema().types[2] == pa.string()  # an object column: Python strings, as Ray's
    nullable = ds.add_column("n", lambda df: pd.Series([None if i % 2 == 0 else i for i in df["id"]], dtype="Int64"))
    assert nullable.schema().types[2] == pa.int64() and [r["n"] for r in nullable.take_all()] == [None, 1, None, 3]
    category = ds.add_column("c", lambda df: pd.Series(["a", "b", "a", "b"], dtype="category"))
    assert category.schema().types[2] == pa.dictionary(pa.int8(), pa.large_string())
    # unchanged: numbers, tensors, map's Python strings (string, as Ray's) and map_batches' pandas text
    assert ds.add_column("f", lambda df: df["id"] * 1.5).schema().types[2] == pa.float64()
    tensors = ds.add_column("t", lambda df: [np.zeros(2) for _ in range(len(df))])
    assert str(tensors.schema().types[2]) == "ArrowTensorTypeV2(shape=(2,), dtype=double)"
    assert ds.map(lambda r: {"s": f"x{r['id']}"}).schema().types == [pa.string()]
    mapped = ds.map_batches(lambda df: df.assign(s=[f"x{i}" for i in df["id"]]), batch_format="pandas")
    assert mapped.schema().types[2] == pa.large_string()


def test_execution_resources_are_immutable_and_hashable_with_rays_values():
    """Ray 2.60's ``ExecutionResources`` has read-only amounts (setting one raises ``AttributeError``), is
    hashable, and rounds as its scheduler does; muster's was a mutable, unhashable dataclass."""
    r = R(cpu=1, gpu=2, object_store_memory=300, memory=400)
    with pytest.raises(AttributeError, match=r"ExecutionResources.cpu = 5: .*immutable.*copy\(cpu=5\)"):
        r.cpu = 5
    with pytest.raises(AttributeError):
        r.foo = 1  # no such attribute, as Ray's
    assert r.cpu == 1 and r.copy(cpu=7) == R(cpu=7, gpu=2, object_store_memory=300, memory=400) and r.cpu == 1
    assert hash(r) == hash(R(cpu=1, gpu=2, object_store_memory=300, memory=400)) and len({r, r.copy()}) == 1
    assert r != R(cpu=1) and r != None  # noqa: E711 - Ray's raises AttributeError here; muster's says unequal
    assert R.zero() is R.zero() and R.inf() is R.inf() and R(cpu=None) == R.zero()
    # Ray 2.60's values for the same calls
    assert (R(cpu=0.1 + 0.2).cpu, R(gpu=1 / 3).gpu, R(memory=1.7).memory) == (0.3, 0.33333, 2.0)
    assert R().to_resource_dict() == {"CPU": 0.0, "GPU": 0.0, "object_store_memory": 0, "memory": 0}
    assert R.for_limits(cpu=2).to_resource_dict() == {"CPU": 2, "GPU": math.inf, "object_store_memory": math.inf,
                                                      "memory": math.inf}
    assert r.add(R(cpu=0.5)) == R(cpu=1.5, gpu=2, object_store_memory=300, memory=400)
    assert r.subtract(R(cpu=3)).cpu == -2 and r.min(R(cpu=0.5, gpu=9)) == R(cpu=0.5, gpu=2)
    assert r.satisfies_limit(R.for_limits(cpu=1)) and not r.satisfies_limit(R.for_limits(cpu=0.5))
    assert R(cpu=1).scale(math.inf) == R(cpu=math.inf)  # an amount of 0 stays 0 (it was nan)
    with pytest.raises(InvalidArgumentError, match=r"scale\(-1\)"):
        r.scale(-1)
    assert R(cpu=7).floordiv(R(cpu=0.1)).cpu == 70 and R(memory=-2048).memory_str() == "-2048.0B"
    assert pickle.loads(pickle.dumps(r)) == r and copy.deepcopy(r) == r


def test_resource_limits_change_by_assigning_a_copy_as_in_ray():
    """``ctx.execution_options.resource_limits.cpu = 8`` raises in Ray 2.60 (it changed muster's context);
    assigning a copy works, and an amount a limit does not give is unlimited, as Ray's setter keeps it."""
    from muster.data import DataConfig

    ctx = md.DataContext()
    with pytest.raises(AttributeError, match="immutable"):
        ctx.execution_options.resource_limits.cpu = 8
    assert ctx.execution_options.resource_limits == R.inf()
    ctx.execution_options.resource_limits = ctx.execution_options.resource_limits.copy(cpu=8)
    assert ctx.execution_options.resource_limits == R.for_limits(cpu=8)
    ctx.execution_options.resource_limits = R(cpu=3)
    assert ctx.execution_options.resource_limits == R.for_limits(cpu=3)
    assert md.ExecutionOptions(resource_limits=R(cpu=8, gpu=0)).resource_limits == R.for_limits(cpu=8, gpu=0)
    options = DataConfig.default_ingest_options()
    with pytest.raises(AttributeError, match="object_store_memory"):
        options.resource_limits.object_store_memory = 10e9


def test_write_parquet_gathers_blocks_up_to_min_bytes_per_file_as_ray(tmp_path):
    """Ray 2.60's ``write_parquet(min_bytes_per_file=)`` bundles blocks until their in-memory bytes reach it:
    ``range(100, override_num_blocks=10)`` (blocks of 80 bytes) with 200 writes files of 30, 30, 30 and 10 rows,
    with 10**9 one file; 0, or a row option beside it, is refused. muster passed it on to pyarrow's writer, which
    failed with ``TypeError: __cinit__() got an unexpected keyword argument 'min_bytes_per_file'``."""
    ds = md.range(100, override_num_blocks=10)

    def rows_per_file(out):
        return sorted(pq.read_metadata(os.path.join(out, f)).num_rows for f in os.listdir(out))

    ds.write_parquet(str(tmp_path / "a"), min_bytes_per_file=200)
    assert rows_per_file(str(tmp_path / "a")) == [10, 30, 30, 30]
    ds.write_parquet(str(tmp_path / "b"), min_bytes_per_file=10**9)
    assert rows_per_file(str(tmp_path / "b")) == [100]
    items = md.from_items([{"g": i % 2, "v": i} for i in range(40)], override_num_blocks=4)  # 160 bytes a block
    files = items.write_parquet(str(tmp_path / "p"), min_bytes_per_file=300, partition_cols=["g"])
    assert sorted((os.path.basename(os.path.dirname(f)), pq.read_metadata(f).num_rows) for f in files) == [
        ("g=0", 10), ("g=0", 10), ("g=1", 10), ("g=1", 10)]  # two bundles of two blocks, as Ray's
    with pytest.raises(InvalidArgumentError, match=r"min_bytes_per_file=0\): use a positive integer"):
        ds.write_parquet(str(tmp_path / "c"), min_bytes_per_file=0)
    for rows in ({"min_rows_per_file": 3}, {"num_rows_per_file": 3}, {"max_rows_per_file": 3}):
        with pytest.raises(InvalidArgumentError, match=r"cannot be used with min_rows_per_file"):
            ds.write_parquet(str(tmp_path / "c"), min_bytes_per_file=100, **rows)
    assert not os.path.exists(tmp_path / "c")


def test_zip_is_lazy_as_rays():
    """Ray 2.60's ``zip`` is lazy: it returns a ``Dataset`` (not materialized), runs nothing, prints its schema
    table with rows ``?`` (or its ``Zip`` operator over unknown inputs), and fails on differing row counts when it
    runs. muster ran both inputs at the call and returned a ``MaterializedDataset`` printing their rows."""
    def seen(batch):
        return batch

    def boom(batch):
        raise RuntimeError("ran")

    zipped = md.range(3).map_batches(seen).zip(md.range(3).rename_columns({"id": "x"}))
    assert type(zipped) is md.Dataset
    assert repr(zipped) == "Zip\n+- MapBatches(seen)\n+- Project\n   +- Dataset(num_rows=?, schema=Unknown schema)"
    assert zipped.take_all() == [{"id": i, "x": i} for i in range(3)]
    failing = md.range(3).map_batches(boom).zip(md.range(3))  # nothing runs yet
    with pytest.raises(UserFunctionError, match="ran"):
        failing.take_all()
    three = md.range(3).zip(md.range(3), md.range(3))
    assert type(three) is md.Dataset and three.columns() == ["id", "id_1", "id_2"]
    assert repr(three).splitlines()[0] == "shape: (?, 3)" and repr(three).endswith("(Dataset isn't materialized)")
    mismatched = md.range(9).zip(md.range(3))  # no error yet, as Ray's
    with pytest.raises(InvalidArgumentError, match=r"\[9, 3\] rows"):
        mismatched.take_all()


def test_groupby_aggregations_know_their_schema_unread_as_rays():
    """Ray 2.60 infers an aggregation's output schema from its input's (``Aggregate.infer_schema``: the keys, then
    each built-in's declared type), so ``print(ds)`` shows the column table with rows ``?`` and ``schema()`` runs
    nothing. muster printed ``Aggregate`` above its input and ran the plan for ``schema()``."""
    from muster.data.aggregate import Count, Quantile, Sum

    t = pa.table({"g": pa.array([1, 1, 2], pa.int32()), "h": ["a", "b", "a"], "v": pa.array([1, 2, 3], pa.int32()),
                  "f": pa.array([1.5, 2.5, -3.5], pa.float32())})
    ds = md.from_arrow(t)
    assert repr(ds.groupby("g").count()) == "\n".join([
        "shape: (?, 2)",
        "╭───────┬─────────╮",
        "│ g     ┆ count() │",
        "│ ---   ┆ ---     │",
        "│ int32 ┆ int64   │",
        "╰───────┴─────────╯",
        "(Dataset isn't materialized)"])  # Ray 2.60's print, character for character
    expected = {  # each as Ray 2.60's schema() gives it
        ds.groupby(["g", "h"]).sum("v"): [("g", "int32"), ("h", "string"), ("sum(v)", "int64")],
        ds.groupby("g").min("v"): [("g", "int32"), ("min(v)", "int32")],
        ds.groupby("g").max("f"): [("g", "int32"), ("max(f)", "float")],
        ds.groupby("g").mean("f"): [("g", "int32"), ("mean(f)", "double")],
        ds.groupby("g").std("v"): [("g", "int32"), ("std(v)", "double")],
        ds.groupby("g").sum("f"): [("g", "int32"), ("sum(f)", "double")],
        ds.groupby("g").aggregate(Count("v"), Sum("f", alias_name="t"), Count()):
            [("g", "int32"), ("count(v)", "int64"), ("t", "double"), ("count()", "int64")],
    }
    for grouped, fields in expected.items():
        assert repr(grouped).startswith(f"shape: (?, {len(fields)})"), repr(grouped)
        assert [(n, str(ty)) for n, ty in zip(grouped.schema().names, grouped.schema().types)] == fields
        ran = grouped.take_batch(batch_format="pyarrow").schema  # the rows have the types it said
        assert [(f.name, str(f.type)) for f in ran] == fields
    assert md.range(4).groupby("id").count().sort("id").schema().names == ["id", "count()"]
    # not declared by Ray, or not aggregable: the plan, as Ray prints it
    for unknown in (ds.groupby("g").aggregate(Quantile("v")), ds.groupby("h").sum("h")):
        assert repr(unknown).startswith("Aggregate\n+- Dataset(num_rows=3, schema={g: int32, h: string"), repr(unknown)


def test_schema_with_fetch_if_missing_false_runs_nothing_as_rays():
    """Ray 2.60's ``schema(fetch_if_missing=False)`` (and ``columns``) give None when the schema is not known
    without running the plan (a map's output before a whole pass), and never run it; muster ignored the flag
    and ran the plan to its first block."""

    def boom(row):
        raise RuntimeError("ran")

    unknown = md.range(10).map(boom)
    assert unknown.schema(fetch_if_missing=False) is None and unknown.columns(fetch_if_missing=False) is None
    assert md.range(10).columns(fetch_if_missing=False) == ["id"]  # known unread: answered
    mapped = md.range(10).map(lambda r: {"x": r["id"]})
    mapped.take(1)  # a part of a pass: still unknown, as in Ray
    assert mapped.schema(fetch_if_missing=False) is None
    mapped.take_all()  # a whole pass: known
    assert mapped.columns(fetch_if_missing=False) == ["x"]
    assert mapped.map(lambda r: r).schema().names == ["x"]  # the default still runs the plan
