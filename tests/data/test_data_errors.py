"""Bad input gets errors that name the bad value and the fix."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import muster.data as md


def test_missing_path_names_it(tmp_path):
    missing = str(tmp_path / "nope.parquet")
    with pytest.raises(md.DataSourceError, match="nope.parquet"):
        md.read_parquet(missing)
    with pytest.raises(FileNotFoundError, match=r"glob .*\*.csv"):
        md.read_csv(str(tmp_path / "*.csv"))


def test_udf_error_names_operator_function_and_first_row():
    def explode(batch):
        raise ValueError("bad batch")

    with pytest.raises(md.UserFunctionError) as info:
        md.range(20).map_batches(explode, batch_size=5).take_all()
    msg = str(info.value)
    assert "MapBatches" in msg and "explode" in msg and "{'id': 0}" in msg and "bad batch" in msg

    def picky(row):
        if row["id"] == 13:
            raise KeyError("no 13")
        return row

    # range(20) on 4 CPUs: 7 blocks of 3 rows (the last 2), so row 13 is in the block that starts at 12
    with pytest.raises(md.UserFunctionError, match=r"Map failed in .*picky.*first row: \{'id': 12\}"):
        md.range(20).map(picky).count()


def test_map_returning_a_non_dict_is_a_type_error():
    with pytest.raises(TypeError, match=r"returned a int \(5\).*must return a dict"):
        md.range(3).map(lambda r: 5).take_all()
    with pytest.raises(TypeError, match="returned a list"):
        md.range(3).map_batches(lambda b: [1, 2]).take_all()


def test_a_batch_of_columns_of_different_lengths_names_the_function_and_each_length():
    """It was pyarrow's bare "ArrowInvalid: Column 1 named b expected length 3 but got length 2"."""
    def uneven(batch):
        return {"a": batch["id"], "b": batch["id"][:2]}

    with pytest.raises(md.DataTypeError, match=r"map_batches\(uneven\) returned columns of different lengths, "
                                              r"\{'a': 3, 'b': 2\}"):
        md.range(3).map_batches(uneven).take_all()


def test_disagreeing_schemas_name_both_files_and_the_column(tmp_path):
    pq.write_table(pa.table({"a": [1, 2], "b": ["x", "y"]}), tmp_path / "one.parquet")
    pq.write_table(pa.table({"a": ["1", "2"], "b": ["x", "y"]}), tmp_path / "two.parquet")
    with pytest.raises(md.DataSchemaError) as info:
        md.read_parquet(str(tmp_path)).take_all()
    msg = str(info.value)
    assert "one.parquet" in msg and "two.parquet" in msg and "'a'" in msg
    (tmp_path / "c1.csv").write_text("a\n1\n")
    (tmp_path / "c2.csv").write_text("a\nhello\n")
    with pytest.raises(md.DataSchemaError, match=r"column 'a'.*c\d\.csv.*c\d\.csv"):
        md.read_csv(str(tmp_path / "c*.csv")).take_all()


def test_non_tensor_column_names_column_and_type():
    ds = md.from_items([{"x": 1, "name": "a"}])
    with pytest.raises(TypeError, match=r"column 'name' holds str.*drop_columns"):
        next(ds.iter_torch_batches())


def test_bad_arguments():
    with pytest.raises(ValueError, match="batch_format='tensor'"):
        md.range(3).map_batches(lambda b: b, batch_format="tensor")
    with pytest.raises(ValueError, match="concurrency=0"):
        md.range(3).map_batches(lambda b: b, concurrency=0)
    with pytest.raises(ValueError, match="batch_size=0"):
        next(md.range(3).iter_batches(batch_size=0))
    with pytest.raises(ValueError, match="no column 'zz'"):
        md.range(3).select_columns(["zz"]).take_all()
    with pytest.raises(ValueError, match=r"^mean\(nope\): no column 'nope'; the dataset has \['id'\]"):
        md.range(3).mean("nope")  # it said "groupby/aggregate: ...", with no groupby in sight
    with pytest.raises(ValueError, match=r"^groupby\('g'\): no column 'g'"):
        md.range(3).groupby("g").count().take_all()
    with pytest.raises(ValueError, match="datasets_to_split"):
        md.DataConfig(datasets_to_split=3)  # type: ignore[arg-type]


