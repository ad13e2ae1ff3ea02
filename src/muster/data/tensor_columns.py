"""Tensor columns: numpy arrays of one shape per row stored as Arrow's fixed-shape tensor type, and arrays
whose shapes differ row to row as :class:`VariableShapeTensorType`; their conversion to numpy, and how blocks
whose same-named tensor columns differ (in shape, or with rows of None) are combined.

A row of None in a tensor column is a null there, as in Ray: a map that returns an array for some rows and
None for others (or blocks of arrays combined with blocks of only None) reads back with None where it was
None and arrays elsewhere; a batch of such a column is an object array of ndarrays and None, as Ray's is.
"""

from __future__ import annotations

import json
from typing import Any, Optional

import numpy as np
import pyarrow as pa


class VariableShapeTensorType(pa.ExtensionType):
    """Tensors of one dtype and number of dimensions whose shapes differ row to row: each row's
    values, flat (``data``), and its ``shape``. Registered with pyarrow, so Parquet files keep it."""

    def __init__(self, value_type: pa.DataType, ndim: int):
        self.value_type, self.ndim = value_type, ndim
        storage = pa.struct([("data", pa.large_list(value_type)), ("shape", pa.list_(pa.int64(), ndim))])
        super().__init__(storage, "muster.variable_shape_tensor")

    def __arrow_ext_serialize__(self) -> bytes:
        return json.dumps({"ndim": self.ndim}).encode()

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType, serialized: bytes) -> "VariableShapeTensorType":
        return cls(storage_type.field("data").type.value_type, int(json.loads(serialized)["ndim"]))

    def __reduce__(self) -> Any:
        return VariableShapeTensorType, (self.value_type, self.ndim)


try:
    pa.register_extension_type(VariableShapeTensorType(pa.uint8(), 1))
except pa.ArrowKeyError:  # registered already (this module imported again)
    pass

TENSOR_TYPES = (pa.FixedShapeTensorType, VariableShapeTensorType)


def _null_mask(values: list[Optional[np.ndarray]]) -> Optional[pa.Array]:
    return pa.array([v is None for v in values]) if any(v is None for v in values) else None


def fixed_tensor_array(values: list[Optional[np.ndarray]]) -> pa.ExtensionArray:
    """Arrays of one shape (None in some rows: nulls there) as one fixed-shape tensor array. Each is copied
    row-major whatever its layout: pyarrow would record a transposed view's memory order as the shape (with a
    permutation) and HWC->CHW images would read back with the wrong shape."""
    arrays = [v for v in values if v is not None]
    stacked = np.stack(arrays)
    if len(arrays) < len(values):
        full = np.zeros((len(values), *stacked.shape[1:]), dtype=stacked.dtype)
        full[[i for i, v in enumerate(values) if v is not None]] = stacked
        stacked = full
    dense = pa.FixedShapeTensorArray.from_numpy_ndarray(np.ascontiguousarray(stacked))
    mask = _null_mask(values)
    if mask is None:
        return dense
    storage = pa.FixedSizeListArray.from_arrays(dense.storage.values, type=dense.storage.type, mask=mask)
    return pa.ExtensionArray.from_storage(dense.type, storage)


def variable_tensor_array(values: list[Optional[np.ndarray]]) -> pa.ExtensionArray:
    """Arrays of one number of dimensions and any shapes (None in some rows: nulls there) as one
    :class:`VariableShapeTensorType` array."""
    arrays = [v for v in values if v is not None]
    dtype = np.result_type(*arrays)
    ndim = arrays[0].ndim
    flat = [np.empty(0, dtype) if v is None else np.ascontiguousarray(v, dtype=dtype).ravel() for v in values]
    offsets = np.zeros(len(flat) + 1, dtype=np.int64)
    np.cumsum([f.size for f in flat], out=offsets[1:])
    data = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(np.concatenate(flat) if flat else
                                                                      np.empty(0, dtype)))
    dims = np.array([(0,) * ndim if v is None else v.shape for v in values], dtype=np.int64).ravel()
    shapes = pa.FixedSizeListArray.from_arrays(pa.array(dims), ndim)
    storage = pa.StructArray.from_arrays([data, shapes], names=["data", "shape"], mask=_null_mask(values))
    return pa.ExtensionArray.from_storage(VariableShapeTensorType(data.type.value_type, ndim), storage)


