"""Reading and writing files: parquet (columns, filter pushdown, hive partitions), CSV, JSON lines,
text, binary; paths as file, folder, glob, list and fsspec URL; writers round-trip."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest
import torch

import muster.data as md


@pytest.fixture(scope="module")
def pq_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("pq")
    for i in range(3):
        t = pa.table({"id": list(range(i * 10, i * 10 + 10)), "x": [float(v) for v in range(10)],
                      "text": [f"row {i}-{v}" for v in range(10)]})
        pq.write_table(t, root / f"part-{i}.parquet")
    (root / "_SUCCESS").write_text("")
    return root


def test_parquet_paths_columns_and_filter(pq_dir):
    assert md.read_parquet(str(pq_dir)).count() == 30
    assert md.read_parquet(str(pq_dir / "part-1.parquet")).count() == 10
    assert md.read_parquet(str(pq_dir / "part-*.parquet")).count() == 30
    assert md.read_parquet([str(pq_dir / "part-0.parquet"), str(pq_dir / "part-2.parquet")]).count() == 20
    assert md.read_parquet(f"file://{pq_dir}").count() == 30
    ds = md.read_parquet(str(pq_dir), columns=["id"], filter=pc.field("id") >= 25)
    assert ds.columns() == ["id"] and [r["id"] for r in ds.take_all()] == [25, 26, 27, 28, 29]


def test_parquet_hive_partitions_become_columns_and_prune(tmp_path):
    for year in (2023, 2024):
        folder = tmp_path / f"year={year}"
        folder.mkdir()
        pq.write_table(pa.table({"v": [year * 10, year * 10 + 1]}), folder / "data.parquet")
    ds = md.read_parquet(str(tmp_path))
    assert ds.schema().types[-1] == pa.string()  # Ray's hive values are strings (muster's were int32)
    assert sorted((r["year"], r["v"]) for r in ds.take_all())[0] == ("2023", 20230)
    only = md.read_parquet(str(tmp_path), filter=pc.field("year") == "2024")
    assert len(only._node.op.tasks) == 1  # the 2023 file is never opened
    assert [r["v"] for r in only.take_all()] == [20240, 20241]
    typed = pads.partitioning(pa.schema([("year", pa.int16())]), flavor="hive")  # types of your own: say so
    typed_rows = md.read_parquet(str(tmp_path), partitioning=typed, filter=pc.field("year") > 2023).take_all()
    assert typed_rows[0]["year"] == 2024


def test_csv_json_text_binary(tmp_path):
    (tmp_path / "a.csv").write_text("a,b\n1,x\n2,y\n")
    (tmp_path / "b.csv").write_text("a,b\n3,z\n")
    assert md.read_csv(str(tmp_path / "*.csv")).take_all() == [{"a": 1, "b": "x"}, {"a": 2, "b": "y"},
                                                               {"a": 3, "b": "z"}]
    (tmp_path / "r.jsonl").write_text('{"k": 1, "s": "a"}\n{"k": 2, "s": "b"}\n')
    assert md.read_json(str(tmp_path / "r.jsonl")).take_all() == [{"k": 1, "s": "a"}, {"k": 2, "s": "b"}]
    (tmp_path / "t.txt").write_text("hello\n\nworld\n")
    assert md.read_text(str(tmp_path / "t.txt")).take_all() == [{"text": "hello"}, {"text": "world"}]
    rows = md.read_binary_files(str(tmp_path / "t.txt"), include_paths=True).take_all()
    assert rows[0]["bytes"] == b"hello\n\nworld\n" and rows[0]["path"].endswith("t.txt")


def test_writers_round_trip(tmp_path, pq_dir):
    ds = md.read_parquet(str(pq_dir)).map_batches(lambda b: {"id": b["id"], "y": b["x"] * 2})
    files = ds.write_parquet(str(tmp_path / "out"))
    assert files and all(f.endswith(".parquet") for f in files)
    back = md.read_parquet(str(tmp_path / "out"))
    assert sorted(r["id"] for r in back.take_all()) == list(range(30))
    md.range(5).write_csv(str(tmp_path / "csv"))
    assert [r["id"] for r in md.read_csv(str(tmp_path / "csv")).take_all()] == [0, 1, 2, 3, 4]
    md.from_items([{"a": 1, "s": "q"}]).write_json(str(tmp_path / "js"))
    assert md.read_json(str(tmp_path / "js")).take_all() == [{"a": 1, "s": "q"}]
    # "Saving tensor data" as JSON: a tensor's rows keep their shape (they were written flattened, [0, 1, 2, 3])
    md.from_numpy(np.arange(8).reshape(2, 2, 2)).write_json(str(tmp_path / "tj"))
    back = md.read_json(str(tmp_path / "tj"))
    assert back.schema().types == [pa.list_(pa.list_(pa.int64()))]
    assert sorted([list(x) for x in r["data"]] for r in back.take_all()) == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]


def test_writers_take_rays_mode_rows_per_file_and_partition_columns(tmp_path):
    """Ray's write_* keywords: before, mode=/min_rows_per_file=/partition_cols= reached pyarrow, which
    refused them naming its own __cinit__."""
    out = str(tmp_path / "w")
    ds = md.from_items([{"g": i % 2, "v": i} for i in range(20)], override_num_blocks=4)
    assert len(ds.write_parquet(out)) == 4 and len(ds.write_parquet(out)) == 4  # append (Ray's default)
    assert md.read_parquet(out).count() == 40
    files = ds.write_parquet(out, mode="overwrite", min_rows_per_file=10)
    assert len(files) == 2 and sorted(os.listdir(out)) == sorted(os.path.basename(f) for f in files)
    assert md.read_parquet(out).count() == 20
    assert ds.write_csv(out, mode=md.SaveMode.IGNORE) == [] and md.read_parquet(out).count() == 20
    with pytest.raises(ValueError, match="already holds files"):
        ds.write_json(out, mode="error")
    parts = ds.write_parquet(str(tmp_path / "p"), partition_cols=["g"])
    assert sorted({os.path.basename(os.path.dirname(f)) for f in parts}) == ["g=0", "g=1"]
    odd = md.read_parquet(str(tmp_path / "p" / "g=1"))
    assert odd.columns() == ["v"] and sorted(r["v"] for r in odd.take_all()) == list(range(1, 20, 2))
    with pytest.raises(ValueError, match=r"mode='sometimes'"):
        ds.write_parquet(out, mode="sometimes")


def test_writes_are_whole_or_absent_and_take_rays_write_options(tmp_path):
    import pyarrow.fs as pafs

    out, ds = str(tmp_path / "w"), md.from_items([{"a": i, "s": str(i)} for i in range(6)])
    with pytest.raises(Exception):
        ds.write_parquet(out, compression="no-such-codec")  # fails inside pyarrow, mid-file
    assert [n for n in os.listdir(out) if not n.startswith(".")] == []  # no 0-byte file left behind
    ds.write_parquet(out)  # the retry appends, and the folder reads
    assert md.read_parquet(out).count() == 6
    # Ray's task options change nothing here; its *_args_fn and a pyarrow filesystem are taken
    files = ds.write_parquet(str(tmp_path / "p"), filesystem=pafs.LocalFileSystem(), concurrency=2,
                             ray_remote_args={"num_cpus": 1}, try_create_dir=True,
                             arrow_parquet_args_fn=lambda: {"compression": "gzip"})
    assert pq.ParquetFile(files[0]).metadata.row_group(0).column(0).compression == "GZIP"
    gz = ds.write_csv(str(tmp_path / "c"), arrow_open_stream_args={"compression": "gzip"}, concurrency=2)
    assert gz[0].endswith(".csv.gz") and md.read_csv(str(tmp_path / "c")).count() == 6
    ds.write_json(str(tmp_path / "j"), filesystem=pafs.LocalFileSystem(), pandas_json_args_fn=lambda: {"index": False})
    assert md.read_json(str(tmp_path / "j")).count() == 6
    with pytest.raises(TypeError, match=r"write_csv: unknown option\(s\) \['colums'\]"):
        ds.write_csv(str(tmp_path / "x"), colums=["a"])


def test_writers_name_their_files_by_a_filename_provider_as_rays(tmp_path):
    """write_parquet handed filename_provider= to pyarrow (a raw TypeError); write_csv/json refused it."""
    from muster.data.datasource import FilenameProvider

    class Named(FilenameProvider):
        def get_filename_for_task(self, write_uuid, task_index):
            return f"task_{task_index}.x"

    class Unique(FilenameProvider):
        def get_filename_for_task(self, write_uuid, task_index):
            return f"part_{write_uuid}_{task_index}.parquet"

    ds = md.range(10, override_num_blocks=2)
    for kind in ("csv", "json"):
        getattr(ds, f"write_{kind}")(str(tmp_path / kind), filename_provider=Named())
        assert sorted(os.listdir(tmp_path / kind)) == ["task_0.x", "task_1.x"]  # Ray 2.60's names
    files = [os.path.basename(f) for f in ds.write_parquet(str(tmp_path / "pq"), filename_provider=Unique())]
    assert sorted(os.listdir(tmp_path / "pq")) == sorted(files) and [f[-12:] for f in sorted(files)] == [
        "_0-0.parquet", "_1-0.parquet"] and md.read_parquet(str(tmp_path / "pq")).count() == 10
    with pytest.raises(ValueError, match=r"lacks the write_uuid .* or write with mode='overwrite'"):
        ds.write_parquet(str(tmp_path / "pq"), filename_provider=Named())  # an append would replace files (Ray's)
    ds.write_parquet(str(tmp_path / "pq"), filename_provider=Named(), mode="overwrite")
    assert sorted(os.listdir(tmp_path / "pq")) == ["task_0.x-0.parquet", "task_1.x-0.parquet"]
    with pytest.raises(TypeError, match="pass a muster.data.datasource.FilenameProvider"):
        ds.write_csv(str(tmp_path / "bad"), filename_provider="task.csv")


def test_read_json_takes_a_json_array_file_as_ray_does(tmp_path):
    (tmp_path / "arr.json").write_text('\n [{"a": 1, "s": "x"}, {"a": 2, "s": "y"}]')
    (tmp_path / "lines.jsonl").write_text('{"a": 3, "s": "z"}\n')
    rows = md.read_json([str(tmp_path / "arr.json"), str(tmp_path / "lines.jsonl")]).take_all()
    assert rows == [{"a": 1, "s": "x"}, {"a": 2, "s": "y"}, {"a": 3, "s": "z"}]
    (tmp_path / "nums.json").write_text("[1, 2]")
    with pytest.raises(Exception, match="holds a JSON array of ints; its items must be objects"):
        md.read_json(str(tmp_path / "nums.json")).take_all()
    for lines in (False, True):  # Ray's default, lines=False, reads both kinds too (muster refused it)
        assert md.read_json([str(tmp_path / "arr.json"), str(tmp_path / "lines.jsonl")], lines=lines).take_all() == rows


def test_from_pandas_text_is_arrow_string_as_rays_schema_shows():
    df = pd.DataFrame({"s": ["a", "b"], "p": pd.Series(["c", None], dtype="string[pyarrow]"), "i": [1, 2]})
    ds = md.from_pandas(df)
    assert [str(t) for t in ds.schema().types] == ["string", "string", "int64"]  # large_string before
    assert ds.union(md.from_items([{"s": "x", "p": "y", "i": 3}])).take_all()[2] == {"s": "x", "p": "y", "i": 3}
    big = pd.DataFrame({"s": pd.Series(["a"], dtype=pd.ArrowDtype(pa.large_string()))})  # asked for: kept
    assert str(md.from_pandas(big).schema().types[0]) == "large_string"


def test_readers_take_rays_task_options(tmp_path, pq_dir):
    md.range(3).write_csv(str(tmp_path / "c"))
    assert md.read_csv(str(tmp_path / "c"), override_num_blocks=2).count() == 3  # before: pyarrow's TypeError
    assert md.read_parquet(str(pq_dir), override_num_blocks=4, ray_remote_args={"num_cpus": 1}).count() == 30


def test_every_file_reader_adds_each_rows_file_with_include_paths(tmp_path, pq_dir):
    """Ray's include_paths: a last column ``path``. Before, read_parquet ignored it, then refused it."""
    (tmp_path / "a.csv").write_text("a\n1\n2\n")
    (tmp_path / "b.csv").write_text("a\n3\n")
    rows = md.read_csv(str(tmp_path / "*.csv"), include_paths=True).take_all()
    assert [(r["a"], os.path.basename(r["path"])) for r in rows] == [(1, "a.csv"), (2, "a.csv"), (3, "b.csv")]
    (tmp_path / "r.jsonl").write_text('{"k": 1}\n')
    assert md.read_json(str(tmp_path / "r.jsonl"), include_paths=True).columns() == ["k", "path"]
    (tmp_path / "t.txt").write_text("x\ny\n")
    text = md.read_text(str(tmp_path / "t.txt"), include_paths=True).take_all()
    assert [r["text"] for r in text] == ["x", "y"] and all(r["path"].endswith("t.txt") for r in text)
    parquet = md.read_parquet(str(pq_dir), include_paths=True)
    assert parquet.columns()[-1] == "path" and parquet.count() == 30
    by_file = {}
    for r in parquet.take_all():
        by_file.setdefault(r["path"], []).append(r["id"])
    assert sorted(by_file) == sorted(str(f) for f in pq_dir.glob("*.parquet"))  # every file, named in full
    for path, ids in by_file.items():  # each row names the file it is in
        assert sorted(ids) == sorted(pq.read_table(path)["id"].to_pylist())
    # a filter and a column subset go through the per-file scan
    one = md.read_parquet(str(pq_dir), columns=["id"], filter=pc.field("id") < 3, include_paths=True).take_all()
    assert sorted(r["id"] for r in one) == [0, 1, 2] and set(one[0]) == {"id", "path"}


