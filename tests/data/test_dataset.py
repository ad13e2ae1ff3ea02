"""Transforms, splits and consumption of muster.data datasets, on small in-memory data."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet  # noqa: F401 - pa.parquet
import pyarrow.csv  # noqa: F401 - pa.csv
import pytest
import torch

import muster.data as md
from _shared import check_in_fork

TEST_CPUS = 4  # the session engine's CPUs (tests/conftest.py)


def ids(ds_or_rows) -> list[int]:
    rows = ds_or_rows.take_all() if isinstance(ds_or_rows, md.Dataset) else ds_or_rows
    return [r["id"] for r in rows]


def test_lazy_map_filter_flat_map_keep_order(threads_only):
    calls = []
    ds = md.range(50, override_num_blocks=5).map(lambda r: calls.append(1) or {"id": r["id"], "sq": r["id"] ** 2})
    assert calls == []  # lazy
    ds = ds.filter(lambda r: r["id"] % 2 == 0).flat_map(lambda r: [r, {"id": -r["id"], "sq": 0}])
    assert "Map(" in repr(ds) and "Filter(" in repr(ds)
    rows = ds.take_all()
    assert len(calls) == 50
    assert [r["id"] for r in rows[:6]] == [0, 0, 2, -2, 4, -4]
    assert rows[2] == {"id": 2, "sq": 4}
    assert ds.count() == 50
    assert repr(ds).startswith("shape: (50, 2)")  # a finished pass is remembered, as Ray's cache


def test_map_batches_formats_args_and_batch_size(threads_only):
    seen = []

    def add(batch, k, *, m):
        seen.append(len(batch["id"]))
        return {"id": batch["id"], "y": batch["id"] * k + m}

    ds = md.range(25).map_batches(add, batch_size=10, fn_args=(3,), fn_kwargs={"m": 1})
    assert ds.take_batch(25)["y"].tolist() == [i * 3 + 1 for i in range(25)]
    # range(25) on 4 CPUs: 7 blocks of 4 rows (the last 1), bundled 12, 12 and 1 (threads: in any order)
    assert sorted(seen) == [1, 2, 2, 10, 10]
    as_pandas = md.range(4).map_batches(lambda df: df.assign(z=df["id"] + 1), batch_format="pandas")
    assert as_pandas.to_pandas()["z"].tolist() == [1, 2, 3, 4]
    as_arrow = md.range(4).map_batches(lambda t: t.append_column("w", pa.array([9] * len(t))), batch_format="pyarrow")
    assert as_arrow.take(1) == [{"id": 0, "w": 9}]


def test_map_batches_callable_class_is_built_once_per_thread():
    class AddOffset:
        built = 0

        def __init__(self, offset):
            AddOffset.built += 1
            self.offset = offset

        def __call__(self, batch):
            return {"id": batch["id"] + self.offset}

    ds = md.range(100, override_num_blocks=10).map_batches(
        AddOffset, fn_constructor_kwargs={"offset": 1000}, batch_size=None)  # no concurrency=: threads, not actors
    assert ids(ds) == list(range(1000, 1100))
    assert 1 <= AddOffset.built <= md.DataContext.get_current().max_threads


def test_column_ops_limit_union_and_tensors():
    ds = md.from_items([{"a": i, "b": str(i)} for i in range(10)])
    ds = ds.add_column("c", lambda df: df["a"] * 2).rename_columns({"b": "s"}).drop_columns(["s"])
    assert ds.columns() == ["a", "c"] and ds.select_columns(["c"]).take(2) == [{"c": 0}, {"c": 2}]
    assert ds.limit(3).count() == 3
    u = md.range(3).union(md.range(2))
    assert ids(u) == [0, 1, 2, 0, 1]
    t = md.range_tensor(6, shape=(2, 2)).take_batch(6)["data"]
    assert t.shape == (6, 2, 2) and t[5].tolist() == [[5, 5], [5, 5]]
    assert md.from_numpy(np.ones((4, 3))).take_batch(4)["data"].shape == (4, 3)
    assert md.from_pandas(pd.DataFrame({"x": [1, 2]})).take_all() == [{"x": 1}, {"x": 2}]
    assert md.from_arrow(pa.table({"x": [1]})).schema().names == ["x"]


def test_tensor_columns_keep_their_shape_through_pandas(threads_only):
    """Ray's pandas batches hold one ndarray of the column's shape per row; Arrow's own conversion
    flattened each row, and a pandas map_batches turned the column into flat lists."""
    ds = md.from_numpy(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    seen = []

    def identity(df):
        seen.append(np.asarray(df["data"].iloc[0]).shape)
        return df

    out = ds.map_batches(identity, batch_format="pandas")
    assert out.take_batch(2)["data"].shape == (2, 3, 4) and seen == [(3, 4)]
    assert isinstance(out.schema().field("data").type, pa.FixedShapeTensorType)
    frame = ds.to_pandas()
    assert frame["data"].iloc[1].shape == (3, 4) and frame["data"].iloc[1][2, 3] == 23
    assert next(iter(ds.iter_batches(batch_format="pandas")))["data"].iloc[0].shape == (3, 4)
    rows = md.range(3).map(lambda r: {"z": np.full((2, 2), r["id"]), "id": r["id"]}).to_pandas()
    assert list(rows.columns) == ["z", "id"] and rows["z"].iloc[2].tolist() == [[2, 2], [2, 2]]
    back = md.from_pandas(rows, override_num_blocks=2)
    assert back.take_batch(3)["z"].shape == (3, 2, 2) and back.schema().metadata is None


def test_aggregations_over_lists_of_columns_every_column_and_no_key():
    ds = md.from_items([{"g": i % 3, "v": float(i), "w": 2 * i} for i in range(12)])
    assert ds.groupby("g").max(["v", "w"]).take_all()[0] == {"g": 0, "max(v)": 9.0, "max(w)": 18}
    assert ds.groupby("g").sum().take_all()[2] == {"g": 2, "sum(v)": 26.0, "sum(w)": 52}
    assert ds.groupby(None).count().take_all() == [{"count()": 12}]
    assert ds.sum(["v", "w"]) == {"sum(v)": 66.0, "sum(w)": 132} and ds.sum("w") == 132
    assert ds.std("v") == pytest.approx(float(np.std(np.arange(12.0), ddof=1)))
    assert ds.std("v", ddof=0) == pytest.approx(float(np.std(np.arange(12.0))))
    assert ds.groupby("g").std("v").take_all()[1]["std(v)"] == pytest.approx(float(np.std([1.0, 4, 7, 10], ddof=1)))
    nulls = md.from_items([{"a": 1.0}, {"a": None}, {"a": 3.0}])
    assert (nulls.sum("a"), nulls.sum("a", ignore_nulls=False), nulls.mean("a")) == (4.0, None, 2.0)
    assert nulls.filter(lambda r: False).sum("a") is None  # an empty dataset's aggregate is null, as in Ray
    assert ds.rename_columns(["G", "V", "W"]).columns() == ["G", "V", "W"] and ds.limit(limit=2).count() == 2
    with pytest.raises(ValueError, match=r"std\(ddof=-1\)"):
        ds.std("v", ddof=-1)
    with pytest.raises(ValueError, match="2 names for 3 columns"):
        ds.rename_columns(["a", "b"]).take_all()


def test_aggregate_objects_zip_sampling_and_unsupported_names():
    from muster.data.aggregate import AggregateFn, Count, Mean, Std, Sum, Unique
    from muster.exceptions import UnsupportedRayAPIError, UnsupportedRayImportError

    ds = md.from_items([{"n": i, "g": i % 2} for i in range(1, 10)])
    prod = AggregateFn(init=lambda key: 1, accumulate_row=lambda acc, row: acc * row["n"], merge=lambda a, b: a * b,
                       name="prod")
    assert ds.aggregate(prod) == {"prod": 362880}  # Ray's own example
    whole = ds.aggregate(Count(), Mean("n"), Std("n", alias_name="sd"), Unique("g"))
    assert whole["count()"] == 9 and whole["mean(n)"] == 5.0 and sorted(whole["unique(g)"]) == [0, 1]
    assert whole["sd"] == pytest.approx(float(np.std(np.arange(1, 10), ddof=1)))
    assert ds.groupby("g").aggregate(Count(), Sum("n"), prod).take_all() == [
        {"g": 0, "count()": 4, "sum(n)": 20, "prod": 2 * 4 * 6 * 8},
        {"g": 1, "count()": 5, "sum(n)": 25, "prod": 1 * 3 * 5 * 7 * 9},
    ]
    assert ds.zip(md.range(9)).take(2) == [{"n": 1, "g": 1, "id": 0}, {"n": 2, "g": 0, "id": 1}]
    assert ds.zip(ds).columns() == ["n", "g", "n_1", "g_1"]
    with pytest.raises(ValueError, match=r"\[9, 3\] rows"):
        ds.zip(md.range(3)).take_all()  # lazy, as Ray's: it fails when it runs
    assert [p.count() for p in ds.split_proportionately([0.5, 0.25])] == [4, 2, 3]
    assert 50 < md.range(1000).random_sample(0.1, seed=1).count() < 150
    assert ds.num_blocks() >= 1 and ds.size_bytes() > 0
    assert ds.input_files() == []  # in memory: no files
    with pytest.raises(UnsupportedRayAPIError, match="write_tfrecords"):
        ds.write_tfrecords
    with pytest.raises(UnsupportedRayImportError, match=r"ApproximateQuantile .*Quantile\(on, q=...\): exact"):
        from muster.data.aggregate import ApproximateQuantile  # noqa: F401


def test_rays_other_builtin_aggregations_give_rays_values():
    """AbsMax, Quantile, CountDistinct, MissingValuePercentage, ZeroPercentage: the expected values are what
    Ray 2.60 gave for the same rows (they were ImportErrors)."""
    from muster.data.aggregate import AbsMax, CountDistinct, MissingValuePercentage, Quantile, ZeroPercentage

    ds = md.from_items([{"g": i % 2, "v": v} for i, v in enumerate([-5, 0, 3, None, 0, 7, 2, -9, 0.0, 4])])
    aggs = [AbsMax("v"), Quantile("v", q=0.25), CountDistinct("v"), MissingValuePercentage("v"), ZeroPercentage("v"),
            ZeroPercentage("v", ignore_nulls=False)]
    names = ["abs_max(v)", "quantile(v)", "count_distinct(v)", "missing_pct(v)", "zero_pct(v)", "zero_pct(v)_2"]
    groups = sorted(ds.groupby("g").aggregate(*aggs).take_all(), key=lambda r: r["g"])
    assert [[r[n] for n in names] for r in groups] == [[5.0, 0.0, 4, 0.0, 40.0, 40.0],
                                                       [9.0, -2.25, 4, 20.0, 25.0, 20.0]]
    whole = ds.aggregate(*aggs, Quantile("v", alias_name="median"))
    assert [whole[n] for n in names] == [9.0, 0.0, 7, 10.0, pytest.approx(100 / 3), 30.0] and whole["median"] == 0.0
    with pytest.raises(ValueError, match=r"Quantile\(q=2\): give a number from 0 to 1"):
        Quantile("v", q=2)
    with pytest.raises(ValueError, match=r"AbsMax\(on=None\): name the one column"):
        AbsMax()


class _Scaled:
    def __init__(self, k):
        self.k = k

    def __call__(self, batch, add):
        return {"g": batch["g"][:1], "s": [int(batch["v"].sum()) * self.k + add]}


def test_rays_keywords_for_map_groups_splits_sort_and_torch_batches():
    ds = md.from_items([{"g": i % 2, "v": i, "c": "a" if i < 8 else "b"} for i in range(10)])
    by_class = ds.groupby("g").map_groups(_Scaled, fn_constructor_args=(2,), fn_kwargs={"add": 1}).take_all()
    assert by_class == [{"g": 0, "s": 41}, {"g": 1, "s": 51}]
    sized = ds.groupby("g").map_groups(lambda b, m: {"g": b["g"][:1], "n": [len(b["v"]) * m]}, fn_args=(10,),
                                      concurrency=2)  # Ray's pool size: accepted, groups map here
    assert [r["n"] for r in sized.take_all()] == [50, 50]
    train, test = ds.train_test_split(0.5, stratify="c")
    assert sorted(r["c"] for r in train.take_all()) == sorted(r["c"] for r in test.take_all()) == ["a"] * 4 + ["b"]
    assert ids_of(ds.sort("v", descending=True, boundaries=[3, 6]))[:2] == [9, 8]
    assert ds.iterator().schema().names == ["g", "v", "c"]
    batch = next(iter(ds.select_columns(["v"]).iter_torch_batches(batch_size=4, pin_memory=True)))
    assert batch["v"].tolist() == [0, 1, 2, 3]  # pin_memory: no effect without CUDA


def ids_of(ds):
    return [r["v"] for r in ds.take_all()]


def test_shuffle_is_seeded_per_epoch_and_sort_groupby():
    ds = md.range(200).random_shuffle(seed=5)
    it = ds.iterator()
    first = [int(x) for b in it.iter_batches(batch_size=50) for x in b["id"]]
    second = [int(x) for b in it.iter_batches(batch_size=50) for x in b["id"]]
    assert sorted(first) == sorted(second) == list(range(200))
    assert first != second  # a new order each epoch ...
    again = [int(x) for b in md.range(200).random_shuffle(seed=5).iter_batches(batch_size=50) for x in b["id"]]
    assert again == first  # ... deterministic from (seed, epoch)
    fixed = md.range(200).random_shuffle(seed=md.RandomSeedConfig(5, reseed_after_execution=False)).iterator()
    passes = [[int(x) for b in fixed.iter_batches(batch_size=50) for x in b["id"]] for _ in range(2)]
    assert passes[0] == passes[1] != list(range(200))  # Ray's integer-seed behaviour, asked for by name
    per_pass = md.range(200).random_shuffle(seed=md.RandomSeedConfig(5)).iterator()
    again = [[int(x) for b in per_pass.iter_batches(batch_size=50) for x in b["id"]] for _ in range(2)]
    assert again == [first, second]
    with pytest.raises(TypeError, match="seed='5'"):
        md.range(3).random_shuffle(seed="5")
    assert ids(md.range(20).random_shuffle(seed=1).sort("id", descending=True))[:3] == [19, 18, 17]
    blocks = md.range(40, override_num_blocks=4).randomize_block_order(seed=2)
    assert sorted(ids(blocks)) == list(range(40)) and ids(blocks) != list(range(40))
    g = md.from_items([{"k": i % 3, "v": i} for i in range(9)]).groupby("k")
    assert g.count().take_all() == [{"k": 0, "count()": 3}, {"k": 1, "count()": 3}, {"k": 2, "count()": 3}]
    assert g.sum("v").take_all()[1] == {"k": 1, "sum(v)": 12}
    assert g.mean("v").take_all()[2] == {"k": 2, "mean(v)": 5.0}
    sizes = g.map_groups(lambda b: {"k": b["k"][:1], "n": np.array([len(b["v"])])}).take_all()
    assert sizes == [{"k": 0, "n": 3}, {"k": 1, "n": 3}, {"k": 2, "n": 3}]
    assert md.range(10).repartition(3).materialize().count() == 10
    assert md.range(10).sum("id") == 45 and md.range(10).max("id") == 9


def test_repartition_to_a_number_of_rows_per_block():
    """Ray's repartition(target_num_rows_per_block=): small blocks combined, big ones split. Before,
    a TypeError (num_blocks was required)."""
    ds = md.range(25, override_num_blocks=10).repartition(target_num_rows_per_block=10).materialize()
    assert [b.num_rows for b in ds._execute()] == [10, 10, 5]
    assert [r["id"] for r in ds.take_all()] == list(range(25))
    with pytest.raises(ValueError, match="not both"):
        md.range(5).repartition(2, target_num_rows_per_block=2)
    with pytest.raises(ValueError, match="not both"):
        md.range(5).repartition()
    with pytest.raises(ValueError, match="target_num_rows_per_block=0"):
        md.range(5).repartition(target_num_rows_per_block=0)


def test_data_context_takes_rays_cluster_settings_and_refuses_a_typo():
    """Ray scripts set ctx.target_min_block_size and the like (they tune a cluster: kept, no effect);
    before, any name was taken silently, so ctx.max_thread = 4 (a typo) changed nothing unnoticed."""
    ctx = md.DataContext()
    ctx.target_min_block_size = 1024 * 1024
    ctx.use_push_based_shuffle = True
    assert ctx.target_min_block_size == 1024 * 1024
    ctx.max_threads = 3
    assert ctx.max_threads == 3
    with pytest.raises(AttributeError, match=r"no setting 'max_thread'\. muster's: .*max_threads"):
        ctx.max_thread = 4

    # Ray's ingest guide: DataConfig.default_ingest_options(), resource_limits set, passed back
    from muster.train import DataConfig

    options = DataConfig.default_ingest_options()
    options.resource_limits = options.resource_limits.copy(object_store_memory=10e9)  # immutable, as Ray 2.60's
    options.preserve_order = False
    assert DataConfig(execution_options=options).execution_options.preserve_order is False
    with pytest.raises(AttributeError, match="execution_options.bogus: muster has preserve_order"):
        options.bogus = 1


def test_rays_execution_options_and_resources_are_importable_and_kept():
    """Ray's tuning idioms: ``from ray.data import ExecutionOptions, ExecutionResources`` (an
    UnsupportedRayImportError before) and ``resource_limits.copy(cpu=...)`` (an AttributeError before)."""
    import math

    from muster.data import ExecutionOptions, ExecutionResources
    from muster.train import DataConfig

    ctx = md.DataContext()
    limits = ctx.execution_options.resource_limits
    assert (limits.cpu, limits.memory) == (math.inf, math.inf)  # Ray's default: no limit
    ctx.execution_options.resource_limits = limits.copy(cpu=10, gpu=0, object_store_memory=2e9)
    want = ExecutionResources.for_limits(cpu=10, gpu=0, object_store_memory=2e9)
    assert ctx.execution_options.resource_limits == want
    assert ctx.execution_options.resource_limits.to_resource_dict()["GPU"] == 0
    ctx.execution_options.label_selector = {"ray-subcluster": "data"}  # Ray 2.60's option: kept
    assert ctx.execution_options.label_selector == {"ray-subcluster": "data"}
    # set whole, as Ray's scripts do; ExecutionOptions() has Ray's defaults (preserve_order off)
    ctx.execution_options = ExecutionOptions(
        resource_limits=ExecutionResources(cpu=8, gpu=1, object_store_memory=10e9), locality_with_output=True)
    assert ctx.preserve_order is False and ctx.execution_options.locality_with_output is True
    assert ctx.execution_options.resource_limits.cpu == 8 and ExecutionResources().gpu == 0
    assert ExecutionResources.from_resource_dict({"num_cpus": 2}).cpu == 2
    config = DataConfig(execution_options=ExecutionOptions(preserve_order=True))
    assert isinstance(config.execution_options, md.DataContext) and config.execution_options.preserve_order is True


def test_refs_materialized_datasets_and_rays_names():
    """Ray's saving guide: to_numpy_refs() gives refs (it gave the dicts, and muster.get refused them);
    MaterializedDataset is what materialize() and in-memory sources give (it was an AttributeError);
    Ray's other names fail naming the equivalent."""
    import muster
    from muster.exceptions import UnsupportedRayAPIError

    ds = md.range(5, override_num_blocks=2)
    assert [list(d["id"]) for d in muster.get(ds.to_numpy_refs())] == [[0, 1, 2], [3, 4]]
    assert [t.num_rows for t in muster.get(ds.to_arrow_refs())] == [3, 2]
    assert list(muster.get(ds.to_pandas_refs()[1])["id"]) == [3, 4]
    assert isinstance(ds.materialize(), md.MaterializedDataset) and isinstance(md.from_items([{"a": 1}]),
                                                                                md.MaterializedDataset)
    assert type(md.from_items([{"a": 1}]).map(lambda r: r)) is md.Dataset  # a transform is lazy again
    assert (md.DatasetContext, md.DatasetIterator, md.NodeIdStr) == (md.DataContext, md.DataIterator, str)
    # Ray's custom DataConfig sets the options whole: ctx.execution_options = DataConfig.default_ingest_options()
    ctx, options = md.DataContext(), md.DataConfig.default_ingest_options()
    options.preserve_order = True
    ctx.execution_options = options  # an AttributeError before
    assert ctx.preserve_order is True and ctx.execution_options.preserve_order is True
    import muster.train

    assert muster.train.TRAIN_DATASET_KEY == "train"
    for name in ("from_spark", "ShuffleStrategy"):
        with pytest.raises(UnsupportedRayAPIError, match="nearest equivalent"):
            getattr(md, name)
    with pytest.raises(UnsupportedRayAPIError, match=r"Partitioning.*partitioning='hive'"):
        md.datasource.Partitioning
    ctx = md.DataContext()
    ctx.max_errored_blocks = 0  # a Ray setting: kept, no effect