def test_a_misspelt_keyword_of_a_map_is_refused_naming_the_close_one():
    """Ray hands a map's extra keywords to ray.remote, which refuses unknown ones; muster took them and dropped
    them, so map_batches(batchsize=1) ran with whole blocks."""
    ds = md.range(10)
    misspelt = [
        (lambda: ds.map_batches(lambda b: b, batchsize=1), r"map_batches\(\).*\['batchsize'\].*'batch_size'\?"),
        (lambda: ds.map(lambda r: r, num_cpu=1), r"map\(\).*'num_cpus'\?"),
        (lambda: ds.add_column("y", lambda df: df["id"], concurency=2), r"add_column\(\).*'concurrency'\?"),
        (lambda: ds.groupby("id", partitions=2), r"groupby\(\).*only \['num_partitions'\]"),
        (lambda: ds.repartition(2, shufle=True), r"repartition\(\).*'shuffle'\?"),
        (lambda: ds.groupby("id").map_groups(lambda g: g, batchformat="numpy"), r"map_groups.*'batch_format'\?"),
    ]
    for call, message in misspelt:
        with pytest.raises(TypeError, match=message):
            call()
    # Ray's task options and its own keywords still pass
    assert ds.map_batches(lambda b: b, batch_size=4, memory=1e6, max_retries=1, ray_remote_args_fn=None).count() == 10
    assert ds.repartition(2, strict=True).count() == 10 and ds.groupby("id", num_partitions=2).count().count() == 10


def test_unparseable_file_is_named_with_the_reader_to_use(tmp_path):
    """pyarrow's parse error names the file and the matching reader, and stays pyarrow's class (chained)."""
    (tmp_path / "rows.csv").write_text("a,b\n1,2\n")
    pq.write_table(pa.table({"a": [1]}), tmp_path / "good.parquet")
    (tmp_path / "fake.parquet").write_text("not parquet\n")
    with pytest.raises(pa.ArrowInvalid, match=r"read_json: could not read .*rows\.csv: JSON.*read_csv\(\)") as err:
        md.read_json(str(tmp_path / "rows.csv")).take_all()
    assert isinstance(err.value.__cause__, pa.ArrowInvalid) and "rows.csv" not in str(err.value.__cause__)
    with pytest.raises(pa.ArrowInvalid, match=r"read_csv: could not read .*good\.parquet: .*read_parquet\(\)"):
        md.read_csv(str(tmp_path / "good.parquet")).take_all()
    with pytest.raises(pa.ArrowInvalid, match=r"read_parquet: could not read .*rows\.csv: .*read_csv\(\)"):
        md.read_parquet(str(tmp_path / "rows.csv"))  # the schema is read when the dataset is made
    # a later file is opened when read, where pyarrow's message names no file
    later = md.read_parquet([str(tmp_path / "good.parquet"), str(tmp_path / "fake.parquet")])
    with pytest.raises(pa.ArrowInvalid, match=r"could not read .*fake\.parquet: .*not a parquet file, or a damaged"):
        later.take_all()
    with pytest.raises(UnicodeDecodeError, match=r"read_text: could not read .*good\.parquet as utf-8.*read_parquet"):
        md.read_text(str(tmp_path / "good.parquet")).take_all()


def test_rename_columns_onto_a_kept_name_is_refused_naming_the_clash():
    """{"a": "b"} over columns a, b made two 'b' columns, then an internal KeyError when read."""
    ds = md.from_items([{"a": 1, "b": 2}])
    with pytest.raises(ValueError, match=r"already has a column 'b'.*drop_columns\(\['b'\]\).*'b': 'b_old'"):
        ds.rename_columns({"a": "b"}).take_all()
    with pytest.raises(ValueError, match="'c' is given to more than one column"):
        ds.rename_columns({"a": "c", "b": "c"})  # refused when called
    assert ds.rename_columns({"a": "b", "b": "a"}).take_all() == [{"b": 1, "a": 2}]  # a swap is fine


def test_a_concurrency_range_for_a_function_is_refused_as_rays():
    def double(batch):
        return batch

    with pytest.raises(ValueError, match=r"concurrency=\(1, 2\).*'double' is a function.*concurrency=2"):
        md.range(4).map_batches(double, concurrency=(1, 2))
    with pytest.raises(ValueError, match="is a function, not a callable class"):
        md.range(4).map(lambda r: r, concurrency=(1, 2))


def test_from_numpy_of_a_dict_names_what_it_takes_and_the_column_readers():
    """A dict of columns failed with a bare 'TypeError: iteration over a 0-d array'."""
    with pytest.raises(TypeError, match=r"takes an ndarray .* or a list of them \(got dict\).*from_items.*from_arrow"):
        md.from_numpy({"a": np.arange(3), "b": np.arange(3)})