def test_compressed_files_and_file_extensions(tmp_path):
    """Ray's loading guide: .gz files are read (by suffix, or arrow_open_stream_args={"compression":
    "gzip"}) and file_extensions= picks the files. Before, the gzip bytes were parsed as text
    (ArrowInvalid) and file_extensions was ignored (read_binary_files: a TypeError)."""
    import gzip

    with gzip.open(tmp_path / "a.csv.gz", "wt") as f:
        f.write("a,b\n1,x\n2,y\n")
    with gzip.open(tmp_path / "r.jsonl.gz", "wt") as f:
        f.write('{"k": 1}\n{"k": 2}\n')
    assert md.read_csv(str(tmp_path / "a.csv.gz")).take_all() == [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]
    assert md.read_csv(str(tmp_path / "a.csv.gz"), arrow_open_stream_args={"compression": "gzip"}).count() == 2
    assert [r["k"] for r in md.read_json(str(tmp_path / "r.jsonl.gz")).take_all()] == [1, 2]
    raw = md.read_binary_files(str(tmp_path / "a.csv.gz")).take_all()[0]["bytes"]
    assert raw[:2] == b"\x1f\x8b"  # binary files come as stored
    unzipped = md.read_binary_files(str(tmp_path / "a.csv.gz"), arrow_open_stream_args={"compression": "gzip"})
    assert unzipped.take_all()[0]["bytes"] == b"a,b\n1,x\n2,y\n"
    (tmp_path / "note.txt").write_text("skip me\n")
    assert md.read_binary_files(str(tmp_path), file_extensions=["gz"]).count() == 2
    assert md.read_text(str(tmp_path), file_extensions=["txt"]).take_all() == [{"text": "skip me"}]
    with pytest.raises(Exception, match=r"file_extensions=\['.png'\]"):
        md.read_binary_files(str(tmp_path), file_extensions=["png"])
    with pytest.raises(TypeError, match="unexpected keyword argument.*'colums'"):
        md.read_text(str(tmp_path), colums=["x"])


