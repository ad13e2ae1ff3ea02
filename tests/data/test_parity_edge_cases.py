"""Small edge cases run under Ray 2.60 and muster: a ``take_batch``/``show`` given a bad size, whole-dataset
aggregations of an empty dataset, and ``ray.data.aggregate`` reached as an attribute of the package."""

from __future__ import annotations

import subprocess
import sys

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
