"""Parquet that Ray wrote with tensor columns reads back with the shape and dtype Ray wrote.

Ray stores an ndarray column as a pyarrow extension type; in the Parquet file that is the storage
(``large_list<uint8>`` for ``ray.data.arrow_tensor_v2``) with two field metadata keys, the type's
name and its JSON row shape. The files here are made with plain pyarrow, the same schema Ray 2.60
writes for ``ray.data.from_numpy(np.zeros((3, 4, 5, 3), np.uint8)).write_parquet(dir)`` (checked
with ``pq.read_schema`` on Ray's output), so the test needs no Ray. A process that imported Ray
has Ray's types registered with pyarrow and reads the column as those types instead: the
``registered`` runs stand in a registered type of the same name and storage.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import muster.data as md
from muster.data import DataTypeError
from muster.exceptions import InvalidArgumentError

V2, V1, VARIABLE = "ray.data.arrow_tensor_v2", "ray.data.arrow_tensor", "ray.data.arrow_variable_shaped_tensor"


class _RegisteredRayType(pa.ExtensionType):
    """What pyarrow reads the column as once Ray's type of this name is registered (Ray imported)."""

    def __init__(self, storage: pa.DataType, name: str, serialized: bytes):
        self._serialized = serialized
        super().__init__(storage, name)

    def __arrow_ext_serialize__(self) -> bytes:
        return self._serialized

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType, serialized: bytes) -> "_RegisteredRayType":
        raise NotImplementedError  # replaced per registered name below


@pytest.fixture(params=["plain", "registered"])
def registered(request):
    """'registered': Ray's type names are known to pyarrow for this test (as after ``import ray``)."""
    if request.param == "plain":
        yield False
        return
    mine = []
    for name in (V2, V1, VARIABLE):
        kind = type(f"Stand_{name.rsplit('.', 1)[1]}", (_RegisteredRayType,), {
            "__arrow_ext_deserialize__": classmethod(lambda cls, st, ser, n=name: cls(st, n, ser))})
        try:
            pa.register_extension_type(kind(pa.int64(), name, b"[]"))
            mine.append(name)
        except pa.ArrowKeyError:  # Ray itself is imported in this process: its types serve
            pass
    yield True
    for name in mine:
        pa.unregister_extension_type(name)


def _ray_field(name: str, storage: pa.DataType, ext: str, metadata: bytes) -> pa.Field:
    return pa.field(name, storage, metadata={b"ARROW:extension:name": ext.encode(),
                                             b"ARROW:extension:metadata": metadata})


def _write_fixed(path, arr: np.ndarray, ext: str = V2, extra: dict | None = None) -> None:
    """``arr`` as Ray writes a tensor column ``data``: each row's values flat, the row shape as JSON."""
    lists = pa.large_list if ext == V2 else pa.list_
    values = pa.array(arr.reshape(-1))
    offsets = pa.array(np.arange(len(arr) + 1) * int(np.prod(arr.shape[1:])),
                       pa.int64() if ext == V2 else pa.int32())
    storage = (pa.LargeListArray if ext == V2 else pa.ListArray).from_arrays(offsets, values)
    assert storage.type == lists(values.type)
    fields = [_ray_field("data", storage.type, ext, json.dumps(list(arr.shape[1:])).encode())]
    columns = [storage]
    for name, col in (extra or {}).items():
        fields.append(pa.field(name, col.type))
        columns.append(col)
    pq.write_table(pa.Table.from_arrays(columns, schema=pa.schema(fields)), path)


def test_rays_fixed_shape_tensor_columns_keep_shape_and_dtype(tmp_path, registered):
    """Before: (3, 60) int64 rows (flat lists), no error."""
    images = np.arange(3 * 4 * 5 * 3, dtype=np.uint8).reshape(3, 4, 5, 3)
    _write_fixed(tmp_path / "v2.parquet", images, extra={"label": pa.array([7, 8, 9])})
    ds = md.read_parquet(str(tmp_path / "v2.parquet"))
    batch = ds.take_batch()
    assert batch["data"].shape == (3, 4, 5, 3) and batch["data"].dtype == np.uint8
    np.testing.assert_array_equal(batch["data"], images)
    assert list(batch["label"]) == [7, 8, 9]
    assert str(ds.schema().types[0]) == "ArrowTensorTypeV2(shape=(4, 5, 3), dtype=uint8)"

    old = np.linspace(0, 1, 8, dtype=np.float32).reshape(2, 2, 2)  # Ray's first type: list storage
    _write_fixed(tmp_path / "v1.parquet", old, ext=V1)
    rows = md.read_parquet(str(tmp_path / "v1.parquet")).take_batch()["data"]
    assert rows.dtype == np.float32 and rows.shape == (2, 2, 2)
    np.testing.assert_array_equal(rows, old)