def tensor_column_to_numpy(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A tensor column as numpy: one ndarray of shape ``(rows, *shape)`` when every row holds an array of
    one shape, else an object array of the rows' ndarrays (None where a row is null)."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    if isinstance(col.type, pa.FixedShapeTensorType):
        if not chunks:
            return np.empty((0, *col.type.shape), dtype=col.type.value_type.to_pandas_dtype())
        parts = [_nullable_fixed_to_numpy(c) for c in chunks]
        if all(p.dtype != object for p in parts):
            return parts[0] if len(parts) == 1 else np.concatenate(parts)
    else:
        parts = [_variable_to_numpy(c) for c in chunks]
        if not parts:
            return np.empty(0, dtype=object)
    joined = np.empty(sum(len(p) for p in parts), dtype=object)
    joined[:] = [row for p in parts for row in p]
    return stack_if_uniform(joined)


def _nullable_fixed_to_numpy(arr: Any) -> np.ndarray:
    """A fixed-shape tensor array as one ndarray, or, when some rows are null, as an object array of each
    row's ndarray and None (Arrow's own conversion refuses nulls)."""
    if not arr.null_count:
        return fixed_tensor_to_numpy(arr)
    valid = arr.is_valid()
    stacked = fixed_tensor_to_numpy(arr.filter(valid))
    out = np.empty(len(arr), dtype=object)
    for i, row in zip(np.flatnonzero(valid.to_numpy(zero_copy_only=False)), stacked):
        out[i] = row
    return out


def fixed_tensor_to_numpy(arr: Any) -> np.ndarray:
    """A fixed-shape tensor array without nulls as one ndarray of shape ``(rows, *shape)``. Arrow's tensors
    hold numbers only, so bool, string, bytes and temporal values are read from the storage's flat values
    (strings as numpy ``str``, bytes as ``bytes``, as they were written)."""
    kind = arr.type.value_type
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
        return arr.to_numpy_ndarray()
    values = arr.storage.flatten().to_numpy(zero_copy_only=False)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        values = values.astype(str)
    elif pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind):
        values = values.astype(bytes)
    shape, order = list(arr.type.shape), list(arr.type.permutation or range(len(arr.type.shape)))
    return values.reshape((len(arr), *shape)).transpose((0, *[1 + i for i in order]))  # Arrow's shape: the memory's


def _variable_to_numpy(arr: pa.ExtensionArray) -> np.ndarray:
    """A :class:`VariableShapeTensorType` array as an object array of ndarrays (stacked when the shapes agree)."""
    data, shapes = arr.storage.field("data"), arr.storage.field("shape")  # null rows' children kept in place
    flat = data.values.to_numpy(zero_copy_only=False)
    offsets = data.offsets.to_numpy()
    ndim = arr.type.ndim
    dims = shapes.values.slice(shapes.offset * ndim, len(arr) * ndim).fill_null(0).to_numpy().reshape(len(arr), ndim)
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    out = np.empty(len(arr), dtype=object)
    for i in range(len(arr)):
        out[i] = flat[offsets[i]:offsets[i + 1]].reshape(dims[i]) if valid[i] else None
    return stack_if_uniform(out)


def stack_if_uniform(values: np.ndarray) -> np.ndarray:
    shapes = {getattr(v, "shape", None) for v in values}
    if len(values) and len(shapes) == 1 and None not in shapes:
        return np.stack(list(values))
    return values


def _as_variable(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """A tensor column (fixed shape or not, null rows kept) as a :class:`VariableShapeTensorType` one."""
    if isinstance(col.type, VariableShapeTensorType):
        return col
    rows = list(tensor_column_to_numpy(col))
    return pa.chunked_array([variable_tensor_array(rows)]) if rows else pa.chunked_array([], col.type)


def same_kind_of_tensor(a: pa.DataType, b: pa.DataType) -> bool:
    """Tensor types that differ only in shape (one combines with the other as variable-shape)."""
    def rank(t: Any) -> int:
        return int(t.ndim) if isinstance(t, VariableShapeTensorType) else len(t.shape)

    return isinstance(a, TENSOR_TYPES) and isinstance(b, TENSOR_TYPES) and \
        (str(a.value_type), rank(a)) == (str(b.value_type), rank(b))


def unify_tensors(blocks: list[pa.Table]) -> list[pa.Table]:
    """Blocks whose same-named tensor columns differ in shape (fixed ``[20,30,3]`` here, ``[32,32,3]``
    there) with those columns as variable-shape tensors, so they combine (Ray unifies them so too). A block
    whose column holds only None (typed null) is left to ``concat_tables``, which makes it nulls of the
    tensor type."""
    out = list(blocks)
    for name in blocks[0].column_names:
        types = [t for t in (b.schema.field(name).type for b in blocks if name in b.column_names)
                 if not pa.types.is_null(t)]
        if len({str(t) for t in types}) < 2 or not all(same_kind_of_tensor(types[0], t) for t in types):
            continue  # one type, or different dtypes or ranks: left to concat_tables, whose error names them
        kind = VariableShapeTensorType(types[0].value_type, len(types[0].shape) if isinstance(
            types[0], pa.FixedShapeTensorType) else types[0].ndim)
        out = [b.set_column(b.schema.get_field_index(name), name, _as_variable(b.column(name))
                            if not pa.types.is_null(b.schema.field(name).type) else pa.nulls(b.num_rows, kind))
               if name in b.column_names else b for b in out]
    return out
