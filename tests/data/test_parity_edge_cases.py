"""Small edge cases run under Ray 2.60 and muster: a ``take_batch``/``show``/``take``/``limit`` given a bad size,
``range`` of a negative count, whole-dataset aggregations of an empty dataset, ``ray.data.aggregate`` reached as an
attribute of the package, and tensor columns that hold None in some rows."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

import muster.data as md
from muster.exceptions import InvalidArgumentError


@pytest.mark.parametrize("size", [0, -1])
def test_take_batch_names_a_batch_size_below_one(size):
    """Ray 2.60's ``range(10).take_batch(0)`` (and ``-1``) raises ``ValueError: The dataset is empty.``, of a
    dataset of 10 rows. muster said the same (and ``limit(-1)`` for -1); now it names the bad value."""
    with pytest.raises(InvalidArgumentError, match=rf"take_batch\(batch_size={size}\): use a positive integer"):
        md.range(10).take_batch(size)
    assert md.range(10).take_batch(1)["id"].tolist() == [0]


def test_show_names_itself_for_a_negative_limit(capsys):
    """``take(-1)`` is an error in muster (Ray gives ``[]``, and ``limit(-1)`` a dataset whose ``count()`` is -1);
    ``show(-1)``, which Ray gives nothing to print, said ``take(-1)``; it names ``show``. ``show(0)`` prints
    nothing, as Ray's."""
    with pytest.raises(InvalidArgumentError, match=r"show\(-1\): use an integer >= 0"):
        md.range(10).show(-1)
    md.range(10).show(0)
    md.range(3).show(2)
    assert capsys.readouterr().out == "{'id': 0}\n{'id': 1}\n"


def test_aggregations_of_an_empty_dataset_are_rays():
    """Ray 2.60 gives None for sum/min/max/mean/std of an empty column, 0 rows, and no groups."""
    for empty in (md.range(0), md.range(10).filter(lambda r: False)):
        assert [getattr(empty, agg)("id") for agg in ("sum", "min", "max", "mean", "std")] == [None] * 5
        assert empty.count() == 0
        assert empty.unique("id") == []  # Ray: [] after the filter; None (not its documented list) of range(0)
    assert md.range(0).groupby("id").count().take_all() == []


def test_aggregate_and_collate_fn_are_attributes_of_the_package_as_in_ray():
    """``import ray.data`` then ``ray.data.aggregate.Count()`` works in Ray 2.60 (so does ``ray.data.collate_fn``);
    in muster they were an AttributeError until the submodule was imported. A fresh interpreter, so nothing else
    has imported them."""
    code = "import muster.data as md; print(md.aggregate.Count().name, md.collate_fn.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["count()", "muster.data.collate_fn"]


def test_take_and_limit_name_a_negative_count():
    """Ray 2.60 gives ``[]`` for ``take(-1)`` and, for ``limit(-1)``, a dataset whose rows are ``[]`` but whose
    ``count()`` is -1: no one answer to match, so muster names the value and the fix."""
    with pytest.raises(InvalidArgumentError, match=r"take\(-1\): use an integer >= 0"):
        md.range(5).take(-1)
    with pytest.raises(InvalidArgumentError, match=r"limit\(-1\): use an integer >= 0"):
        md.range(5).limit(-1)
    assert md.range(5).take(0) == [] and md.range(5).limit(0).count() == 0


def test_range_of_a_negative_count_is_empty_as_in_ray():
    """Ray 2.60's ``range(-3)`` and ``range_tensor(-2)`` are empty datasets (as Python's ``range(-3)``); muster
    refused them. A numpy integer is a count too; a float is named."""
    assert md.range(-3).take_all() == [] and md.range(-3, override_num_blocks=2).count() == 0
    assert md.range_tensor(-2, shape=(2,)).count() == 0 and md.range(0).count() == 0
    assert md.range(np.int64(2)).take_all() == [{"id": 0}, {"id": 1}]
    with pytest.raises(InvalidArgumentError, match=r"range\(2.5\): use an integer"):
        md.range(2.5)


def _cells(values):
    return [None if v is None else np.asarray(v).tolist() for v in values]


