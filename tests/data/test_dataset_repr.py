"""``print(ds)`` of a lazy dataset shows Ray 2.60's forms (its plan, or its column table), running nothing."""

from __future__ import annotations

import functools

import pyarrow.compute as pc
import pytest

import muster.data as md
from muster.data.block import BlockMetadata
from muster.data.datasource import Datasource, ReadTask
from muster.data.datatype import DataType
from muster.data.expressions import col, lit, udf


class Unreadable(Datasource):
    """A source that fails if anything reads it: printing must not."""

    def __init__(self, rows=None):
        super().__init__()
        self.rows = rows

    def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
        def read():
            raise AssertionError("repr read the data")

        return [ReadTask(read, BlockMetadata(num_rows=self.rows, size_bytes=None, exec_stats=None))]


def test_a_lazy_read_and_its_transforms_print_the_plan_as_ray_does(tmp_path):
    (tmp_path / "t.csv").write_text("a,b\n1,x\n")
    ds = md.read_csv(str(tmp_path / "t.csv"))
    assert repr(ds) == "Dataset(num_rows=?, schema=Unknown schema)"  # as Ray 2.60 prints read_csv's
    chained = ds.map(lambda r: r).filter(lambda r: True)
    assert str(chained) == ("Filter(<lambda>)\n"
                            "+- Map(<lambda>)\n"
                            "   +- Dataset(num_rows=?, schema=Unknown schema)")
    source = md.read_datasource(Unreadable(rows=7)).map_batches(lambda b: b)
    assert repr(source) == "MapBatches(<lambda>)\n+- Dataset(num_rows=7, schema=Unknown schema)"


def test_what_the_source_knows_unread_is_shown():
    assert repr(md.range(10).map_batches(lambda b: b)) == ("MapBatches(<lambda>)\n"
                                                           "+- Dataset(num_rows=10, schema={id: int64})")
    assert str(md.range(10)) == ("shape: (10, 1)\n"
                                 "╭───────╮\n"
                                 "│ id    │\n"
                                 "│ ---   │\n"
                                 "│ int64 │\n"
                                 "╰───────╯\n"
                                 "(Dataset isn't materialized)")
    assert repr(md.from_items([{"a": 1, "b": "x"}]).map(lambda r: r)) == (
        "Map(<lambda>)\n+- Dataset(num_rows=1, schema={a: int64, b: string})")


def test_a_long_schema_goes_on_several_lines():
    row = {f"a_long_column_name_number_{i}": 1.0 for i in range(3)}
    assert repr(md.from_items([row]).map(lambda r: r)) == (
        "Map(<lambda>)\n"
        "+- Dataset(\n"
        "      num_rows=1,\n"
        "      schema={\n"
        "         a_long_column_name_number_0: double,\n"
        "         a_long_column_name_number_1: double,\n"
        "         a_long_column_name_number_2: double\n"
        "      }\n"
        "   )")


def test_set_name_is_kept_by_transforms_materialize_and_pickling_and_printed_as_ray_does():
    import cloudpickle

    ds = md.range(3)
    assert ds.name is None
    ds.set_name("train")
    mapped = ds.map(lambda r: {"id": r["id"] * 2})
    assert ds.name == "train" and mapped.name == "train"
    assert repr(ds).startswith("name: train\nshape: (3, 1)")  # Ray's table form, headed by the name
    assert repr(mapped) == "Map(<lambda>)\n+- Dataset(name=train, num_rows=3, schema={id: int64})"
    done = mapped.materialize()
    assert done.name == "train" and repr(done).startswith("name: train\nshape: (3, 1)")
    assert cloudpickle.loads(cloudpickle.dumps(mapped)).name == "train"  # the name travels to workers
    assert [r["id"] for r in mapped.take_all()] == [0, 2, 4]
    mapped.set_name(None)
    assert mapped.name is None and "name" not in repr(mapped)