def test_filter_takes_rays_string_expressions():
    """Ray's transforming guide: filter(expr="..."). Before, a string was refused."""
    ds = md.from_items([{"id": i, "sepal.length": i / 2, "label": "ab"[i % 2]} for i in range(10)])
    assert [r["id"] for r in ds.filter(expr="id > 7").take_all()] == [8, 9]
    assert [r["id"] for r in ds.filter(expr="sepal.length >= 3.5 and label == 'b'").take_all()] == [7, 9]
    assert [r["id"] for r in ds.filter(expr="id in [1, 2] or not id < 9").take_all()] == [1, 2, 9]
    assert [r["id"] for r in ds.filter(expr="2 < id * 2 <= 6").take_all()] == [2, 3]
    with pytest.raises(ValueError, match=r"filter\(expr='id >'\): not an expression"):
        ds.filter(expr="id >")
    with pytest.raises(ValueError, match="'len\\(label\\)' is not supported"):
        ds.filter(expr="len(label) > 1")
    with pytest.raises(ValueError, match=r"-'a'.*'-' takes a number or a column"):
        ds.filter(expr="id > -'a'")


@pytest.mark.parametrize("text", ["id > 7", "sepal.length >= 3.5 and label == 'b'", "id in [1, 2] or not id < 9",
                                  "2 < id * 2 <= 6", "-id > -3", "id - 1 >= 7 and label not in ['a']",
                                  "label is None or id / 4 < 0.5", "label is not None and not (id + 1) * 2 > 10",
                                  "even == (not True) and id > 2"])