def _tensors_then_none(shape):
    """Blocks of arrays then blocks of only None (typed null): from_items' slices, and a map's output."""
    yield md.from_items([{"x": np.full(shape, i)} for i in range(3)] + [{"x": None}] * 3, override_num_blocks=2)
    yield md.range(6, override_num_blocks=2).map(lambda r: {"x": np.full(shape, r["id"]) if r["id"] < 3 else None})


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_none_rows_of_a_tensor_column_stay_none_in_every_format(shape):
    """Ray 2.60 gives each row's ndarray and None from ``iter_rows``/``take`` for these; muster raised
    ``ArrowInvalid: Array contains nulls`` (take, to_pandas, batches spanning both blocks), or, from from_items,
    gave lists for 1-d arrays. (Ray itself fails in to_pandas and batches that span the blocks.)"""
    want = [np.full(shape, i).tolist() for i in range(3)] + [None] * 3
    for ds in _tensors_then_none(shape):
        rows = ds.take_all()
        assert all(isinstance(r["x"], np.ndarray) for r in rows[:3]) and _cells(r["x"] for r in rows) == want
        assert _cells(r["x"] for r in ds.iter_rows()) == want
        assert _cells(ds.to_pandas()["x"]) == want and isinstance(ds.to_pandas()["x"][0], np.ndarray)
        [batch] = list(ds.iter_batches(batch_size=6))
        assert batch["x"].dtype == object and _cells(batch["x"]) == want
        [frame] = list(ds.iter_batches(batch_size=6, batch_format="pandas"))
        assert _cells(frame["x"]) == want
        [table] = list(ds.iter_batches(batch_size=6, batch_format="pyarrow"))
        assert isinstance(table.schema.field("x").type, pa.FixedShapeTensorType) and table["x"].null_count == 3
        assert _cells(ds.take_batch(6)["x"]) == want
        assert [b["x"].shape for b in ds.iter_batches(batch_size=3)] == [(3, *shape), (3,)]  # each block's own


def test_none_rows_of_a_tensor_column_through_union_sort_shuffle_groupby_and_parquet(tmp_path):
    """The same column through the all-to-all operations and a Parquet round trip: Ray 2.60 gives these values
    for union, sort, filter, limit and map_batches (its shuffle, repartition, groupby and Parquet read fail)."""
    ds = md.range(6, override_num_blocks=2).map(
        lambda r: {"id": r["id"], "k": r["id"] % 2, "x": np.full((2, 2), r["id"]) if r["id"] < 3 else None})
    want = [np.full((2, 2), i).tolist() for i in range(3)] + [None] * 3

    def by_id(d):
        return _cells(r["x"] for r in sorted(d.take_all(), key=lambda r: r["id"]))

    assert _cells(r["x"] for r in ds.sort("id", descending=True).take_all()) == want[::-1]
    assert by_id(ds.union(md.from_items([{"id": 9, "k": 1, "x": np.ones((2, 2), np.int64)}]))) == want + [[[1, 1]] * 2]
    assert by_id(ds.random_shuffle(seed=1)) == want and by_id(ds.repartition(1)) == want
    assert by_id(ds.filter(lambda r: r["id"] > 1)) == want[2:] and by_id(ds.limit(4)) == want[:4]
    assert by_id(ds.map_batches(lambda b: b, batch_size=6)) == want
    assert by_id(ds.map_batches(lambda df: df, batch_size=6, batch_format="pandas")) == want
    firsts = ds.groupby("k").map_groups(lambda b: {"k": b["k"][:1], "x": b["x"][:1]}).take_all()
    assert sorted((r["k"], _cells([r["x"]])[0]) for r in firsts) == [(0, want[0]), (1, want[1])]
    ds.write_parquet(str(tmp_path))
    assert by_id(md.read_parquet(str(tmp_path))) == want


def test_none_among_arrays_in_one_block():
    """Ray 2.60 keeps 2-d arrays mixed with None in one block (as Python objects): the same arrays and None come
    back; muster refused them. 1-d ones make a list column in both (rows give lists). Variable shapes with None
    keep each shape."""
    rows = [{"x": np.zeros((2, 2))}, {"x": None}, {"x": np.ones((2, 2))}]
    got = md.from_items(rows).take_all()
    assert isinstance(got[0]["x"], np.ndarray) and _cells(r["x"] for r in got) == [[[0.0] * 2] * 2, None,
                                                                                     [[1.0] * 2] * 2]
    mapped = md.from_items([{"i": 0}, {"i": 1}]).map(lambda r: {"img": np.ones((2, 2)) if r["i"] else None})
    assert _cells(r["img"] for r in mapped.take_all()) == [None, [[1.0] * 2] * 2]
    assert md.from_items([{"x": np.zeros(2)}, {"x": None}]).take_all() == [{"x": [0.0, 0.0]}, {"x": None}]
    ragged = md.range(6, override_num_blocks=3).map(
        lambda r: {"id": r["id"], "x": None if r["id"] in (2, 3) else np.full((r["id"] // 2 + 1,) * 2, r["id"])})
    shapes = [None, None, (1, 1), (1, 1), (3, 3), (3, 3)]
    assert sorted((getattr(r["x"], "shape", None) for r in ragged.take_all()), key=str) == sorted(shapes, key=str)
    assert [getattr(v, "shape", None) for v in ragged.take_batch(6)["x"]] == [(1, 1)] * 2 + [None] * 2 + [(3, 3)] * 2
    with pytest.raises(md.DataTypeError, match=r"column 'x' mixes 1-d array, 2-d array, NoneType values"):
        md.from_items([{"x": np.zeros((2, 2))}, {"x": None}, {"x": np.zeros(2)}])