def _parquet_with_unreadable_data(path):
    """A Parquet file whose footer (schema, row groups) is intact and whose data pages are garbage: reading
    its metadata works, reading its rows fails."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": np.arange(1000), "name": ["x"] * 1000, "v": np.ones(1000, np.float32)}),
                   path, row_group_size=100)
    _garble_pages(path)


def _garble_pages(path):
    """Overwrite a Parquet file's data pages, keeping its footer."""
    raw = bytearray(path.read_bytes())
    footer = int.from_bytes(raw[-8:-4], "little")
    raw[4:len(raw) - 8 - footer] = b"\xff" * (len(raw) - 12 - footer)
    path.write_bytes(bytes(raw))


def test_read_parquet_prints_its_schema_from_the_files_metadata_unread(tmp_path):
    """As Ray 2.60 prints ray.data.read_parquet(...): the columns and types from the footer, rows unknown.
    The data pages are garbage, so reading them would fail: printing reads none."""
    import pytest

    _parquet_with_unreadable_data(tmp_path / "t.parquet")
    ds = md.read_parquet(str(tmp_path))
    assert repr(ds) == ("shape: (?, 3)\n"  # Ray 2.60's output, pasted
                        "╭───────┬────────┬───────╮\n"
                        "│ id    ┆ name   ┆ v     │\n"
                        "│ ---   ┆ ---    ┆ ---   │\n"
                        "│ int64 ┆ string ┆ float │\n"
                        "╰───────┴────────┴───────╯\n"
                        "(Dataset isn't materialized)")
    picked = md.read_parquet(str(tmp_path), columns=["v"], include_paths=True)
    assert str(picked).splitlines()[2:5] == ["│ v     ┆ path   │",
                                             "│ ---   ┆ ---    │",
                                             "│ float ┆ string │"]
    assert repr(ds.map(lambda r: r)) == ("Map(<lambda>)\n"
                                         "+- Dataset(num_rows=?, schema={id: int64, name: string, v: float})")
    with pytest.raises(OSError, match="page header"):  # the pages are unreadable indeed
        ds.take_all()


def test_schema_columns_and_count_of_read_parquet_come_from_the_footers_unread(tmp_path):
    """As Ray 2.60 answers them for read_parquet: schema(), columns() and count() from the files' metadata;
    the data pages are garbage, so any read of them fails."""
    import pyarrow as pa
    import pytest

    for name in ("a.parquet", "b.parquet"):
        _parquet_with_unreadable_data(tmp_path / name)
    ds = md.read_parquet(str(tmp_path))
    assert ds.schema() == pa.schema([("id", pa.int64()), ("name", pa.string()), ("v", pa.float32())])
    assert ds.columns() == ["id", "name", "v"] and ds.count() == 2000
    picked = md.read_parquet(str(tmp_path), columns=["v"], include_paths=True)
    assert picked.columns() == ["v", "path"] and picked.count() == 2000
    with pytest.raises(OSError, match="page header"):  # the pages are unreadable indeed
        ds.take(1)