def test_a_string_filter_as_sent_to_ray_keeps_the_same_rows(text):
    """On the Ray engine a string filter goes as an expression of muster.data.expressions, then Ray's own (Ray
    deprecates string ones): that form keeps the very rows the string keeps here."""
    from muster.data.expr import parse_expr

    rows = [{"id": i, "sepal.length": i / 2, "label": None if i == 5 else "ab"[i % 2], "even": i % 2 == 0}
            for i in range(10)]
    ds = md.from_items(rows)
    sent = parse_expr(text)
    assert isinstance(sent, md.expressions.Expr)
    kept = [r["id"] for r in ds.filter(expr=text).take_all()]
    assert kept and kept != list(range(10))  # the filter does something
    assert [r["id"] for r in ds.filter(expr=sent).take_all()] == kept


def test_shuffle_plan_is_one_uniform_permutation_for_every_column_kind():
    """The two-level shuffle (many piles): numeric columns (scattered) and other columns (taken)
    land in the same order, every row once, and a row's final position is uniform over seeds."""
    from muster.data.alltoall import _Plan

    n = 1000
    table = pa.table({"id": np.arange(n), "s": [str(i) for i in range(n)]})
    plan = _Plan(seed=3, epoch=1, n=n, rows_per_pile=40)
    assert len(plan.bounds) - 1 == 32
    numeric = pa.concat_tables(list(plan.gather(table.select(["id"])))).column("id").to_pylist()
    general = pa.concat_tables(list(plan.gather(table))).column("s").to_pylist()
    assert sorted(numeric) == list(range(n)) and numeric != list(range(n))
    assert general == [str(i) for i in numeric]
    m, trials = 64, 3200
    where = np.zeros(m, dtype=int)  # the final position of row 0, over many epochs
    for epoch in range(trials):
        p = _Plan(seed=9, epoch=epoch, n=m, rows_per_pile=4)
        order = pa.concat_tables(list(p.gather(pa.table({"id": np.arange(m)})))).column("id").to_pylist()
        where[order.index(0)] += 1
    expected = trials / m
    chi2 = float(((where - expected) ** 2 / expected).sum())
    assert chi2 < 130, (chi2, where)  # 63 degrees of freedom: p < 1e-6 to fail when uniform


