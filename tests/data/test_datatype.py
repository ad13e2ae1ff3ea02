"""``muster.data.datatype`` as Ray 2.60's ``ray.data.datatype``: factories, conversions, reprs (Ray's docstring
examples' outputs), categories; and the same answers as Ray's own class where Ray is installed."""

from __future__ import annotations

import datetime
import pickle

import numpy as np
import pyarrow as pa
import pytest

from muster.data.datatype import DataType, TypeCategory
from muster.exceptions import InvalidArgumentError, InvalidTypeError


def test_reprs_are_rays_docstring_outputs():
    assert repr(DataType.from_arrow(pa.timestamp("s"))) == "DataType(arrow:timestamp[s])"
    assert repr(DataType.from_arrow(pa.int64())) == "DataType(arrow:int64)"
    assert repr(DataType.from_numpy(np.dtype("int32"))) == "DataType(numpy:int32)"
    assert repr(DataType.from_numpy("float64")) == "DataType(numpy:float64)"
    assert repr(DataType.infer_dtype(5)) == "DataType(arrow:int64)"
    assert repr(DataType.infer_dtype("hello")) == "DataType(arrow:string)"
    assert repr(DataType.infer_dtype(np.int32(42))) == "DataType(numpy:int32)"
    assert repr(DataType(int)) == "DataType(python:int)"
    assert DataType(int).to_python_type() is int
    assert DataType.from_numpy(np.dtype("float32")).to_numpy_dtype() == np.dtype("float32")


def test_factories_nested_types_and_conversions():
    plain = {"int8": pa.int8(), "uint64": pa.uint64(), "float32": pa.float32(), "string": pa.string(),
             "bool": pa.bool_(), "binary": pa.binary()}
    for name, arrow in plain.items():
        assert getattr(DataType, name)().to_arrow_dtype() == arrow
    assert DataType.list(DataType.int64()).to_arrow_dtype() == pa.list_(pa.int64())
    assert DataType.fixed_size_list(DataType.float32(), 3).to_arrow_dtype() == pa.list_(pa.float32(), 3)
    assert DataType.struct([("x", DataType.int64())]).to_arrow_dtype() == pa.struct([("x", pa.int64())])
    assert DataType.map(DataType.string(), DataType.int64()).to_arrow_dtype() == pa.map_(pa.string(), pa.int64())
    assert DataType.temporal("timestamp", unit="us", tz="UTC").to_arrow_dtype() == pa.timestamp("us", tz="UTC")
    assert DataType.temporal("time64", unit="ns").to_arrow_dtype() == pa.time64("ns")
    assert DataType.tensor((3, 4), DataType.float32()).is_tensor_type()
    assert DataType.variable_shaped_tensor(DataType.float32(), ndim=2).is_of(TypeCategory.TENSOR)
    assert DataType.from_numpy("int64").to_arrow_dtype() == pa.int64()
    assert DataType(int).to_arrow_dtype([1, 2]) == pa.int64()
    assert DataType.int64().to_numpy_dtype() == np.dtype("int64")
    assert DataType.from_dtype(np.float32) == DataType.from_numpy("float32")
    assert DataType.from_dtype(pa.string()) == DataType.string() and DataType.from_dtype(None) is None
    assert DataType.int64() == DataType.from_arrow(pa.int64()) != DataType.from_numpy("int64")
    assert len({DataType.int64(), DataType.from_arrow(pa.int64())}) == 1
    assert pickle.loads(pickle.dumps(DataType.struct([("a", DataType.string())]))) == DataType.struct(
        [("a", DataType.string())])


def test_categories_and_predicates():
    assert DataType.list(DataType.int64()).is_of("list") and not DataType.int64().is_of("list")
    assert DataType.large_list(DataType.int64()).is_of(TypeCategory.LARGE_LIST)
    assert not DataType.int64().is_of("no such category")
    assert DataType.from_numpy("int16").is_integer_type() and DataType(float).is_floating_type()
    assert DataType.from_numpy("complex64").is_numerical_type() and not DataType.string().is_numerical_type()
    assert DataType.from_numpy("<U3").is_string_type() and DataType(datetime.date).is_temporal_type()
    assert DataType.from_arrow(pa.dictionary(pa.int8(), pa.string())).is_string_type()
    assert DataType.struct([("a", DataType.int64())]).is_nested_type() and DataType.uint64().is_uint64_type()


def test_bad_types_name_the_fix():
    with pytest.raises(InvalidTypeError, match="pyarrow DataType, a numpy dtype or a Python type"):
        DataType("int64")
    with pytest.raises(InvalidArgumentError, match="use one of 'timestamp'"):
        DataType.temporal("week")
    with pytest.raises(InvalidArgumentError, match="not backed by a Python type"):
        DataType.int64().to_python_type()
    with pytest.raises(InvalidArgumentError, match="needs values"):
        DataType(dict).to_arrow_dtype()


def test_the_same_answers_as_rays_datatype():
    ray_datatype = pytest.importorskip("ray.data.datatype")

    ours = [DataType.int32(), DataType.from_numpy("float32"), DataType(int), DataType.list(DataType.string()),
            DataType.struct([("x", DataType.int64())]), DataType.temporal("date32"), DataType.binary()]
    checks = ["is_list_type", "is_struct_type", "is_integer_type", "is_floating_type", "is_numerical_type",
              "is_string_type", "is_binary_type", "is_temporal_type", "is_nested_type", "is_boolean_type"]
    for dtype in ours:
        theirs = ray_datatype.DataType(dtype._physical_dtype)
        assert repr(theirs) == repr(dtype)
        assert [getattr(dtype, c)() for c in checks] == [getattr(theirs, c)() for c in checks], repr(dtype)