def test_memory_url_round_trip():
    import fsspec

    fsspec.filesystem("memory").rm("/mdtest", recursive=True) if fsspec.filesystem("memory").exists(
        "/mdtest") else None
    md.range(7).write_parquet("memory://mdtest/out")
    assert md.read_parquet("memory://mdtest/out").count() == 7


def test_big_parquet_file_reads_by_row_group(tmp_path, monkeypatch):
    from muster.data import sources

    pq.write_table(pa.table({"id": list(range(1000))}), tmp_path / "big.parquet", row_group_size=100)
    monkeypatch.setattr(sources, "task_bytes", lambda: 1)  # every file counts as big
    ds = md.read_parquet(str(tmp_path / "big.parquet"))
    assert len(ds._node.op.tasks) == 10
    assert [r["id"] for r in ds.take_all()] == list(range(1000))


def test_csv_and_json_add_hive_folders_as_string_columns_and_files_keep_a_row_cap(tmp_path):
    """Ray's read_csv/read_json partition on hive folders by default (muster's dropped them);
    write_*(max_rows_per_file=) was passed on to pyarrow, which refused it."""
    folder = tmp_path / "year=2022" / "month=09"
    folder.mkdir(parents=True)
    (folder / "sales.csv").write_text("order,qty\n10107,30\n")
    (folder / "sales.jsonl").write_text('{"order": 10107, "qty": 30}\n')
    want = [{"order": 10107, "qty": 30, "year": "2022", "month": "09"}]
    assert md.read_csv(str(tmp_path), file_extensions=["csv"]).take_all() == want
    assert md.read_json(str(tmp_path / "year=2022"), file_extensions=["jsonl"]).take_all() == want
    assert md.read_csv(str(folder / "sales.csv"), partitioning=None).take_all() == [{"order": 10107, "qty": 30}]
    with pytest.raises(ValueError, match="partitioning='dirname'"):
        md.read_csv(str(folder / "sales.csv"), partitioning="dirname")
    out = str(tmp_path / "capped")
    files = md.range(25, override_num_blocks=1).write_parquet(out, max_rows_per_file=10)
    assert sorted(pq.read_metadata(f).num_rows for f in files) == [5, 10, 10]
    with pytest.raises(ValueError, match="min_rows_per_file=20, max_rows_per_file=10"):
        md.range(5).write_csv(out, min_rows_per_file=20, max_rows_per_file=10)


