"""``print(ds)`` of a lazy dataset shows Ray 2.60's forms (its plan, or its column table), running nothing."""

from __future__ import annotations

import muster.data as md
from muster.data.block import BlockMetadata
from muster.data.datasource import Datasource, ReadTask


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
    assert repr(md.from_items([{"a": 1}])) == "MaterializedDataset(num_blocks=1, num_rows=1, schema={a: int64})"


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
    assert done.name == "train" and repr(done).startswith("MaterializedDataset(name=train, num_blocks=")
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
