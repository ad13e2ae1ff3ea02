"""``GroupedData.with_column``: Ray 2.60's docstring example, and its errors."""

from __future__ import annotations

import pytest

import muster.data as md
from muster.data.exceptions import DataTypeError
from muster.data.expressions import col
from muster.exceptions import InvalidArgumentError, InvalidTypeError


def test_with_column_adds_the_expression_to_every_row_group_by_group():
    ds = md.from_items([{"group": 1, "value": 1}, {"group": 1, "value": 2}])
    out = ds.groupby("group").with_column("value_twice", col("value") * 2).sort(["group", "value"])
    assert out.take_all() == [{"group": 1, "value": 1, "value_twice": 2}, {"group": 1, "value": 2, "value_twice": 4}]
    rows = md.from_items([{"g": i % 2, "v": i} for i in range(5)]).groupby("g").with_column("w", col("v") + 1)
    assert rows.take_all() == [{"g": g, "v": v, "w": v + 1} for g, v in [(0, 0), (0, 2), (0, 4), (1, 1), (1, 3)]]


def test_with_column_names_what_is_wrong():
    grouped = md.range(3).groupby("id")
    with pytest.raises(InvalidArgumentError, match="column_name=''"):
        grouped.with_column("", col("id"))
    with pytest.raises(InvalidTypeError, match="col\\('a'\\) \\* 2"):
        grouped.with_column("x", 3)
    with pytest.raises(DataTypeError, match="nope.*columns are \\['id'\\]"):
        grouped.with_column("x", col("nope") + 1).take_all()