def test_count_of_a_parquet_file_read_a_row_group_a_job_adds_the_row_groups(tmp_path):
    """A file over the read job's size is read one row group a job; count() adds those row groups' rows
    (from the footer: the pages are garbage)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": np.random.default_rng(0).random(300_000)}), tmp_path / "big.parquet",
                   row_group_size=50_000)
    _garble_pages(tmp_path / "big.parquet")
    ctx = md.DataContext.get_current()
    old, ctx.max_bytes_in_flight = ctx.max_bytes_in_flight, 1 << 20  # read jobs of 1 MiB
    try:
        ds = md.read_parquet(str(tmp_path / "big.parquet"))
    finally:
        ctx.max_bytes_in_flight = old
    assert len(ds._node.op.tasks) > 1 and ds.count() == 300_000


def test_a_materialized_dataset_prints_its_first_and_last_rows_as_ray_does():
    assert str(md.range(12, override_num_blocks=3).materialize()) == "\n".join([  # Ray 2.60's output, pasted
        "shape: (12, 1)", "╭───────╮", "│ id    │", "│ ---   │", "│ int64 │", "╞═══════╡",
        *(f"│ {v:<5} │" for v in ["0", "1", "2", "3", "4", "…", "7", "8", "9", "10", "11"]),
        "╰───────╯", "(Showing 10 of 12 rows)"])
    assert repr(md.from_items([{"s": "x" * 50, "n": None}])).splitlines()[5:8] == [
        "╞══════════════════════════════════════════╪══════╡",
        "│ xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx… ┆ None │",
        "╰──────────────────────────────────────────┴──────╯"]


def test_operators_that_keep_rows_and_columns_keep_the_table_form_schema_and_count_unread(tmp_path):
    """As Ray 2.60 infers them: shuffle, sort, repartition and limit keep the source's schema (and rows,
    limit at most its own); a union of one schema keeps it, rows unknown. Nothing is read (garbage pages)."""
    _parquet_with_unreadable_data(tmp_path / "t.parquet")
    ds = md.read_parquet(str(tmp_path)).random_shuffle().sort("id").repartition(2)
    assert ds.columns() == ["id", "name", "v"] and ds.count() == 1000 and ds.limit(7).count() == 7
    assert str(md.range(1000).limit(3).random_shuffle()).splitlines()[0] == "shape: (3, 1)"
    assert str(md.range(5).union(md.range(3))).splitlines()[:5] == ["shape: (?, 1)", "╭───────╮", "│ id    │",
                                                                    "│ ---   │", "│ int64 │"]
    assert repr(md.range(9).map(lambda r: r).sort("id")).endswith("+- Dataset(num_rows=9, schema={id: int64})")


def test_a_variable_shape_tensor_source_prints_its_schema():
    """Its tensor type is unhashable: before, printing any plan over it raised TypeError."""
    import numpy as np

    ragged = md.from_items([{"x": np.ones((1, 2), np.float32)}, {"x": np.ones((2, 2), np.float32)}])
    assert repr(ragged.map(lambda r: r)) == (  # Ray 2.60's, pasted
        "Map(<lambda>)\n+- Dataset(\n      num_rows=2,\n"
        "      schema={x: ArrowVariableShapedTensorType(ndim=2, dtype=float)}\n   )")
    assert str(ragged).splitlines()[-3:] == ["│ [[1. 1.]  [1. 1.]]                       │",
                                             "╰──────────────────────────────────────────╯", "(Showing 2 of 2 rows)"]


def test_tensor_columns_name_rays_tensor_types_in_the_table_and_an_iterator_wraps_its_dataset():
    """Ray 2.60's output, pasted: range_tensor's schema is known unread, its type named as Ray's; before, the
    plan form with an unknown schema. ds.iterator() prints as DataIterator(<the dataset>)."""
    import numpy as np

    assert str(md.range_tensor(1000, shape=(2, 2))).splitlines()[:5] == [
        "shape: (1000, 1)", "╭──────────────────────────────────────────╮",
        "│ data                                     │", "│ ---                                      │",
        "│ ArrowTensorTypeV2(shape=(2, 2), dtype=i… │"]
    ragged = md.from_items([{"x": np.ones((1, 2), np.float32)}, {"x": np.ones((2, 2), np.float32)}])
    assert "│ ArrowVariableShapedTensorType(ndim=2, d… │" in str(ragged.random_shuffle())
    assert repr(md.range(5).iterator()) == "DataIterator(" + repr(md.range(5)) + ")"


def test_operators_print_under_rays_names():
    """Ray 2.60's plan form names these operators without their arguments (or as its own ops). Before, muster's
    names: Sort(id), Limit(3), Repartition(2), AddColumn(x), SelectColumns, Aggregate(count()), ..."""
    base = md.range(10).map(lambda r: r)
    tops = [repr(d).splitlines()[0] for d in [
        base.sort("id"), base.limit(3), base.repartition(2), base.repartition(2, keys=["id"]),
        base.repartition(target_num_rows_per_block=3), base.add_column("x", lambda df: df["id"]),
        base.drop_columns(["id"]), base.select_columns(["id"]), base.rename_columns({"id": "x"}),
        base.groupby("id").count(), base.repartition(2, shuffle=True)]]
    assert tops == ["Sort", "limit=3", "Repartition", "Repartition",
                    "StreamingRepartition[num_rows_per_block=3,strict=False]", "MapBatches(add_column)",
                    "MapBatches(drop_columns)", "Project", "Project", "Aggregate", "Repartition"]
    assert repr(base.repartition(2, shuffle=True)).splitlines()[1] == "+- Map(<lambda>)"  # one operator, as Ray's


def test_a_dataset_that_ran_a_whole_pass_keeps_its_rows_and_schema_as_ray_does():
    """Ray 2.60 caches a finished pass's rows and schema on the dataset: repr prints its table, count() runs
    nothing. A partial pass (take) leaves nothing. Before, the plan form and a count that ran the plan."""
    calls = []

    def seen(r):
        calls.append(1)
        return r

    ds = md.range(5).map(seen)
    ds.take(2)
    assert repr(ds).startswith("Map(seen)")
    assert len(ds.take_all()) == 5 and str(ds).splitlines()[:2] == ["shape: (5, 1)", "╭───────╮"]
    before, last_run = len(calls), ds._stats
    assert ds.count() == 5 and ds.columns() == ["id"]
    assert len(calls) == before and ds._stats is last_run  # answered without running the plan again


@udf(return_dtype=DataType.int32())
def _add_one(c):
    return pc.add(c, 1)


# What Ray 2.60.0 printed (first line of repr; for the udfs and namespaces, the logical plan's operator name) for
# ray.data.range(5).map_batches(lambda b: b).filter(expr=...) with
# ray.data.expressions' col/lit, or the same string expression; run once by hand and copied here.
_RAY_FILTER_NAMES = [
    ((col("id") > 1), "Filter(col('id') > 1)"),
    ((col("id") > 1) & (col("id") < 4), "Filter((col('id') > 1) & (col('id') < 4))"),
    (col("a") + col("b") * lit(2) > 3, "Filter((col('a') + (col('b') * 2)) > 3)"),
    (~(col("x") == 1), "Filter(~(col('x') == 1))"),
    (col("x").is_null(), "Filter(col('x').is_null())"),
    (col("x").is_not_null(), "Filter(col('x').is_not_null())"),
    (col("x").is_in([1, 2]), "Filter(col('x') in [1, 2])"),
    (col("id").not_in([1]), "Filter(col('id') not in [1])"),
    ((col("id") + 1).alias("q") > 2, "Filter(col('id') + 1.alias('q') > 2)"),
    (col("id") // 2 > 1, "Filter((col('id') // 2) > 1)"),
    (col("id") % 2 == 0, "Filter((col('id') % 2) == 0)"),
    (_add_one(col("id")) > 5, "Filter(_add_one(col('id')) > 5)"),
    (_add_one(c=col("id")) > 1, "Filter(_add_one(c=col('id')) > 1)"),
    (col("id").ceil() > 1, "Filter(udf(col('id')) > 1)"),
    (col("id").cast(DataType.int32()) > 1, "Filter(cast_udf(col('id')) > 1)"),
    (col("id").str.upper() == "A", "Filter(udf(col('id')) == 'A')"),
    # raw pyarrow expressions print as Ray's own would
    (pc.field("x").is_valid(), "Filter(col('x').is_not_null())"),
    (pc.field("x").isin([1, 2]), "Filter(col('x') in [1, 2])"),
    (pc.field("a") + pc.field("b") * 2 > 3, "Filter((col('a') + (col('b') * 2)) > 3)"),
    (col("s") == "a", "Filter(col('s') == 'a')"),
    ((col("a") > 1) | (col("b") < 2), "Filter((col('a') > 1) | (col('b') < 2))"),
    (col("a") / 2 >= 1.5, "Filter((col('a') / 2) >= 1.5)"),
    (col("a") - 1 != 0, "Filter((col('a') - 1) != 0)"),
    (col("a") > True, "Filter(col('a') > True)"),
    ((col("aaaaaaaaaa") > 1) & (col("bbbbbbbbbbbb") < 4) & (col("cccccccccccc") == "x" * 30),
     "Filter(((col('aaaaaaaaaa') > 1) & (col('bbbbbbbbbbbb') < 4)) & (...)"),
    ("id > 1 and id < 4", "Filter((col('id') > 1) & (col('id') < 4))"),
    ("s == 'a'", "Filter(col('s') == 'a')"),
    ("not (x == 1)", "Filter(~(col('x') == 1))"),
    ("id >= 1.5", "Filter(col('id') >= 1.5)"),
]


@pytest.mark.parametrize("expr, ray_name", _RAY_FILTER_NAMES)
def test_a_filter_expression_prints_as_ray_prints_it(expr, ray_name):
    assert repr(md.range(5).map_batches(lambda b: b).filter(expr=expr)).splitlines()[0] == ray_name


def test_a_filter_keeps_the_known_schema_as_ray():
    """Ray 2.60 prints range(5).filter(...) (an expression or a function) as its table, rows unknown, and the
    filter by name in the plan above it."""
    table = "shape: (?, 1)\n╭───────╮\n│ id    │\n│ ---   │\n│ int64 │\n╰───────╯\n(Dataset isn't materialized)"
    assert repr(md.range(5).filter(expr=col("id") > 1)) == table
    assert repr(md.range(5).filter(lambda r: r["id"] > 1)) == table
    assert repr(md.range(5).filter(expr=col("id") > 1).map_batches(lambda b: b)) == (
        "MapBatches(<lambda>)\n+- Filter(col('id') > 1)\n   +- Dataset(num_rows=5, schema={id: int64})")


def _per_group(g):
    return g


class PerGroup:
    def __call__(self, g):
        return g


def test_with_column_prints_as_rays_project():
    """Ray 2.60 names with_column(s)' operator Project (its logical plan's name)."""
    base = md.range(5).map_batches(lambda b: b)
    assert repr(base.with_column("z", col("id") * 2)).splitlines()[0] == "Project"
    assert repr(base.with_columns({"a": col("id") + 1, "b": col("id")})).splitlines()[0] == "Project"


def test_map_groups_prints_rays_repartition_and_map_batches():
    """As Ray 2.60 (default shuffle strategy) prints groupby(...).map_groups(fn): its operators, the map named
    after fn (a partial's function; a class's name), groupby(...).with_column's map after Ray's helper."""
    base = md.range(5).map_batches(lambda b: b)
    under = "+- Repartition\n   +- MapBatches(<lambda>)\n      +- Dataset(num_rows=5, schema={id: int64})"
    assert repr(base.groupby("id").map_groups(_per_group)) == f"MapBatches(_per_group)\n{under}"
    assert repr(base.groupby(None).map_groups(functools.partial(_per_group))) == f"MapBatches(_per_group)\n{under}"
    assert repr(base.groupby(["id"]).map_groups(PerGroup)) == f"MapBatches(PerGroup)\n{under}"
    assert repr(base.groupby("id").with_column("z", col("id") + 1)) == f"MapBatches(_project_group)\n{under}"
    assert repr(md.range(5).groupby("id").map_groups(_per_group)) == (
        "MapBatches(_per_group)\n+- Repartition\n   +- Dataset(num_rows=5, schema={id: int64})")
    rows = md.from_items([{"k": i % 2, "v": i} for i in range(6)]).groupby("k").map_groups(
        lambda g: {"k": g["k"][:1], "s": [g["v"].sum()]}).take_all()
    assert rows == [{"k": 0, "s": 6}, {"k": 1, "s": 9}]
