"""Ray 2.60's expressions (``ray.data.expressions``) under muster: the docstring examples of Ray's ``udf``,
``unnest``, ``with_column``, ``cast`` and the namespaces, with the results Ray 2.60 gave for the same calls
(run under both and compared), and the same expressions evaluated by Ray's own evaluator."""

from __future__ import annotations

import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import muster.data as md
from muster.data.datatype import DataType
from muster.data.exceptions import DataTypeError, UserFunctionError
from muster.data.expressions import col, download, lit, star, udf, unnest, uuid
from muster.exceptions import InvalidArgumentError, InvalidTypeError


@udf(return_dtype=DataType.int32())
def add_one(column):
    return pc.add(column, 1)


_MADE: list[int] = []


@udf(return_dtype=DataType.int32())
class AddOffset:
    def __init__(self, offset):
        self.offset = offset
        _MADE.append(offset)

    def __call__(self, x):
        return pc.add(x, self.offset)


@udf(return_dtype=DataType.struct([("sum_ab", DataType.int64()), ("product_ab", DataType.int64())]))
def make_features(a, b):
    return pa.StructArray.from_arrays([pc.add(a, b).combine_chunks(), pc.multiply(a, b).combine_chunks()],
                                      names=["sum_ab", "product_ab"])


def test_with_column_takes_a_udf_and_a_callable_class_as_rays_docstring(threads_only):
    ds = md.range(100)
    plus_one = ds.with_column("id_plus_one", add_one(col("id")))
    assert plus_one.take(2) == [{"id": 0, "id_plus_one": 1}, {"id": 1, "id_plus_one": 2}]
    assert plus_one.schema().types[1] == pa.int32()  # cast to return_dtype, as Ray's
    add_five = AddOffset(5)
    assert ds.with_column("id_plus_five", add_five(col("id"))).take(2) == [{"id": 0, "id_plus_five": 5},
                                                                           {"id": 1, "id_plus_five": 6}]
    doubled = md.from_items([{"value": 5}, {"value": 10}]).with_column("d", add_one(col("value")) * 2)
    assert [r["d"] for r in doubled.take_all()] == [12, 22]
    assert ds.filter(expr=add_one(col("id")) > 98).take_all() == [{"id": 98}, {"id": 99}]


@udf(return_dtype=DataType.int64())
class SlowToMake:
    def __init__(self, offset):
        time.sleep(0.3)  # long enough for every block's thread to reach the first call
        self.offset = offset
        _MADE.append(offset)

    def __call__(self, x):
        return pc.add(x, self.offset)


def test_a_udf_class_is_made_where_it_runs_once_per_process(threads_only):
    _MADE.clear()
    expr = SlowToMake(1)(col("id"))
    assert _MADE == []  # not at the call: where the expression first runs
    assert md.range(20, override_num_blocks=4).with_column("x", expr).sum("x") == sum(range(1, 21))
    assert _MADE == [1]  # once for the four blocks, whose threads race to the first call


def test_unnest_makes_a_column_per_struct_field_as_rays_docstring():
    ds = md.from_items([{"a": 2, "b": 10}, {"a": 3, "b": 20}])
    assert ds.with_columns(unnest(make_features(col("a"), col("b")))).take(1) == [
        {"a": 2, "b": 10, "sum_ab": 12, "product_ab": 20}]
    assert ds.with_columns({"a2": col("a") * 2}, unnest(make_features(col("a"), col("b")))).take_all() == [
        {"a": 2, "b": 10, "a2": 4, "sum_ab": 12, "product_ab": 20},
        {"a": 3, "b": 20, "a2": 6, "sum_ab": 23, "product_ab": 60}]
    nested = md.from_items([{"s": {"x": 1, "y": "a"}}])
    assert nested.with_columns(unnest(col("s"))).take_all() == [{"s": {"x": 1, "y": "a"}, "x": 1, "y": "a"}]
    with pytest.raises(InvalidTypeError, match="cannot wrap another unnest"):
        unnest(unnest(col("s")))
    with pytest.raises(DataTypeError, match=r"unnest\(col\('a'\)\) got int64.*struct-typed"):
        ds.with_columns(unnest(col("a"))).take_all()