def test_files_with_different_tensor_shapes_each_keep_their_own(tmp_path, registered):
    """Scanned together (a filter), the first file's shape must not be put on the second's rows."""
    _write_fixed(tmp_path / "a.parquet", np.zeros((2, 2, 3), np.float32), extra={"k": pa.array([0, 1])})
    _write_fixed(tmp_path / "b.parquet", np.ones((1, 3, 3), np.float32), extra={"k": pa.array([2])})
    for ds in (md.read_parquet(str(tmp_path)), md.read_parquet(str(tmp_path), filter=pc.field("k") >= 0)):
        rows = ds.take_all()
        assert [r["data"].shape for r in rows] == [(2, 3), (2, 3), (3, 3)]
        assert all(r["data"].dtype == np.float32 for r in rows) and rows[2]["data"].sum() == 9


def test_rays_variable_shaped_tensor_column(tmp_path, registered):
    arrays = [np.arange(6, dtype=np.int16).reshape(2, 3), np.arange(3, dtype=np.int16).reshape(1, 3)]
    data = pa.LargeListArray.from_arrays(pa.array([0, 6, 9], pa.int64()), pa.array(np.concatenate(
        [a.ravel() for a in arrays])))
    shape = pa.array([[2, 3], [1, 3]], pa.list_(pa.int64()))
    storage = pa.StructArray.from_arrays([data, shape], names=["data", "shape"])
    field = _ray_field("x", storage.type, VARIABLE, b"2")
    pq.write_table(pa.Table.from_arrays([storage], schema=pa.schema([field])), tmp_path / "var.parquet")
    got = [r["x"] for r in md.read_parquet(str(tmp_path / "var.parquet")).take_all()]
    assert [g.shape for g in got] == [(2, 3), (1, 3)] and all(g.dtype == np.int16 for g in got)
    np.testing.assert_array_equal(got[0], arrays[0])


READ_PICKLED = """
import sys
import muster.data as md
from muster.data import DataSchemaError
try:
    md.read_parquet(sys.argv[1]).take_batch()
except DataSchemaError as exc:
    print("refused:", exc)
"""


def test_pickled_shape_metadata_is_named_not_misread(tmp_path):
    """Ray 2.49-2.54 could write the shape with cloudpickle, which muster does not unpickle. Read in a fresh
    interpreter: in a process that imported Ray (as the suite's Ray-engine tests do), Ray's registered type
    refuses the metadata first, with its own error, and this path would go untested."""
    storage = pa.array([[1, 2]], pa.large_list(pa.uint8()))
    field = _ray_field("img", storage.type, V2, b"\x80\x05\x95\x08\x00\x00\x00\x00\x00\x00\x00K\x02\x85\x94.")
    pq.write_table(pa.Table.from_arrays([storage], schema=pa.schema([field])), tmp_path / "p.parquet")
    done = subprocess.run([sys.executable, "-c", READ_PICKLED, str(tmp_path / "p.parquet")], capture_output=True,
                          text=True, timeout=120)
    assert re.search(r"refused: .*'img'.*not JSON.*write it again", done.stdout, re.S), done.stdout + done.stderr


def test_tensor_column_schema_decodes_raw_ndarray_bytes(tmp_path):
    """Ray's read_parquet(tensor_column_schema={col: (dtype, shape)}): a binary column of ``arr.tobytes()``."""
    arrays = np.arange(3 * 2 * 2, dtype=np.float32).reshape(3, 2, 2)
    pq.write_table(pa.table({"t": [a.tobytes() for a in arrays], "i": [0, 1, 2]}), tmp_path / "b.parquet")
    ds = md.read_parquet(str(tmp_path / "b.parquet"), tensor_column_schema={"t": (np.float32, (2, 2))})
    batch = ds.take_batch()
    assert batch["t"].shape == (3, 2, 2) and batch["t"].dtype == np.float32
    np.testing.assert_array_equal(batch["t"], arrays)
    assert list(batch["i"]) == [0, 1, 2]

    with pytest.raises(InvalidArgumentError, match=r"'nope'.*the files have \['t', 'i'\]"):
        md.read_parquet(str(tmp_path / "b.parquet"), tensor_column_schema={"nope": (np.float32, (2, 2))})
    with pytest.raises(InvalidArgumentError, match=r"'i'.*int64.*binary"):
        md.read_parquet(str(tmp_path / "b.parquet"), tensor_column_schema={"i": (np.float32, (2, 2))})
    with pytest.raises(InvalidArgumentError, match=r"\(dtype, shape\)"):
        md.read_parquet(str(tmp_path / "b.parquet"), tensor_column_schema={"t": np.float32})
    with pytest.raises(DataTypeError, match=r"'t'.*16 bytes.*\(3, 3\) float32 needs 36"):
        md.read_parquet(str(tmp_path / "b.parquet"), tensor_column_schema={"t": (np.float32, (3, 3))}).take_batch()