def test_shuffle_scatter_from_many_chunks_on_two_threads_keeps_rows_whole():
    """Numeric columns are scattered straight from their chunks, the rows split between two
    threads when there are many: the order is the plan's, whatever the chunking, and every row's
    columns stay together."""
    from muster.data.alltoall import _SCATTER_SPLIT_ROWS, _Plan

    n = _SCATTER_SPLIT_ROWS + 7
    plan = _Plan(seed=4, epoch=2, n=n, rows_per_pile=1 << 15)
    expected = np.concatenate([plan.order[a:b][plan.within[a:b]] for a, b in zip(plan.bounds[:-1], plan.bounds[1:])])
    ids_ = np.arange(n, dtype=np.int64)
    cuts = [0, 1000, n // 2 - 3, n // 2 + 5, n - 1, n]  # uneven chunks, one across the threads' split
    table = pa.Table.from_batches([
        pa.record_batch([pa.array(ids_[a:b]), pa.array(ids_[a:b].astype(np.float32) * 0.5)], names=["id", "x"])
        for a, b in zip(cuts[:-1], cuts[1:])
    ])
    assert table.column("id").num_chunks == 5
    out = pa.concat_tables(list(plan.gather(table)))
    got = out.column("id").to_numpy()
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(out.column("x").to_numpy(), got.astype(np.float32) * 0.5)


def test_splits():
    parts = md.range(10).split(3)
    assert [p.count() for p in parts] == [4, 4, 2]  # 5 blocks of 2 rows (4 CPUs); Ray 2.60's for 5 blocks
    assert [p.count() for p in md.range(10).split(3, equal=True)] == [3, 3, 3]
    a, b, c = md.range(10).split_at_indices([2, 5])
    assert ids(a) == [0, 1] and ids(b) == [2, 3, 4] and ids(c) == list(range(5, 10))
    train, test = md.range(10).train_test_split(0.3)
    assert train.count() == 7 and ids(test) == [7, 8, 9]
    train, test = md.range(10).train_test_split(4)
    assert train.count() == 6 and ids(test) == [6, 7, 8, 9]
    for bad in (1.5, 0, 11):  # plain and stratified splits say the same
        for kwargs in ({}, {"stratify": "id"}):
            with pytest.raises(ValueError, match=rf"test_size={bad}\): use a fraction in \(0, 1\) or a row count"):
                md.range(10).train_test_split(bad, **kwargs)


def test_streaming_split_keeps_every_row_by_default_as_rays():
    """Ray's ``streaming_split`` defaults to ``equal=False``; muster's was ``equal=True`` and dropped rows."""
    shards = md.range(7).streaming_split(2)
    got = sorted(int(x) for s in shards for b in s.iter_batches(batch_size=None) for x in b["id"])
    assert got == list(range(7))


def test_streaming_split_equal_every_row_once():
    ds = md.range(103).filter(lambda r: r["id"] % 5 != 0)  # 82 rows kept
    shards = ds.streaming_split(3, equal=True)
    got = [[int(x) for b in s.iter_batches(batch_size=7) for x in b["id"]] for s in shards]
    assert len({len(g) for g in got}) == 1 and len(got[0]) == 82 // 3
    flat = [x for g in got for x in g]
    assert len(flat) == len(set(flat))  # no row twice
    assert set(flat) <= {i for i in range(103) if i % 5}
    batches = [sum(1 for _ in s.iter_batches(batch_size=7)) for s in shards]
    assert len(set(batches)) == 1


def test_local_shuffle_seed_gives_the_same_order_every_pass():
    """Ray repeats a seeded local shuffle's order on every pass (muster reshuffled per epoch)."""
    ds = md.range(40)
    kw = dict(batch_size=4, local_shuffle_buffer_size=8, local_shuffle_seed=1)
    loader = ds.iter_batches(**kw)
    first, again = ([int(x) for b in loader for x in b["id"]] for _ in range(2))
    assert first == again != list(range(40)) and sorted(first) == list(range(40))
    assert [int(x) for b in ds.iter_batches(**kw) for x in b["id"]] == first
    assert [int(x) for b in ds.iter_torch_batches(**kw) for x in b["id"]] == first
    shard = ds.streaming_split(2, equal=True)[1]
    assert len({tuple(int(x) for b in shard.iter_batches(**kw) for x in b["id"]) for _ in range(2)}) == 1
    unseeded = ds.iter_batches(batch_size=4, local_shuffle_buffer_size=8)
    assert len({tuple(int(x) for b in unseeded for x in b["id"]) for _ in range(3)}) > 1
    from muster.data.iterator import DataIterator

    def epochs(it):  # a trainer's shard: its own seed, none in the call -> a new order each epoch, replayable
        loader = it.iter_batches(batch_size=4, local_shuffle_buffer_size=8)
        return [tuple(int(x) for b in loader for x in b["id"]) for _ in range(2)]

    trained = epochs(DataIterator(ds, seed=7))
    assert trained[0] != trained[1] and trained == epochs(DataIterator(ds, seed=7))


def test_iter_batches_options():
    ds = md.range(23)
    assert [len(b["id"]) for b in ds.iter_batches(batch_size=10)] == [10, 10, 3]
    assert [len(b["id"]) for b in ds.iter_batches(batch_size=10, drop_last=True)] == [10, 10]
    for pf in (0, 3):
        assert [int(x) for b in ds.iter_batches(batch_size=4, prefetch_batches=pf) for x in b["id"]] == list(range(23))
    shuffled = [int(x) for b in ds.iter_batches(batch_size=4, local_shuffle_buffer_size=8, local_shuffle_seed=1)
                for x in b["id"]]
    assert sorted(shuffled) == list(range(23)) and shuffled != list(range(23))
    assert isinstance(next(ds.iter_batches(batch_format="pandas")), pd.DataFrame)
    assert [r["id"] for r in ds.iter_rows()][:3] == [0, 1, 2]
    tb = next(ds.iter_torch_batches(batch_size=5, dtypes=torch.float32))
    assert tb["id"].dtype == torch.float32 and tb["id"].tolist() == [0, 1, 2, 3, 4]
    collated = next(ds.iter_torch_batches(batch_size=5, collate_fn=lambda b: torch.as_tensor(b["id"]) * 2))
    assert collated.tolist() == [0, 2, 4, 6, 8]
    from muster.data.collate_fn import ArrowBatchCollateFn, PandasBatchCollateFn

    class FromArrow(ArrowBatchCollateFn):  # Ray's collate_fn base classes: the batch comes in their format
        def __call__(self, table):
            return torch.as_tensor(table.column("id").to_numpy()) + 100

    class FromPandas(PandasBatchCollateFn):
        def __call__(self, df):
            return torch.as_tensor(df["id"].to_numpy()) - 1

    assert next(ds.iter_torch_batches(batch_size=3, collate_fn=FromArrow())).tolist() == [100, 101, 102]
    assert next(ds.iter_torch_batches(batch_size=3, collate_fn=FromPandas())).tolist() == [-1, 0, 1]
    assert "ReadRange" in ds.stats()


def test_an_iterable_made_once_gives_a_new_pass_each_time():
    """Ray's iter_* return iterables: a loader made once serves every epoch. Before, the second pass
    of muster's (a generator) was empty: a training loop trained on nothing after epoch 1."""
    ds = md.range(40, override_num_blocks=4).random_shuffle(seed=3)
    loader = ds.iter_torch_batches(batch_size=8)
    epochs = [[int(v) for b in loader for v in b["id"]] for _ in range(2)]
    assert [sorted(e) for e in epochs] == [list(range(40))] * 2 and epochs[0] != epochs[1]  # reshuffled
    rows = ds.iter_rows()
    assert [sum(1 for _ in rows) for _ in range(2)] == [40, 40]
    it_rows = ds.iterator().iter_rows()
    assert [sum(1 for _ in it_rows) for _ in range(2)] == [40, 40]
    batches = md.range(20).iter_batches(batch_size=10)
    assert [len(b["id"]) for b in batches] == [10, 10] and sum(1 for _ in batches) == 2
    assert list(next(batches)["id"][:2]) == [0, 1]  # next() on it goes through one pass of its own


def test_early_break_stops_the_pipeline(threads_only):
    made = []
    ds = md.range(10_000, override_num_blocks=100).map_batches(lambda b: made.append(1) or b, batch_size=None)
    for _ in ds.iter_batches(batch_size=10):
        break
    assert len(made) < 100  # only the blocks in flight were made, not the whole dataset


def test_a_forked_child_runs_pipelines_on_threads_of_its_own(threads_only):
    """A process forked after a pipeline ran (a DataLoader worker, a user's fork) inherits the
    thread pool but none of its threads: its pipelines must start threads of their own, not wait."""
    def double(b):
        return {"id": b["id"] * 2}

    assert ids(md.range(64, override_num_blocks=8).map_batches(double)) == list(range(0, 128, 2))
    assert check_in_fork(
        lambda: ids(md.range(64, override_num_blocks=8).map_batches(double)) == list(range(0, 128, 2))
    ) == "passed"


def test_python_functions_run_in_idle_pooled_workers():
    """The driver hands jobs with Python functions to the engine's idle workers (the session engine is up)."""
    rows = md.range(400, override_num_blocks=8).map(lambda r: {"pid": os.getpid()}).take_all()  # whole pass: no job
    pids = {r["pid"] for r in rows}  # is left running when the test ends
    assert pids - {os.getpid()}  # some jobs ran in other processes


def test_driver_pipeline_runs_inline_when_every_cpu_is_held():
    import muster

    @muster.remote(num_cpus=TEST_CPUS)
    class Hog:
        def ping(self):
            return os.getpid()

    hog = Hog.remote()
    try:
        muster.get(hog.ping.remote(), timeout=60)  # it holds every CPU now
        rows = md.range(200, override_num_blocks=4).map(lambda r: {"pid": os.getpid()}).take_all()
        assert {r["pid"] for r in rows} == {os.getpid()}
    finally:
        muster.kill(hog)


def test_torch_tensors_in_rows_are_stored_as_numpy_as_in_ray(tmp_path):
    # "Working with PyTorch": a map that returns tensors, and items holding tensors (a 0-d one too)
    images = md.from_items([{"image": np.full((2, 2), i, np.float32)} for i in range(3)])
    mapped = images.map(lambda row: {"tensor": torch.as_tensor(np.array(row["image"])) * 2})
    assert [r["tensor"].tolist() for r in mapped.take_all()] == [[[2 * i] * 2] * 2 for i in range(3)]
    assert mapped.take(1)[0]["tensor"].dtype == np.float32
    items = md.from_items([{"tensor": torch.ones(3), "label": torch.tensor(7)} for _ in range(2)])
    row = items.take(1)[0]
    assert row["tensor"].tolist() == [1.0, 1.0, 1.0] and row["label"] == 7
    items.write_parquet(str(tmp_path / "t"))  # "Saving Datasets containing torch tensors"
    assert md.read_parquet(str(tmp_path / "t")).count() == 2


def test_transposed_arrays_and_permuted_tensors_keep_their_logical_shape(tmp_path):
    """HWC->CHW with np.transpose or torch's permute returns a view whose memory is not row-major; muster's
    schema gave the memory's shape ((4, 5, 3) for a (3, 4, 5) array) and reading the rows raised ArrowInvalid."""
    chw = np.arange(60).reshape(4, 5, 3).transpose(2, 0, 1)
    made = {
        "from_items": md.from_items([{"x": np.arange(6).reshape(2, 3).T}] * 2),
        "map": md.range(2).map(lambda r: {"x": chw}),
        "flat_map": md.range(1).flat_map(lambda r: [{"x": chw}, {"x": chw + 1}]),
        "torch": md.range(2).map(lambda r: {"x": torch.as_tensor(np.arange(60).reshape(4, 5, 3)).permute(2, 0, 1)}),
    }
    for how, ds in made.items():
        want = np.arange(6).reshape(2, 3).T if how == "from_items" else chw
        assert ds.schema().types[0].shape == want.shape, how
        rows = ds.take_all()
        assert all(r["x"].shape == want.shape for r in rows) and np.array_equal(rows[0]["x"], want), how
    made["from_items"].write_parquet(str(tmp_path / "t"))
    back = md.read_parquet(str(tmp_path / "t")).take(1)[0]["x"]
    assert np.array_equal(back, np.arange(6).reshape(2, 3).T)


def test_fixed_shape_bool_and_string_tensors_read_back_with_their_dtype(tmp_path):
    """Arrow's tensors hold numbers only: reading a 2-D bool or str column raised ArrowTypeError (Ray reads them)."""
    flags = np.array([[True, False], [False, True]])
    made = {
        "from_numpy": (md.from_numpy(flags), "data", flags),
        "from_items": (md.from_items([{"m": row} for row in flags]), "m", flags),
        "map_batches": (md.range(2).map_batches(lambda b: {"m": np.stack([b["id"] == 0, b["id"] == 1], 1)}), "m",
                        flags),
        "str": (md.from_numpy(np.array([["a", "bc"], ["d", "e"]])), "data", np.array([["a", "bc"], ["d", "e"]])),
        "bytes": (md.from_numpy(np.array([[b"a"], [b"bc"]])), "data", np.array([[b"a"], [b"bc"]])),
    }
    for how, (ds, name, want) in made.items():
        assert ds.schema().types[0].shape == want.shape[1:], how
        for got in (np.stack([r[name] for r in ds.take_all()]), ds.take_batch(2)[name],
                    np.stack(list(ds.take_batch(2, batch_format="pandas")[name]))):
            assert got.dtype == want.dtype and np.array_equal(got, want), how
        ds.write_parquet(str(tmp_path / how))
        back = md.read_parquet(str(tmp_path / how)).take_batch(2)[name]
        assert back.dtype == want.dtype and np.array_equal(back, want), how


class _BatchLength:
    def __call__(self, batch):
        return {"n": np.array([len(batch["id"])])}


def test_map_batches_of_a_given_size_spans_small_blocks_as_rays(tmp_path):
    """Ray bundles blocks smaller than an explicit batch_size; muster mapped each block alone, so batch inference
    over one-row files (read_images) got batches of 1 whatever the batch_size."""
    def lengths(ds, **options):
        return [r["n"] for r in ds.map_batches(lambda b: {"n": np.array([len(b["id"])])}, **options).take_all()]

    small = md.range(60, override_num_blocks=20)
    assert lengths(small, batch_size=8) == [8, 1] * 6 + [6]  # Ray 2.60's own, for the same call
    assert lengths(small) == [3] * 20 and lengths(small, batch_size=None) == [3] * 20  # whole blocks by default
    assert lengths(small.map(lambda r: r), batch_size=8) == [8, 1] * 6 + [6]  # fused after a map too
    assert [r["n"] for r in small.map_batches(_BatchLength, batch_size=8, concurrency=1).take_all()] == (
        [8, 1] * 6 + [6])  # an actor pool's input too
    assert lengths(small.random_shuffle(seed=1), batch_size=8) == [8] * 7 + [4]  # blocks after a shuffle too
    for i in range(20):  # one file per few rows, as read_images has one per image
        pa.csv.write_csv(pa.table({"id": [3 * i, 3 * i + 1, 3 * i + 2]}), str(tmp_path / f"{i:02}.csv"))
    files = lengths(md.read_csv(str(tmp_path)), batch_size=8)
    assert sum(files) == 60 and files.count(8) >= 6, files
    spans = md.range(60, override_num_blocks=20).map_batches(lambda b: b, batch_size=8)
    assert [r["id"] for r in spans.take_all()] == list(range(60))  # every row once, in order


def test_rays_file_reader_options_pick_order_and_skip_files(tmp_path):
    from muster.data.datasource import PathPartitionFilter

    for target in (0, 1):
        for part in range(3):
            folder = tmp_path / "p" / f"target={target}"
            folder.mkdir(parents=True, exist_ok=True)
            pa.parquet.write_table(pa.table({"v": [target * 10 + part]}), str(folder / f"{part}.parquet"))
    root = str(tmp_path / "p")
    zero = md.read_parquet(root, partition_filter=PathPartitionFilter.of(lambda d: d["target"] == "0"))
    assert sorted(zero.to_pandas()["v"]) == [0, 1, 2]  # Ray's partition_filter: only those folders are read
    by_paths = md.read_parquet(root, partition_filter=lambda paths: [p for p in paths if "target=1" in p])
    assert sorted(by_paths.to_pandas()["v"]) == [10, 11, 12]
    plain = list(md.read_parquet(root).to_pandas()["v"])
    seeded = [list(md.read_parquet(root, shuffle=md.FileShuffleConfig(seed=s)).to_pandas()["v"]) for s in (1, 1, 2)]
    assert seeded[0] == seeded[1] and sorted(seeded[0]) == sorted(plain)  # same seed, same file order
    assert any(list(md.read_parquet(root, shuffle="files").to_pandas()["v"]) != plain for _ in range(8))
    assert md.read_parquet([root, str(tmp_path / "missing")], ignore_missing_paths=True).count() == 6
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['colums'\]"):
        md.read_parquet(root, colums=["v"])  # a typo used to read every column
    # Ray 2.60's task options of its read tasks: no effect here (read_parquet refused them; read_csv handed them
    # to pyarrow, which failed when the data was read)
    placed = {"num_cpus": 1, "memory": 1e6, "resources": {"CPU": 1}, "max_calls": 2}
    assert md.read_parquet(root, **placed).count() == 6
    pa.csv.write_csv(pa.table({"v": [1, 2]}), str(tmp_path / "v.csv"))
    assert md.read_csv(str(tmp_path / "v.csv"), **placed).count() == 2


def test_arrays_of_different_shapes_keep_their_dtype_and_combine(tmp_path):
    # Ray's variable-shaped tensors: images of different sizes (from_items, or decoded by a map)
    ds = md.from_items([{"image": np.full((h, 4, 3), h, np.uint8)} for h in (2, 3)])
    rows = ds.take_all()
    assert [(r["image"].dtype, r["image"].shape) for r in rows] == [(np.uint8, (2, 4, 3)), (np.uint8, (3, 4, 3))]
    # blocks whose own images agree in shape, but not with each other's, combine in every consumer
    decoded = md.range(6, override_num_blocks=3).map(lambda r: {"image": np.ones((r["id"] % 2 + 2, 5), np.float32)})
    shapes = [x.shape for x in decoded.take_batch(6)["image"]]
    assert shapes == [(2, 5), (3, 5)] * 3
    assert decoded.to_pandas()["image"].map(lambda a: a.dtype == np.float32).all()
    assert decoded.random_shuffle(seed=1).count() == decoded.repartition(2).count() == 6
    decoded.write_parquet(str(tmp_path / "rag"))  # and the type survives a Parquet round trip
    back = md.read_parquet(str(tmp_path / "rag")).take_batch(6)["image"]
    assert sorted(x.shape for x in back) == sorted(shapes) and all(x.dtype == np.float32 for x in back)
    # files written one shape each (each block's images agreed) read back as one dataset
    for h in (2, 4):
        md.from_items([{"image": np.ones((h, 3), np.uint8)}] * 2).write_parquet(str(tmp_path / "two"))
    read_back = sorted(r["image"].shape for r in md.read_parquet(str(tmp_path / "two")).iter_rows())
    assert read_back == [(2, 3)] * 2 + [(4, 3)] * 2


def test_schema_prints_and_answers_as_rays():
    from muster.data.context import DataContext  # Ray's module path

    assert DataContext.get_current() is md.DataContext.get_current()
    schema = md.from_items([{"id": 1, "name": "a", "img": np.zeros((2, 2), np.uint8)}]).schema()
    assert repr(schema) == ("Column  Type\n------  ----\nid      int64\nname    string\n"
                            "img     ArrowTensorTypeV2(shape=(2, 2), dtype=uint8)")
    assert schema.names == ["id", "name", "img"] and schema.types[0] == pa.int64()
    assert isinstance(schema.base_schema, pa.Schema) and schema.field("name").type == pa.string()


def test_add_column_that_returns_a_frame_or_a_scalar_says_what_it_must_return():
    from muster.data import DataTypeError

    two = md.from_items([{"id": i, "x": i} for i in range(6)])
    with pytest.raises(DataTypeError,
                       match=r"returned a DataFrame \(columns \['id', 'x'\]\); it must return the one new"):
        two.add_column("g", lambda df: df % 3).take_all()
    with pytest.raises(DataTypeError, match=r"returned 5; it must return one value per row"):
        md.range(4).add_column("g", lambda df: 5).take_all()
    assert [r["g"] for r in md.range(4).add_column("g", lambda df: df["id"] % 2).take_all()] == [0, 1, 0, 1]


def test_rays_expressions_in_with_column_and_filter():
    from muster.data import DataTypeError
    from muster.data.expressions import col, lit

    ds = md.from_items([{"a": i, "b": 2 * i, "label": "x" if i % 2 else "y"} for i in range(5)])
    assert [r["total"] for r in ds.with_column("total", col("a") + col("b") * lit(2)).take_all()] == [0, 5, 10, 15, 20]
    assert [r["a"] for r in ds.with_column("a", col("a") * 10).take_all()] == [0, 10, 20, 30, 40]  # replaced in place
    assert ds.filter(expr=(col("a") > 1) & (col("label") == "x")).take_all() == [{"a": 3, "b": 6, "label": "x"}]
    with pytest.raises(DataTypeError, match=r"(?s)with_column\('z'.*nope.*columns are \['a', 'b', 'label'\]"):
        ds.with_column("z", col("nope") + 1).take_all()
    with pytest.raises(TypeError, match="pass an expression such as col"):
        ds.with_column("z", lambda row: 1)


def test_whole_dataset_results_and_guards_as_rays():
    """One aggregate is a value, not a dict; two of one name are both kept; take_all/to_pandas(limit)
    refuse a bigger dataset; Ray's batch_size="auto" and keywords are taken (each differed or failed)."""
    from muster.data.aggregate import Count, Unique

    ds = md.range(10)
    assert (ds.sum(), ds.min(), ds.max(), ds.mean(), ds.sum(["id"])) == (45, 0, 9, 4.5, 45)
    two = md.from_items([{"a": 1, "b": 2.0}, {"a": 3, "b": None}])
    assert two.sum() == {"sum(a)": 4, "sum(b)": 2.0}
    assert two.aggregate(Count("b"), Count("b", ignore_nulls=True)) == {"count(b)": 2, "count(b)_2": 1}
    grouped = two.groupby("a").aggregate(Count("b"), Count("b", ignore_nulls=True)).take_all()
    assert grouped == [{"a": 1, "count(b)": 1, "count(b)_2": 1}, {"a": 3, "count(b)": 1, "count(b)_2": 0}]
    assert sorted(two.aggregate(Unique("b"))["unique(b)"], key=str) == [2.0, None]  # crashed on the null
    assert two.unique("b", ignore_nulls=True) == [2.0] and None in two.unique("b")
    lists = md.from_items([{"l": [1, 2]}, {"l": [1, 2]}, {"l": [3]}, {"l": None}])  # pyarrow has no list kernel
    assert lists.unique("l") == [[1, 2], [3], None] and lists.unique("l", ignore_nulls=True) == [[1, 2], [3]]
    with pytest.raises(TypeError, match=r"unique\('s'\): column 's' is of type struct<a: int64>.*scalar field"):
        md.from_items([{"s": {"a": 1}}]).unique("s")
    assert np.isnan(two.std("b"))  # one value: NaN for ddof=1, as Ray's (it was None), also per group
    by_a = two.groupby("a").std("b").take_all()
    assert np.isnan(by_a[0]["std(b)"]) and by_a[1]["std(b)"] is None  # no value at all: None
    assert md.from_items([{"v": None}]).std("v") is None  # an all-null column crashed pyarrow
    with pytest.raises(ValueError, match=r"take_all\(limit=5\): the dataset has more than 5 rows"):
        ds.take_all(limit=5)
    with pytest.raises(ValueError, match=r"to_pandas\(limit=3\)"):
        ds.to_pandas(limit=3)
    assert len(ds.take_all(limit=10)) == 10 and ds.to_pandas(limit=10).shape == (10, 1)
    assert ids(ds.map_batches(lambda b: b, batch_size="auto")) == list(range(10))
    assert ds.columns(fetch_if_missing=True) == ["id"] and ds.schema(fetch_if_missing=False).names == ["id"]
    import muster

    assert np.concatenate(muster.get(ds.to_numpy_refs(column="id"))).tolist() == list(range(10))


def test_join_as_rays():
    """Ray Data's join (it was missing): every join type, keys named differently, suffixes."""
    left = md.from_items([{"id": i, "v": f"l{i}"} for i in range(5)])
    right = md.from_items([{"key": i, "w": i * 10} for i in range(3, 8)])

    def rows(ds):
        return sorted(ds.take_all(), key=lambda r: (r.get("id") is None, r.get("id"), r.get("key")))

    inner = left.join(right, "inner", 2, on=("id",), right_on=("key",))
    assert rows(inner) == [{"id": 3, "v": "l3", "w": 30}, {"id": 4, "v": "l4", "w": 40}]
    assert inner.num_blocks() == 2  # num_partitions blocks
    counts = {t: left.join(right, t, 1, on="id", right_on="key").count()
              for t in ("left_outer", "right_outer", "full_outer", "left_semi", "left_anti", "right_anti")}
    assert counts == {"left_outer": 5, "right_outer": 5, "full_outer": 8, "left_semi": 2, "left_anti": 3,
                      "right_anti": 3}
    with pytest.raises(ValueError, match=r"columns \['v'\] from both datasets; pass left_suffix="):
        left.join(left, "inner", 1)  # one side's v would be lost
    clash = md.from_items([{"key": 3, "id": 30}])  # its id is not a key, and the left's key is named so
    with pytest.raises(ValueError, match=r"columns \['id'\] from both datasets; pass left_suffix="):
        left.join(clash, "inner", 1, on="id", right_on="key").take_all()  # (it had two 'id' columns, then KeyError)
    assert left.join(clash, "inner", 1, on="id", right_on="key", right_suffix="_r").take_all() == [
        {"id": 3, "v": "l3", "id_r": 30}]
    assert rows(left.join(left, "inner", 1, right_suffix="_r"))[0] == {"id": 0, "v": "l0", "v_r": "l0"}
    with pytest.raises(ValueError, match="join_type='cross'"):
        left.join(right, "cross", 1)
    with pytest.raises(ValueError, match="no column 'nope'"):
        left.join(right, "inner", 1, on="nope")  # both schemas known: refused at once
    lazy = left.map_batches(lambda b: b).join(right, "inner", 1, on="nope")  # lazy, as Ray's: refused when it runs
    with pytest.raises(ValueError, match="no column 'nope'"):
        lazy.take_all()


@pytest.mark.parametrize("join_type", ["inner", "left_outer", "right_outer", "full_outer"])
def test_join_suffixes_rename_columns_as_rays_do(join_type):
    """Ray's rule: a left key keeps its name. With only ``left_suffix``, pyarrow renamed the left key ``k``
    to ``k_l`` where the right has a non-key ``k``; Ray keeps ``k`` and gives the right one ``_right``."""
    left = md.from_items([{"k": i, "v": i * 10} for i in range(1, 4)])
    right = md.from_items([{"rk": i, "k": i * 100, "v": float(i)} for i in range(2, 5)])

    def names(**suffixes) -> list[str]:
        return left.join(right, join_type, 1, on="k", right_on="rk", **suffixes).schema().names

    right_outer = join_type == "right_outer"  # its left key leaves the output; the right's keys stay
    assert names(left_suffix="_l") == (["v_l", "rk", "k", "v"] if right_outer else ["k", "v_l", "k_right", "v"])
    assert names(right_suffix="_r") == (["v", "rk", "k_r", "v_r"] if right_outer else ["k", "v", "k_r", "v_r"])
    assert names(left_suffix="_l", right_suffix="_r")[-2:] == ["k_r", "v_r"]
    if join_type == "inner":
        assert sorted(left.join(right, join_type, 1, on="k", right_on="rk", left_suffix="_l").take_all(),
                      key=lambda r: r["k"]) == [{"k": 2, "v_l": 20, "k_right": 200, "v": 2.0},
                                                {"k": 3, "v_l": 30, "k_right": 300, "v": 3.0}]
    taken = md.from_items([{"k": 1, "v": 1, "v_l": 2}])
    with pytest.raises(ValueError, match=r"left_suffix would rename column 'v' to 'v_l', which that dataset already"):
        taken.join(right, join_type, 1, on="k", right_on="rk", left_suffix="_l").take_all()
