"""File sinks write each file whole or absent, as the ``write_*`` writers do: a write that fails midway
leaves no file under its final name and no hidden temporary behind; one a killed writer left is removed
by the next write into the folder."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest

import muster.data as md
from muster.core.temp_files import HOST, temp_name
from muster.data.exceptions import UserFunctionError


def _files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


class HalfRows(md.RowBasedFileDatasink):
    """Writes part of row 2's file, then fails (a full disk, say)."""

    def write_row_to_file(self, row, file):
        file.write(b"id=")
        if row["id"] == 2:
            raise OSError("disk full")
        file.write(str(row["id"]).encode())


class HalfBlock(md.BlockBasedFileDatasink):
    def write_block_to_file(self, block, file):
        file.write(b"first half,")
        if block.num_rows() > 3:
            raise OSError("disk full")
        file.write(b"second half")


def test_a_row_file_that_fails_midway_is_absent_and_its_temporary_removed(tmp_path):
    with pytest.raises(UserFunctionError, match="disk full"):
        md.range(4, override_num_blocks=1).write_datasink(HalfRows(str(tmp_path), file_format="txt"))
    files = _files(tmp_path)
    assert len(files) == 2 and all(f.endswith(("_000000.txt", "_000001.txt")) for f in files), files
    assert sorted((tmp_path / f).read_bytes() for f in files) == [b"id=0", b"id=1"]  # the rows before, whole


def test_a_block_file_that_fails_midway_is_absent_and_a_whole_one_is_renamed(tmp_path):
    with pytest.raises(UserFunctionError, match="disk full"):
        md.range(4, override_num_blocks=1).write_datasink(HalfBlock(str(tmp_path / "bad")))
    assert _files(tmp_path / "bad") == []  # neither the final name nor the hidden temporary
    md.range(2).write_datasink(HalfBlock(str(tmp_path / "ok"), file_format="txt.gz",
                                         open_stream_args={"compression": "gzip"}))
    (name,) = _files(tmp_path / "ok")
    assert name.endswith("_000000.txt.gz") and not name.startswith(".")
    assert gzip.decompress((tmp_path / "ok" / name).read_bytes()) == b"first half,second half"


def test_write_images_leaves_no_file_for_an_image_it_could_not_save(tmp_path):
    pytest.importorskip("PIL")
    rgb, rgba = np.zeros((4, 4, 3), np.uint8), np.zeros((4, 4, 4), np.uint8)  # JPEG cannot hold RGBA
    with pytest.raises(UserFunctionError, match="RGBA"):
        md.from_items([{"image": rgb}, {"image": rgba}]).write_images(str(tmp_path), column="image",
                                                                      file_format="jpeg")
    (name,) = _files(tmp_path)
    assert name.endswith("_000000.jpeg") and (tmp_path / name).stat().st_size > 0


class RowGroups(md.BlockBasedFileDatasink):
    """Its own write_block, through open_output_stream as Ray's sinks do: a copy of the block in a ``with``
    block, then a Parquet file written a row group per row and left open (pyarrow's ParquetWriter does not
    close a stream it was given). Row ``id == 5`` comes as float64, which the writer refuses mid-file."""

    def write_block(self, block, block_index, ctx):
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = block.to_arrow()
        with self.open_output_stream(f"{ctx.task_idx}-copy.parquet") as f:
            pq.write_table(table, f)
        writer = pq.ParquetWriter(self.open_output_stream(f"{ctx.task_idx}-groups.parquet"), table.schema)
        try:
            for i in range(table.num_rows):
                row = table.slice(i, 1)
                writer.write_table(row.cast(pa.schema([("id", pa.float64())])) if row["id"][0].as_py() == 5 else row)
        finally:
            writer.close()  # the footer, even after a failure: the file looks complete, and is still dropped


def test_open_output_stream_called_by_a_subclass_is_whole_or_absent(tmp_path):
    """A stream the subclass opens itself is renamed when its ``with`` ends or, left open, when the task
    returns; when the task fails mid-file (here pyarrow's ParquetWriter refusing a row group), the file
    being written is absent and its hidden temporary removed."""
    import pyarrow.parquet as pq

    with pytest.raises(UserFunctionError, match="schema"):
        md.range(8, override_num_blocks=2).write_datasink(RowGroups(str(tmp_path)), concurrency=1)
    assert _files(tmp_path) == ["0-copy.parquet", "0-groups.parquet", "1-copy.parquet"]  # not 1-groups
    assert pq.read_table(tmp_path / "0-groups.parquet").column("id").to_pylist() == [0, 1, 2, 3]
    assert pq.read_table(tmp_path / "1-copy.parquet").column("id").to_pylist() == [4, 5, 6, 7]


_SLOW_WRITER = """
import sys, time
import muster.data as md

class Stuck(md.BlockBasedFileDatasink):
    def write_block_to_file(self, block, file):
        file.write(b"half of a file,")
        file.flush()
        time.sleep(120)  # killed here

md.range(5, override_num_blocks=1).write_datasink(Stuck(sys.argv[1], file_format="parquet"))
"""


def _partials(root):
    return [f for f in _files(root) if ".partial" in os.path.basename(f)]


def test_a_writer_killed_mid_write_leaves_a_partial_that_the_next_write_removes(tmp_path):
    root = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_WRITER, str(root)], env={**os.environ})
    try:
        deadline = time.monotonic() + 60
        while not (os.path.isdir(root) and _partials(root)) and time.monotonic() < deadline:
            assert proc.poll() is None, "the writer ended before it was killed"
            time.sleep(0.05)
        (left,) = _partials(root)
        named = left.rsplit("-", 1)[-1]
        pid = int(named) if named.isdigit() else proc.pid  # the writer's own pid is in the name
        os.kill(pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pid) and time.monotonic() < deadline:  # (a child of the driver: reaped by then)
        time.sleep(0.05)
    assert _files(root) == [left]  # what the killed writer left: only its hidden file, half written
    files = md.from_items([{"id": 100 + i} for i in range(6)]).write_parquet(str(root), max_rows_per_file=3)
    assert _partials(root) == [] and len(files) == 3  # a file per block: 6 rows are 3 blocks of 2 (was 1 of 6)
    assert sorted(r["id"] for r in md.read_parquet(str(root)).take_all()) == list(range(100, 106))
    # a sink's write removes them too; a live writer's, and another host's, are kept
    sink_root = tmp_path / "sink"
    sink_root.mkdir()
    dead, live = f".a.txt.partial-{HOST}-{pid}", temp_name("b.txt", "partial")
    other_host = f".c.txt.partial-{'0' * 8 if HOST != '0' * 8 else '1' * 8}-{pid}"
    for name in (dead, live, other_host):
        (sink_root / name).write_bytes(b"half")
    md.range(2).write_datasink(HalfBlock(str(sink_root), file_format="txt"))
    assert sorted(_partials(sink_root)) == sorted([live, other_host])
    assert [(sink_root / f).read_bytes() for f in _files(sink_root) if not f.startswith(".")] == [
        b"first half,second half"]