# (expression, the column Ray 2.60 gave for x = [5, -3, 0]) -- run under Ray and copied here
_NUMERIC = [
    (col("x").negate(), [-5, 3, 0]), (col("x").sign(), [1, -1, 0]), (col("x").power(2), [25, 9, 0]),
    (col("x").abs(), [5, 3, 0]), (col("x") // 2, [2.0, -1.0, 0.0]), (col("x") % 3, [2.0, 0.0, 0.0]),
    (col("x") / 2, [2, -1, 0]), ((col("x") / 2).ceil(), [2.0, -1.0, 0.0]),
    (col("x").cast(DataType.string()), ["5", "-3", "0"]), (lit(7), [7, 7, 7]),
    (col("x").is_in([5, 0]), [True, False, True]), (col("x").not_in([5, 0]), [False, True, False]),
    ((col("x") + 1).alias("zz"), [6, -2, 1]), (10 - col("x"), [5, 13, 10]),
    ((col("x") > 0) | (col("x") < -1), [True, True, False]), (~(col("x") == 0), [True, True, False]),
]


@pytest.mark.parametrize("expr, expected", _NUMERIC)
def test_operators_and_math_helpers_give_rays_values(expr, expected):
    ds = md.from_items([{"x": 5}, {"x": -3}, {"x": 0}])
    assert [r["v"] for r in ds.with_column("v", expr).take_all()] == expected


def test_result_types_are_rays():
    """Ray 2.60: (x % 2).cast(int64) is int64, x / 2 of integers stays int64 (pyarrow's divide), x // 2 is double."""
    ds = md.from_items([{"x": 5}]).with_columns({"c": (col("x") % 2).cast(DataType.int64()), "f": col("x") / 2,
                                                "fd": col("x") // 2})
    assert ds.schema().types[1:] == [pa.int64(), pa.int64(), pa.float64()]
    assert md.range(3).with_column("s", col("id").cast(DataType.string())).schema().types[1] == pa.string()


_STRINGS = [
    (col("name").str.upper(), [" ALICE ", "BOB"]), (col("name").str.len(), [7, 3]),
    (col("name").str.strip(), ["Alice", "bob"]), (col("name").str.starts_with("b"), [False, True]),
    (col("name").str.pad(8, "*", "left"), ["* Alice ", "*****bob"]), (col("name") + "!", [" Alice !", "bob!"]),
    (col("name").str.split("l"), [[" A", "ice "], ["bob"]]), (col("name").str.replace("b", "B"), [" Alice ", "BoB"]),
    (col("name").str.contains("li"), [True, False]), (col("name").str.strip("b "), ["Alice", "o"]),
]


@pytest.mark.parametrize("expr, expected", _STRINGS)
def test_the_str_namespace_gives_rays_values(expr, expected):
    ds = md.from_items([{"name": " Alice "}, {"name": "bob"}])
    assert [r["v"] for r in ds.with_column("v", expr).take_all()] == expected


def test_the_struct_list_map_and_dt_namespaces():
    ds = md.from_items([{"u": {"age": 3, "addr": {"city": "x"}}, "l": [1, 2, 3], "ll": [[1], [2, 3]]}])
    out = ds.with_columns({"age": col("u").struct["age"], "city": col("u").struct["addr"].struct["city"],
                           "first": col("u").struct[0], "n": col("l").list.len(), "get": col("l").list.get(1),
                           "head": col("l").list[:2], "desc": col("l").list.sort(order="descending"),
                           "flat": col("ll").list.flatten()}).drop_columns(["u", "l", "ll"])
    assert out.take_all() == [{"age": 3, "city": "x", "first": 3, "n": 3, "get": 2, "head": [1, 2],
                               "desc": [3, 2, 1], "flat": [1, 2, 3]}]
    maps = md.from_arrow(pa.table({"m": pa.array([[("a", 1), ("b", 2)], None], type=pa.map_(pa.string(), pa.int64()))}))
    assert maps.with_columns({"k": col("m").map.keys(), "v": col("m").map.values()}).drop_columns(["m"]).take_all() == [
        {"k": ["a", "b"], "v": [1, 2]}, {"k": None, "v": None}]
    import datetime

    times = md.from_items([{"t": datetime.datetime(2024, 3, 5, 7, 8, 9)}])
    got = times.with_columns({"y": col("t").dt.year(), "h": col("t").dt.hour(), "s": col("t").dt.strftime("%Y/%m"),
                              "d": col("t").dt.floor("day")}).take_all()[0]
    assert (got["y"], got["h"], got["s"], got["d"]) == (2024, 7, "2024/03", datetime.datetime(2024, 3, 5))


def test_download_reads_each_uri_and_gives_none_for_a_missing_one(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"hello")
    ds = md.from_items([{"uri": str(tmp_path / "a.bin")}, {"uri": str(tmp_path / "gone.bin")}, {"uri": None}])
    assert [r["bytes"] for r in ds.with_column("bytes", download("uri")).take_all()] == [b"hello", None, None]
    with pytest.raises(InvalidArgumentError, match="column holding the URIs"):
        download("")


def test_uuid_gives_a_fresh_id_per_row():
    ids = [r["u"] for r in md.range(10).with_column("u", uuid().str.replace("-", "")).take_all()]
    assert len(set(ids)) == 10 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


def test_expressions_print_and_convert_as_rays():
    assert repr((col("x") + lit(5)) * col("y")) == (
        "MUL\n    ├── left: ADD\n    │   ├── left: COL('x')\n    │   └── right: LIT(5)\n    └── right: COL('y')")
    assert repr(add_one(col("id")) * 2) == (
        "MUL\n    ├── left: UDF(add_one)\n    │   └── arg[0]: COL('id')\n    └── right: LIT(2)")
    assert (col("a") + 1).structurally_equals(col("a") + 1) and not (col("a") + 1).structurally_equals(col("a") + 2)
    assert (col("a") > 1).to_pyarrow().equals(pc.field("a") > 1)
    assert col("s").str.starts_with("x").to_pyarrow().equals(pc.starts_with(pc.field("s"), "x"))
    with pytest.raises(InvalidTypeError, match="no pyarrow.compute.Expression"):
        add_one(col("id")).to_pyarrow()
    with pytest.raises(InvalidTypeError, match="no truth value"):
        bool(col("a") > 1)
    assert (col("x") * 2).alias("y").name == "y" and col("x").name == "x"


def test_an_expression_filters_a_parquet_read(tmp_path):
    pq.write_table(pa.table({"a": [1, 5, 9]}), tmp_path / "x.parquet")
    assert md.read_parquet(str(tmp_path), filter=(col("a") > 3).to_pyarrow()).take_all() == [{"a": 5}, {"a": 9}]


def _per_operator(ds):
    """``ds.stats()``'s per-operator lines (muster's, under ``Execution (muster):``), a fused operator's too."""
    return [ln.strip()[2:] for ln in ds.stats().split("* Per operator", 1)[-1].splitlines()[1:]
            if ln.startswith("\t* ")]


def _rows_made(ds, op):
    """The rows operator ``op`` made in ``ds``'s last run, from its stats (None when it did not run)."""
    line = next((ln for ln in _per_operator(ds) if ln.startswith(f"{op}:")), None)
    return None if line is None else int(line.split(":", 1)[1].split(" rows")[0].replace(",", ""))


def test_a_filter_right_after_read_parquet_is_pushed_into_the_scan(tmp_path, capsys):
    """Ray's optimizer pushes a filter's predicate into its Parquet read; so does muster now: the read makes only
    the matching rows (before: every row, then a Filter operator dropped most), and the rows are the same."""
    for part in range(2):
        table = pa.table({"a": list(range(part * 500, part * 500 + 500)), "s": [str(i % 7) for i in range(500)]})
        pq.write_table(table, tmp_path / f"p{part}.parquet", row_group_size=50)
    path = str(tmp_path)
    for expr in [col("a") > 950, (col("a") < 20) & col("s").is_in(["3", "5"]), "a >= 990 and s != '1'",
                 pc.field("a") == 7]:
        pushed = md.read_parquet(path).filter(expr=expr)
        unpushed = md.read_parquet(path).map_batches(lambda b: b).filter(expr=expr)
        rows = pushed.take_all()
        assert rows == unpushed.take_all() and rows, expr
        assert _rows_made(pushed, "ReadParquet") == len(rows) and "Filter" not in pushed.stats(), pushed.stats()
        assert _rows_made(unpushed, "ReadParquet") == 1000
    twice = md.read_parquet(path, filter=pc.field("a") < 100).filter(expr=col("a") > 90).filter(expr="s == '2'")
    assert twice.take_all() == [{"a": 93, "s": "2"}] and _rows_made(twice, "ReadParquet") == 1
    (name, _, _), (then, _, kwargs), (last, _, _) = twice._node.op.ray.steps  # on Ray: Ray's read, Ray's filters
    assert (name, then, last) == ("read_parquet", "filter", "filter") and kwargs["expr"].structurally_equals(
        col("a") > 90)
    twice.explain()
    assert ("Read[ReadParquet] (its scan filtered by Filter(col('a') > 90) & Filter(col('s') == '2'))"
            in capsys.readouterr().out)
    # what cannot be pushed stays a Filter operator, with its own results and errors
    kept = md.read_parquet(path).filter(expr=add_one(col("a")) > 998)
    assert kept.take_all() == [{"a": 998, "s": str(498 % 7)}, {"a": 999, "s": str(499 % 7)}]
    assert _rows_made(kept, "ReadParquet") == 1000
    with pytest.raises(DataTypeError, match=r"no column 'a'.*columns are \['s'\]"):
        md.read_parquet(path, columns=["s"]).filter(expr=col("a") > 5).take_all()
    with_paths = md.read_parquet(path, include_paths=True).filter(expr=col("path").str.ends_with("p1.parquet"))
    assert len(with_paths.take_all()) == 500


def _two_parquet_files(tmp_path):
    for part in range(2):
        table = pa.table({"a": list(range(part * 500, part * 500 + 500)), "s": [str(i % 7) for i in range(500)]})
        pq.write_table(table, tmp_path / f"p{part}.parquet", row_group_size=50)
    return str(tmp_path)


def test_a_filter_moves_past_projections_sorts_and_repartitions_into_the_scan(tmp_path, capsys):
    """As Ray's optimizer: a filter goes below select_columns, rename_columns (its columns renamed back), sort
    and repartition into the Parquet scan, and an & pushes its convertible parts, the rest a Filter above the
    read. Before, only a whole filter right after the read was pushed. The rows are the unpushed ones."""
    path = _two_parquet_files(tmp_path)
    pushed_cases = [  # (plan after the read, rows the scan makes)
        (lambda ds: ds.select_columns(["a"]).filter(expr=col("a") > 950), 49),
        (lambda ds: ds.rename_columns({"a": "b", "s": "a"}).filter(expr=(col("b") > 950) & (col("a") == "3")), 7),
        (lambda ds: ds.sort("a", descending=True).filter(expr="a > 980"), 19),
        (lambda ds: ds.repartition(3).select_columns(["s", "a"]).filter(expr=col("a") < 40), 40),
        (lambda ds: ds.filter(expr=(col("a") > 900) & (add_one(col("a")) > 990) & (col("s") != "2")), 84),
    ]
    for then, made in pushed_cases:
        pushed, unpushed = then(md.read_parquet(path)), then(md.read_parquet(path).map_batches(lambda b: b))
        rows = pushed.take_all()
        assert rows == unpushed.take_all() and rows
        assert _rows_made(pushed, "ReadParquet") == made and _rows_made(unpushed, "ReadParquet") == 1000
    split = pushed_cases[-1][0](md.read_parquet(path))
    split.explain()
    out = capsys.readouterr().out
    assert "Transform[Filter(add_one(col('a')) > 990)]\n+- Read[ReadParquet] (its scan filtered by " \
           "Filter(col('a') > 900) & Filter(col('s') != '2'))" in out, out
    renamed = pushed_cases[1][0](md.read_parquet(path))
    steps = [(name, kwargs) for name, _, kwargs in renamed._node.inputs[0].op.ray.steps]  # on Ray: its names
    assert [name for name, _ in steps] == ["read_parquet", "filter", "filter"]
    assert steps[1][1]["expr"].structurally_equals(col("a") > 950) and steps[2][1]["expr"].structurally_equals(
        col("s") == "3")
    # a limit, a shuffle's order, a function, or a column dropped or renamed away keep the filter above
    kept = [lambda ds: ds.limit(600).filter(expr=col("a") > 550),
            lambda ds: ds.random_shuffle(seed=3).filter(expr=col("a") > 990),
            lambda ds: ds.sort("a").filter(expr=add_one(col("a")) > 990)]
    for then in kept:
        ds = then(md.read_parquet(path))
        assert ds.take_all() == then(md.read_parquet(path).map_batches(lambda b: b)).take_all()
        assert _rows_made(ds, "ReadParquet") >= 600
    with pytest.raises(DataTypeError, match=r"no column 'a'.*columns are \['b', 's'\]"):
        md.read_parquet(path).rename_columns({"a": "b"}).filter(expr=col("a") > 5).take_all()
    with pytest.raises(DataTypeError, match=r"no column 'a'.*columns are \['s'\]"):
        md.read_parquet(path).select_columns(["s"]).filter(expr=col("a") > 5).take_all()


def _read_rows(ds):
    """Every read's rows in ``ds``'s last run, from its stats."""
    lines = [ln for ln in _per_operator(ds) if ln.startswith("Read")]
    return sum(int(ln.split(":", 1)[1].split(" rows")[0].replace(",", "")) for ln in lines)


def test_a_filter_moves_past_a_union_and_an_unseeded_shuffle_into_the_scan(tmp_path, capsys):
    """A filter after a union goes to each branch (into each parquet scan, a Filter on a range), and below an
    unseeded random_shuffle / randomize_block_order (random order either way). Before, it stayed above them.
    A seeded shuffle (one order from seed and epoch, drawn over its rows) and a limit keep it above."""
    path = _two_parquet_files(tmp_path)
    half = str(tmp_path / "p0.parquet")
    cases = [  # (plan, rows the reads make pushed, unpushed)
        (lambda r: r(path).union(r(half)).filter(expr=col("a") > 480), 519 + 19, 1500),
        (lambda r: r(path).union(md.range(5).rename_columns({"id": "a"}).with_column("s", lit("x")))
         .filter(expr="a < 3"), 3 + 5, 1005),
        (lambda r: r(path).random_shuffle().filter(expr=col("a") > 950), 49, 1000),
        (lambda r: r(path).randomize_block_order().select_columns(["a"]).filter(expr=col("a") < 9), 9, 1000),
    ]
    plain = md.read_parquet
    for then, made, all_rows in cases:
        pushed, unpushed = then(plain), then(lambda p: plain(p).map_batches(lambda b: b))
        rows = pushed.take_all()
        key = lambda r: (r["a"], r.get("s"))  # noqa: E731
        assert sorted(rows, key=key) == sorted(unpushed.take_all(), key=key) and rows
        assert _read_rows(pushed) == made and _read_rows(unpushed) == all_rows, pushed.stats()
    cases[0][0](plain).explain()
    assert "Union[Union]\n+- Read[ReadParquet] (its scan filtered by Filter(col('a') > 480))\n" \
           "+- Read[ReadParquet] (its scan filtered by Filter(col('a') > 480))" in capsys.readouterr().out
    for then in [lambda ds: ds.limit(600).filter(expr=col("a") > 550),
                 lambda ds: ds.random_shuffle(seed=3).filter(expr=col("a") > 990),
                 lambda ds: ds.randomize_block_order(seed=3).filter(expr=col("a") > 990)]:
        ds = then(plain(path))
        assert ds.take_all() == then(plain(path).map_batches(lambda b: b)).take_all()  # the seed's order kept
        assert _read_rows(ds) >= 600


def _join_inputs(tmp_path):
    """Two parquet files: left ``id`` 0..99 and a null, ``v``, ``x``; right ``key`` 50..149 and a null, ``v``,
    ``w`` (each 101 rows, so a join's reads make 202 unless a filter went into a scan)."""
    pq.write_table(pa.table({"id": [*range(100), None], "v": [f"l{i}" for i in range(101)], "x": list(range(101))}),
                   tmp_path / "left.parquet", row_group_size=10)
    pq.write_table(pa.table({"key": [*range(50, 150), None], "v": [f"r{i}" for i in range(101)],
                             "w": [i % 5 for i in range(101)]}), tmp_path / "right.parquet", row_group_size=10)
    return (lambda: md.read_parquet(str(tmp_path / "left.parquet"))), \
        (lambda: md.read_parquet(str(tmp_path / "right.parquet")))


def _sorted_rows(ds):
    """``ds``'s rows in one order (a join promises none), nulls after values."""
    return sorted(ds.take_all(), key=lambda r: [(k, v is None, 0 if v is None else v) for k, v in sorted(r.items())])


def test_a_filter_moves_past_a_join_into_the_scan_of_an_input_it_keeps_whole(tmp_path, capsys):
    """A filter after a join goes into the scan of the input whose columns it reads, where the join never
    null-extends that input's rows (inner: either; left outer, semi, anti: the left; right ones: the right), its
    columns named as there (a suffixed one mapped back); one on the keys alone into both inputs. Before, the join
    ran at once and a filter after it read every row. The rows are those of the filter above the join."""
    left, right = _join_inputs(tmp_path)
    cases = [  # (join type, suffixes, filter, rows the two reads make)
        ("inner", {"right_suffix": "_r"}, col("x") < 70, 70 + 101),
        ("inner", {"right_suffix": "_r"}, (col("w") == 1) & (col("v_r") < "r50"), 101 + 9),  # v_r: the right's v
        ("inner", {"right_suffix": "_r"}, col("id") < 60, 60 + 10),  # on the key: into both scans
        ("inner", {"left_suffix": "_l"}, (col("v") >= "r2") & (col("v") < "r3"), 101 + 11),  # the right's v
        ("inner", {"left_suffix": "_l"}, col("v_l") >= "l90", 10 + 101),
        ("left_outer", {"right_suffix": "_r"}, col("x").is_null() | (col("x") < 70), 70 + 101),
        ("left_outer", {"right_suffix": "_r"}, col("id") < 60, 60 + 10),
        ("right_outer", {"right_suffix": "_r"}, col("w") == 1, 101 + 20),
        ("right_outer", {"right_suffix": "_r"}, col("key") >= 140, 0 + 10),  # right outer names the key `key`
        ("left_semi", {}, col("x") < 70, 70 + 101),
        ("left_anti", {}, col("id") < 60, 60 + 10),
        ("right_semi", {}, col("w") == 1, 101 + 20),
        ("right_anti", {}, col("v") >= "r90", 101 + 10),
    ]
    for join_type, suffixes, expr, made in cases:
        joined = lambda: left().join(right(), join_type, 2, on="id", right_on="key", **suffixes)  # noqa: E731
        pushed = joined().filter(expr=expr)
        unpushed = joined().map_batches(lambda b: b, batch_format="pyarrow").filter(expr=expr)
        rows = _sorted_rows(pushed)
        assert rows == _sorted_rows(unpushed) and rows, (join_type, expr)
        assert _read_rows(pushed) == made and _read_rows(unpushed) == 202, (join_type, expr, pushed.stats())
    left().join(right(), "inner", 1, on="id", right_on="key", right_suffix="_r").filter(expr=col("id") < 60).explain()
    assert "Join[Join]\n+- Read[ReadParquet] (its scan filtered by Filter(col('id') < 60))\n+- Read[ReadParquet] " \
           "(its scan filtered by Filter(col('key') < 60))" in capsys.readouterr().out
    # an input without a scan gets a plain Filter; a filter no scan takes stays above the join
    items = md.from_items([{"key": k, "w": k * 10} for k in (55, 57, 200)])
    on_key = left().join(items, "inner", 1, on="id", right_on="key").filter(expr=col("id") < 56)
    assert on_key.take_all() == [{"id": 55, "v": "l55", "x": 55, "w": 550}] and _rows_made(on_key, "ReadParquet") == 56
    assert on_key._node.op.name == "Join" and on_key._node.inputs[1].op.name == "Filter(col('key') < 56)"
    on_items = left().join(items, "inner", 1, on="id", right_on="key").filter(expr=col("w") > 560)
    assert _sorted_rows(on_items) == [{"id": 57, "v": "l57", "x": 57, "w": 570}] and \
        on_items._node.op.name == "Filter(col('w') > 560)"


def test_a_filter_stays_above_a_join_that_null_extends_or_mixes_its_columns(tmp_path):
    """A filter on an input whose rows the join pads with nulls (the right of a left outer join, the left of a
    right outer, either of a full outer), on columns of both inputs, with a function, or as a string stays above
    the join: below it, it would drop padded rows or keep rows the join pads from rows it dropped."""
    left, right = _join_inputs(tmp_path)
    blocked = [
        ("left_outer", col("w").is_null()), ("left_outer", col("w") == 1), ("right_outer", col("x") < 70),
        ("right_outer", col("v") > "l50"), ("full_outer", col("x") < 70), ("full_outer", col("id") < 60),
        ("inner", col("x") < col("w") * 20), ("inner", add_one(col("x")) < 70), ("inner", "x < 70"),
    ]
    for join_type, expr in blocked:
        joined = lambda: left().join(right(), join_type, 2, on="id", right_on="key", right_suffix="_r")  # noqa: E731
        kept = joined().filter(expr=expr)
        rows = _sorted_rows(kept)
        assert rows == _sorted_rows(joined().map_batches(lambda b: b, batch_format="pyarrow").filter(expr=expr))
        assert rows and _read_rows(kept) == 202 and kept._node.inputs[0].op.name == "Join", (join_type, expr)
    # a name the join's output lacks stays above it and fails naming it, as before, though an input has it (an
    # inner join keeps the left's key only)
    with pytest.raises(DataTypeError, match="no column 'key'"):
        left().join(right(), "inner", 1, on="id", right_on="key", right_suffix="_r").filter(expr=col("key") > 0) \
            .take_all()


def test_bad_expressions_name_the_fix():
    ds = md.range(3)
    with pytest.raises(InvalidTypeError, match="Arrow-backed"):
        col("id").cast(int)
    with pytest.raises(InvalidTypeError, match="return_dtype"):
        udf(return_dtype=int)
    with pytest.raises(InvalidTypeError, match="star\\(\\) is every column"):
        ds.with_column("s", star())
    with pytest.raises(DataTypeError, match="not true/false"):
        ds.filter(expr=col("id") + 1).take_all()

    @udf(return_dtype=DataType.int64())
    def scalar(x):
        return 3

    with pytest.raises(InvalidTypeError, match="udf scalar returned a int"):
        ds.with_column("s", scalar(col("id"))).take_all()

    @udf(return_dtype=DataType.int64())
    def broken(x):
        return pc.divide(x, 0)

    with pytest.raises(UserFunctionError, match=r"(?s)Project failed in broken: ArrowInvalid: divide by zero.*row"):
        ds.with_column("b", broken(col("id"))).take_all()
    with pytest.raises(InvalidArgumentError, match="side='middle'"):
        col("s").str.pad(3, side="middle")


def test_the_same_expressions_under_rays_evaluator():
    """muster's expressions rebuilt as Ray's (what the Ray engine runs) give what muster's give."""
    pytest.importorskip("ray")
    from ray.data._internal.planner.plan_expression.expression_evaluator import eval_expr

    from muster.data._ray_exprs import to_ray
    from muster.data.projection import values

    block = pa.table({"x": [5, -3, 0], "name": [" Alice ", "bob", "c"]})
    for expr in [e for e, _ in _NUMERIC] + [e for e, _ in _STRINGS] + [add_one(col("x")), AddOffset(2)(col("x"))]:
        ours, theirs = values(expr, block), eval_expr(to_ray(expr), block)
        theirs = theirs if isinstance(theirs, (pa.Array, pa.ChunkedArray)) else pa.repeat(pa.scalar(theirs), 3)
        assert ours.to_pylist() == theirs.to_pylist(), repr(expr)


#: What Ray 2.60 gave for range(6, override_num_blocks=3).with_column("r", random(seed=1)): its first execution,
#: then its second (reseed_after_execution=True); the ids of monotonically_increasing_id() over the same
_RAY_RANDOM_SEED_1 = [0.29826765772746533, 0.6784871576369467, 0.49651871913848644, 0.5803502342122172,
                      0.9468061042758376, 0.9768835168057705]
_RAY_RANDOM_SEED_1_SECOND = [0.7458762556705532, 0.14428108014215002]
#: Ray 2.60's third and fourth executions of it (any execution counts: take_all, a derived dataset's, a pass)
_RAY_RANDOM_SEED_1_THIRD = [0.8115069719243426, 0.8247593848720327, 0.560892935239097, 0.8651310397460704,
                            0.18915681840965892, 0.12929323005828675]
_RAY_RANDOM_SEED_1_FOURTH = [0.20378167113714019, 0.029237420699346872, 0.8456855425883211, 0.41821380296005173,
                             0.9898987160781626, 0.5542211572174207]
_RAY_IDS = [0, 1, 1 << 33, (1 << 33) + 1, 1 << 34, (1 << 34) + 1]


def test_random_gives_rays_values_per_seed_task_and_pass():
    from muster.data.expressions import random

    ds = md.range(6, override_num_blocks=3).with_column("r", random(seed=1))
    assert [r["r"] for r in ds.take_all()] == _RAY_RANDOM_SEED_1
    it = md.range(6, override_num_blocks=3).with_column("r", random(seed=1)).iterator()
    # each pass is an execution: its own values, the first pass's the same every run
    first, second = ([b["r"].tolist() for b in it.iter_batches(batch_size=None)] for _ in range(2))
    assert sum(first, []) == _RAY_RANDOM_SEED_1 and second[0] == _RAY_RANDOM_SEED_1_SECOND
    fixed = md.range(6, override_num_blocks=3).with_column("r", random(seed=1, reseed_after_execution=False))
    it = fixed.iterator()
    assert [list(b["r"]) for b in it.iter_batches()] == [list(b["r"]) for b in it.iter_batches()]
    unseeded = [r["r"] for r in md.range(50).with_column("r", random()).take_all()]
    assert all(0 <= v < 1 for v in unseeded) and len(set(unseeded)) == 50
    assert unseeded != [r["r"] for r in md.range(50).with_column("r", random()).take_all()]
    assert repr(random()) == "RANDOM()" and repr(random(seed=3)) == "RANDOM(seed=3, reseed_after_execution=True)"
    assert random(seed=3).structurally_equals(random(seed=3)) and not random(seed=3).structurally_equals(random())
    with pytest.raises(InvalidTypeError, match=r"random\(seed='1'\): pass an integer"):
        random(seed="1")


def test_every_execution_of_a_dataset_is_a_new_pass_as_rays_execution_index():
    """Ray numbers a dataset's executions (its context's execution index, shared with the datasets derived
    from it): two take_all() of a seeded random() differ. Before, only an iterator's passes counted."""
    from muster.data.expressions import random

    ds = md.range(6, override_num_blocks=3).with_column("r", random(seed=1))
    assert [r["r"] for r in ds.take_all()] == _RAY_RANDOM_SEED_1
    assert [r["r"] for r in ds.select_columns(["r"]).take_all()][:2] == _RAY_RANDOM_SEED_1_SECOND
    assert ds.count() == 6  # known from the source: no execution, as in Ray
    assert [r["r"] for r in ds.take_all()] == _RAY_RANDOM_SEED_1_THIRD
    assert [v for b in ds.iter_batches(batch_size=None) for v in b["r"]] == _RAY_RANDOM_SEED_1_FOURTH
    fresh = md.range(6, override_num_blocks=3).with_column("r", random(seed=1))  # a source counts on its own
    assert [r["r"] for r in fresh.take_all()] == _RAY_RANDOM_SEED_1
    # a dataset's iterator resumed from its state replays that pass
    it = ds.iterator()
    state = it.state_dict()
    first = [v for b in it.iter_batches(batch_size=None) for v in b["r"]]
    it.load_state_dict(state)
    assert [v for b in it.iter_batches(batch_size=None) for v in b["r"]] == first != _RAY_RANDOM_SEED_1_FOURTH
    # an unseeded shuffle draws a new order each execution, as Ray's; a seeded one per RandomSeedConfig
    unseeded = md.range(100).random_shuffle()
    assert [r["id"] for r in unseeded.take_all()] != [r["id"] for r in unseeded.take_all()]
    fixed = md.range(100).random_shuffle(seed=md.RandomSeedConfig(5, reseed_after_execution=False))
    assert [r["id"] for r in fixed.take_all()] == [r["id"] for r in fixed.take_all()]
    # the shards of a split count their own passes, so all ranks draw the same order
    a, b = md.range(100).random_shuffle().streaming_split(2)
    assert sorted([int(x) for t in a.iter_batches(batch_size=None) for x in t["id"]]
                  + [int(x) for t in b.iter_batches(batch_size=None) for x in t["id"]]) == list(range(100))


def test_monotonically_increasing_id_is_unique_and_increasing_within_each_task():
    from muster.data.expressions import monotonically_increasing_id

    ids = md.range(6, override_num_blocks=3).with_column("uid", monotonically_increasing_id())
    assert [r["uid"] for r in ids.take_all()] == _RAY_IDS
    # one task's blocks (a map making one block per row) get consecutive ids; two id columns count apart
    split = md.range(4, override_num_blocks=2).map_batches(lambda b: b, batch_size=1)
    rows = split.with_columns({"a": monotonically_increasing_id(), "b": monotonically_increasing_id()}).take_all()
    assert [r["a"] for r in rows] == [r["b"] for r in rows] == [0, 1, 1 << 33, (1 << 33) + 1]
    # after an all-to-all operator every block is a task of its own: still unique, increasing in order
    shuffled = [r["uid"] for r in md.range(300).random_shuffle(seed=2).repartition(7)
                .with_column("uid", monotonically_increasing_id()).take_all()]
    assert len(set(shuffled)) == 300 and shuffled == sorted(shuffled)
    grouped = md.range(10).groupby("id").with_column("uid", monotonically_increasing_id()).take_all()
    assert len({r["uid"] for r in grouped}) == 10
    assert repr(monotonically_increasing_id()) == "MONOTONICALLY_INCREASING_ID()"
    assert not monotonically_increasing_id().structurally_equals(monotonically_increasing_id())
    with pytest.raises(InvalidTypeError, match="no pyarrow.compute.Expression"):
        monotonically_increasing_id().to_pyarrow()
