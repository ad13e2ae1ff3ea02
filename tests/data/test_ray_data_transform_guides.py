"""Ray Data 2.60's user guides (Transforming Data, Aggregating Data, Shuffling Data, Inspecting Data), ported by
``import muster`` / ``muster.data``: what each one showed differently from Ray before its fix. The expected
values are what Ray 2.60 printed for the same calls."""

from __future__ import annotations

import pandas as pd

import muster.data as md
from muster.data.expressions import col, lit


def _table(rows: str, header: list[tuple[str, str]]) -> str:
    """Ray's column/type table of an unread dataset (each cell padded to its column's widest text)."""
    widths = [max(len(n), len(t), 3) for n, t in header]

    def row(cells: list[str]) -> str:
        return "│" + "┆".join(f" {c.ljust(w)} " for c, w in zip(cells, widths)) + "│"

    return "\n".join([f"shape: ({rows}, {len(header)})", "╭" + "┬".join("─" * (w + 2) for w in widths) + "╮",
                      row([n for n, _ in header]), row(["---"] * len(header)), row([t for _, t in header]),
                      "╰" + "┴".join("─" * (w + 2) for w in widths) + "╯", "(Dataset isn't materialized)"])


def test_select_rename_and_with_column_over_a_known_schema_print_rays_table():
    """Ray 2.60 infers a projection's schema (``select_columns``, ``rename_columns``, ``with_column`` of
    columns, literals and operators) from its input's, so ``print(ds)`` shows the table, with the input's rows;
    ``schema(fetch_if_missing=False)`` answers too. Before, the plan form, ``Project`` above the source, and
    ``schema(fetch_if_missing=False)`` was None."""
    assert repr(md.range(3).select_columns(["id"])) == _table("3", [("id", "int64")])
    assert repr(md.range(3).rename_columns({"id": "x"})) == _table("3", [("x", "int64")])
    assert repr(md.range(3).rename_columns(["x"])) == _table("3", [("x", "int64")])
    assert repr(md.range(3).with_column("id_2", col("id") * 2)) == _table("3", [("id", "int64"), ("id_2", "int64")])
    assert repr(md.range(3).with_column("y", col("id") / 2)) == _table("3", [("id", "int64"), ("y", "int64")])
    items = md.from_items([{"a": 1, "b": "x"}])
    assert repr(items.with_column("y", col("b") + lit("z"))) == _table(
        "1", [("a", "int64"), ("b", "string"), ("y", "string")])
    assert repr(items.with_column("y", col("a") > 0)) == _table("1", [("a", "int64"), ("b", "string"), ("y", "bool")])
    assert repr(md.range(10).limit(4).select_columns(["id"])) == _table("4", [("id", "int64")])
    unread = md.range(3).select_columns(["id"]).schema(fetch_if_missing=False)
    assert str(unread) == "Column  Type\n------  ----\nid      int64"
    # unknown input, or a column the input lacks: the plan form, as Ray's; the error when it runs
    assert repr(md.range(3).map(lambda r: r).select_columns(["id"])).splitlines()[:2] == ["Project", "+- Map(<lambda>)"]
    missing = md.range(3).select_columns(["nope"])
    assert repr(missing) == "Project\n+- Dataset(num_rows=3, schema={id: int64})"
    assert md.range(3).select_columns(["id"]).take_all() == [{"id": 0}, {"id": 1}, {"id": 2}]


def test_grouped_data_prints_as_rays_with_its_dataset_and_key():
    """Ray 2.60: ``GroupedData(dataset=<the dataset's repr>, key=<the key as given>)``. Before, Python's
    default ``<muster.data.grouped.GroupedData object at 0x...>``."""
    ds = md.range(3)
    assert repr(ds.groupby("id")) == f"GroupedData(dataset={ds!r}, key='id')"
    items = md.from_items([{"a": 1, "b": "x"}])
    assert repr(items.groupby(["a", "b"])) == f"GroupedData(dataset={items!r}, key=['a', 'b'])"
    assert repr(items.groupby(None)).endswith(", key=None)")


def test_print_after_schema_shows_the_fetched_schema_as_rays_cache(tmp_path):
    """Inspecting Data: after ``ds.schema()`` ran the plan, Ray 2.60 keeps the schema, so ``print(ds)`` shows
    the table (rows ``?``) and ``schema(fetch_if_missing=False)`` gives it. Before, the plan form and None."""
    path = tmp_path / "iris.csv"
    pd.DataFrame({"x": [1.5], "s": ["a"]}).to_csv(path, index=False)
    ds = md.read_csv(str(path))
    assert repr(ds) == "Dataset(num_rows=?, schema=Unknown schema)"
    assert ds.schema(fetch_if_missing=False) is None
    assert list(ds.schema().names) == ["x", "s"]
    assert repr(ds) == _table("?", [("x", "double"), ("s", "string")])
    assert list(ds.schema(fetch_if_missing=False).names) == ["x", "s"]
