"""File sinks write each file whole or absent, as the ``write_*`` writers do: a write that fails midway
leaves no file under its final name and no hidden temporary behind."""

from __future__ import annotations

import gzip
import os

import numpy as np
import pytest

import muster.data as md
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
