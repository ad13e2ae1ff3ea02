"""Ray's tensor columns, as Ray writes them to Parquet, read back as muster's tensor columns.

Ray stores an ndarray column as a pyarrow extension type: ``ray.data.arrow_tensor_v2`` (each row's
values flat in a ``large_list``; ``ray.data.arrow_tensor``, Ray's first one, in a ``list``) with the
row shape as JSON in the extension metadata (``[128, 128, 3]``), or
``ray.data.arrow_variable_shaped_tensor`` (a struct of each row's flat ``data`` and its ``shape``;
the metadata is the number of dimensions). Without Ray, pyarrow reads such a column as its storage
and keeps the type's name and metadata on the field; in a process that imported Ray, as Ray's
types. Either way :func:`to_muster` makes it a fixed-shape tensor column (``pa.fixed_shape_tensor``)
or a :class:`~muster.data.block.VariableShapeTensorType` one, so batches have the shape and dtype
Ray wrote (not flat int64 lists). Ray is never imported here.

:func:`decode_bytes` is ``read_parquet(tensor_column_schema=)``: a binary column of raw C-order
ndarray bytes (``arr.tobytes()``) as a tensor column of the given dtype and shape, as Ray's.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from muster.data import block as blk
from muster.data.exceptions import DataSchemaError, DataTypeError
from muster.exceptions import InvalidArgumentError, InvalidTypeError

_NAME, _METADATA = b"ARROW:extension:name", b"ARROW:extension:metadata"
FIXED_SHAPE = ("ray.data.arrow_tensor_v2", "ray.data.arrow_tensor")
VARIABLE_SHAPE = "ray.data.arrow_variable_shaped_tensor"

#: ``read_parquet(tensor_column_schema=)``, checked: column -> (dtype, row shape)
TensorColumns = dict[str, tuple[np.dtype, tuple[int, ...]]]


def _ray_extension(field: pa.Field) -> tuple[str, bytes] | None:
    """(Ray's type name, its serialized metadata) for a Ray tensor column, else None."""
    if isinstance(field.type, pa.BaseExtensionType):  # Ray's types registered: Ray is imported
        name = field.type.extension_name
        serialize = getattr(field.type, "__arrow_ext_serialize__", None)
        return (name, serialize()) if (name in FIXED_SHAPE or name == VARIABLE_SHAPE) and serialize else None
    metadata = field.metadata or {}
    name = metadata.get(_NAME, b"").decode(errors="replace")
    return (name, metadata.get(_METADATA, b"")) if name in FIXED_SHAPE or name == VARIABLE_SHAPE else None


def has_ray_tensors(schema: pa.Schema) -> bool:
    return any(_ray_extension(f) is not None for f in schema)


def same_kind(a: pa.Field, b: pa.Field) -> bool:
    """Ray tensor columns of one type and dtype (their shapes may differ: they combine as variable-shape)."""
    def storage(t: pa.DataType) -> pa.DataType:
        return t.storage_type if isinstance(t, pa.BaseExtensionType) else t

    ext_a, ext_b = _ray_extension(a), _ray_extension(b)
    return ext_a is not None and ext_b is not None and ext_a[0] == ext_b[0] and storage(a.type) == storage(b.type)


def with_files_tensor_fields(schema: pa.Schema, file_schema: pa.Schema) -> pa.Schema:
    """``schema`` (a dataset's: its first file's) with each Ray tensor field as ``file_schema`` has it,
    so a scan of that file keeps the file's own row shape."""
    for i, field in enumerate(schema):
        j = file_schema.get_field_index(field.name)
        if j >= 0 and _ray_extension(field) is not None:
            schema = schema.set(i, file_schema.field(j))
    return schema


def to_muster(table: pa.Table, where: str) -> pa.Table:
    """``table`` with Ray's tensor columns as muster's (others as they are); ``where`` names the file."""
    for i, field in enumerate(table.schema):
        ext = _ray_extension(field)
        if ext is None:
            continue
        name, serialized = ext
        try:
            meta = json.loads(serialized)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise DataSchemaError(
                f"{where}: column {field.name!r} is Ray's {name} with metadata {serialized[:40]!r}, which is "
                "not JSON (Ray 2.49-2.54 could write it with cloudpickle, which muster does not unpickle: it "
                "can run code). Read the files with Ray and write it again with Ray 2.55 or later."
            ) from exc
        col = table.column(i)
        storage = [c.storage if isinstance(c, pa.ExtensionArray) else c for c in col.chunks]
        storage_type = field.type.storage_type if isinstance(field.type, pa.BaseExtensionType) else field.type
        try:
            if name == VARIABLE_SHAPE:
                new = _variable_shape(storage, storage_type, int(meta))
            else:
                new = _fixed_shape(storage, storage_type, tuple(int(d) for d in meta))
        except (pa.ArrowInvalid, KeyError, TypeError, ValueError) as exc:
            raise DataSchemaError(
                f"{where}: column {field.name!r} is Ray's {name} with metadata {serialized[:40]!r} and storage "
                f"{storage_type}, which do not agree ({exc}). The file is damaged or not Ray's: read the "
                "column with Ray, or drop it with columns=[...]."
            ) from exc
        table = table.set_column(i, pa.field(field.name, new.type, field.nullable), new)
    return table


def _fixed_shape(chunks: list[pa.Array], storage_type: pa.DataType, shape: tuple[int, ...]) -> pa.ChunkedArray:
    value_type = storage_type.value_type
    tensor = pa.fixed_shape_tensor(value_type, shape)
    flat = pa.list_(value_type, math.prod(shape))  # each row exactly this many values, or ArrowInvalid
    return pa.chunked_array([pa.ExtensionArray.from_storage(tensor, c.cast(flat)) for c in chunks], tensor)


def _variable_shape(chunks: list[pa.Array], storage_type: pa.DataType, ndim: int) -> pa.ChunkedArray:
    value_type = storage_type.field("data").type.value_type
    kind = blk.VariableShapeTensorType(value_type, ndim)
    arrays = []
    for c in chunks:
        data, shape = c.flatten()  # the struct's offset and nulls applied
        columns = [data.cast(pa.large_list(value_type)), shape.cast(pa.list_(pa.int64(), ndim))]
        parts = pa.StructArray.from_arrays(columns, names=["data", "shape"], mask=c.is_null() if c.null_count else None)
        arrays.append(pa.ExtensionArray.from_storage(kind, parts))
    return pa.chunked_array(arrays, kind)


# -- read_parquet(tensor_column_schema=) --------------------------------------------------
def check_tensor_columns(spec: Any, schema: pa.Schema) -> TensorColumns:
    """Ray's ``tensor_column_schema`` checked against the files' ``schema``: {column: (dtype, shape)}."""
    if not isinstance(spec, dict):
        raise InvalidTypeError(f"read_parquet(tensor_column_schema={spec!r}): pass a dict "
                               "{column: (dtype, shape)}, e.g. {'image': (np.uint8, (128, 128, 3))}.")
    out: TensorColumns = {}
    for name, value in spec.items():
        if not (isinstance(value, (tuple, list)) and len(value) == 2 and isinstance(value[1], (tuple, list))
                and all(isinstance(d, int) and d >= 0 for d in value[1])):
            raise InvalidArgumentError(f"read_parquet(tensor_column_schema={{{name!r}: {value!r}}}): each value is "
                                       "(dtype, shape), e.g. (np.uint8, (128, 128, 3)).")
        if name not in schema.names:
            raise InvalidArgumentError(f"read_parquet(tensor_column_schema=): no column {name!r}; the files have "
                                       f"{schema.names}.")
        kind = schema.field(name).type
        if not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
            raise InvalidArgumentError(f"read_parquet(tensor_column_schema=): column {name!r} is {kind}; it must be "
                                       "binary, each row an ndarray's raw bytes (arr.tobytes()).")
        dtype = value[0]
        try:
            dtype = np.dtype(dtype.to_pandas_dtype() if isinstance(dtype, pa.DataType) else dtype)
        except TypeError as exc:
            raise InvalidTypeError(f"read_parquet(tensor_column_schema={{{name!r}: {value!r}}}): {dtype!r} is not a "
                                   "numpy dtype; use e.g. np.float32.") from exc
        out[str(name)] = (dtype, tuple(value[1]))
    return out


def decode_bytes(table: pa.Table, spec: TensorColumns) -> pa.Table:
    """``table`` with each binary column of ``spec`` as a tensor column of its dtype and row shape."""
    for name, (dtype, shape) in spec.items():
        if name not in table.column_names:
            continue  # not read (columns=)
        arr = table.column(name).cast(pa.large_binary()).combine_chunks()
        size = dtype.itemsize * math.prod(shape)
        lengths = pc.binary_length(arr).fill_null(-1).to_numpy()
        bad = np.flatnonzero(lengths != size)
        if len(bad):
            got = "null" if lengths[bad[0]] < 0 else f"{lengths[bad[0]]} bytes"
            raise DataTypeError(
                f"read_parquet(tensor_column_schema=): column {name!r} row {bad[0]} holds {got}; {shape} {dtype} "
                f"needs {size}. Give the dtype and shape the arrays were saved with (arr.tobytes())."
            )
        if len(arr) == 0:
            values = np.empty((0, *shape), dtype)
        else:
            offsets = np.frombuffer(arr.buffers()[1], np.int64)[arr.offset:arr.offset + len(arr) + 1]
            raw = np.frombuffer(arr.buffers()[2], np.uint8)[offsets[0]:offsets[-1]]
            values = raw.view(dtype).reshape(len(arr), *shape)
            if not values.flags.aligned:
                values = values.copy()
        table = table.set_column(table.column_names.index(name), name, blk.array_from_values(values))
    return table