def test_read_images_and_from_torch_as_rays(tmp_path):
    """Ray Data's image batch-inference examples start with read_images; both were refused."""
    from PIL import Image

    (tmp_path / "sub").mkdir()
    Image.fromarray(np.full((4, 6, 3), 200, np.uint8)).save(tmp_path / "a.png")
    Image.fromarray(np.full((5, 3, 3), 10, np.uint8)).save(tmp_path / "sub" / "b.bmp")
    (tmp_path / "notes.txt").write_text("not an image")  # skipped: not an image extension
    rows = sorted(md.read_images(str(tmp_path), include_paths=True).take_all(), key=lambda r: r["path"])
    assert [(r["image"].shape, r["image"].dtype, os.path.basename(r["path"])) for r in rows] == [
        ((4, 6, 3), np.uint8, "a.png"), ((5, 3, 3), np.uint8, "b.bmp")]  # sizes differ: kept as they are
    assert (rows[0]["image"] == 200).all()
    assert sorted(md.read_images(str(tmp_path)).map(lambda r: r).input_files()) == [
        str(tmp_path / "a.png"), str(tmp_path / "sub" / "b.bmp")]  # Ray's input_files (it was missing)
    assert md.range(3).input_files() == []
    # one row per file, known unread (as Ray prints it): print(ds) said num_rows=? and count() read every image
    images = md.read_images(str(tmp_path))
    assert "num_rows=2" in repr(images) and images.count() == 2 and md.read_binary_files(str(tmp_path)).count() == 3
    batch = md.read_images(str(tmp_path), size=(2, 3), mode="L").take_batch()
    assert batch["image"].shape == (2, 2, 3) and batch["image"].dtype == np.uint8
    with pytest.raises(ValueError, match=r"size=\(2,\)"):
        md.read_images(str(tmp_path), size=(2,))

    np.save(tmp_path / "a.npy", np.arange(6).reshape(3, 2))
    np.save(tmp_path / "sub" / "b.npy", np.arange(10, 12).reshape(1, 2))
    got = md.read_numpy(str(tmp_path)).take_batch()["data"]  # Ray's read_numpy (it was refused)
    assert sorted(got.tolist()) == [[0, 1], [2, 3], [4, 5], [10, 11]]

    class Squares(torch.utils.data.Dataset):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return torch.full((2,), float(i * i))

    assert [r["item"].tolist() for r in md.from_torch(Squares()).take_all()] == [[0, 0], [1, 1], [4, 4]]
    with pytest.raises(TypeError, match="from_items"):
        md.from_torch(torch.utils.data.TensorDataset(torch.zeros(2, 2), torch.zeros(2)))

    class Named(Squares):
        def __getitem__(self, i):
            return {"x": torch.full((2,), float(i)), "y": i}

    with pytest.raises(TypeError, match=r"dicts holding tensors .*from_items\(\[dataset\[i\] for i in range"):
        md.from_torch(Named())  # was a raw ArrowInvalid
