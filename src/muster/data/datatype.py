"""``ray.data.datatype``: ``DataType``, one column type backed by a pyarrow type, a numpy dtype or a Python type,
and ``TypeCategory``, the groups ``DataType.is_of`` tests.

``DataType.int64()``, ``DataType.string()`` ... wrap pyarrow types; ``list``/``struct``/``map``/``tensor``/
``temporal`` build nested ones; ``from_arrow``/``from_numpy``/``from_dtype``/``infer_dtype`` convert. They print
as Ray's do: ``DataType(arrow:int64)``, ``DataType(numpy:int32)``, ``DataType(python:int)``. Expressions'
``udf(return_dtype=...)`` and ``cast(...)`` take them.
"""

from __future__ import annotations

import builtins
import datetime
import enum
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from muster.exceptions import InvalidArgumentError, InvalidTypeError

_PYTHON_ARROW = {bool: pa.bool_(), int: pa.int64(), float: pa.float64(), str: pa.string(), bytes: pa.binary()}
_TEMPORAL_UNITS = {"timestamp": "us", "time32": "s", "time64": "us", "duration": "us"}


class TypeCategory(str, enum.Enum):
    """Groups of types, for ``DataType.is_of``."""

    LIST = "list"
    LARGE_LIST = "large_list"
    STRUCT = "struct"
    MAP = "map"
    TENSOR = "tensor"
    TEMPORAL = "temporal"


class DataType:
    """A column type: a pyarrow ``DataType``, a numpy ``dtype`` or a Python type.

    Args:
        _physical_dtype: the backing type.

    Raises:
        InvalidTypeError: ``_physical_dtype`` is none of those three kinds.
    """

    def __init__(self, _physical_dtype: pa.DataType | np.dtype | type):
        if not isinstance(_physical_dtype, (pa.DataType, np.dtype, type)):
            raise InvalidTypeError(f"DataType({_physical_dtype!r}): pass a pyarrow DataType, a numpy dtype or a "
                                   "Python type, e.g. DataType.from_arrow(pa.int64()) or DataType.int64().")
        self._physical_dtype = _physical_dtype

    # what backs it
    def is_arrow_type(self) -> builtins.bool:
        return isinstance(self._physical_dtype, pa.DataType)

    def is_numpy_type(self) -> builtins.bool:
        return isinstance(self._physical_dtype, np.dtype)

    def is_python_type(self) -> builtins.bool:
        return isinstance(self._physical_dtype, type)

    # conversions
    def to_arrow_dtype(self, values: builtins.list[Any] | None = None) -> pa.DataType:
        """The pyarrow type; a Python type's is inferred from ``values`` (or its plain pyarrow type)."""
        physical = self._physical_dtype
        if isinstance(physical, pa.DataType):
            return physical
        if isinstance(physical, np.dtype):
            return pa.from_numpy_dtype(physical)
        if values:
            return pa.array(values).type
        if physical in _PYTHON_ARROW:
            return _PYTHON_ARROW[physical]
        raise InvalidArgumentError(f"{self!r}.to_arrow_dtype(): a Python type needs values to infer the pyarrow "
                                   "type from; pass values=[...] or use an Arrow-backed DataType such as "
                                   "DataType.int64().")

    def to_numpy_dtype(self) -> np.dtype:
        """The numpy dtype (``object`` where there is none)."""
        physical = self._physical_dtype
        if isinstance(physical, np.dtype):
            return physical
        if isinstance(physical, pa.DataType):
            try:
                return np.dtype(physical.to_pandas_dtype())
            except (TypeError, NotImplementedError, pa.ArrowNotImplementedError):
                return np.dtype("object")
        return np.dtype("object")

    def to_python_type(self) -> type:
        """The Python type backing it.

        Raises:
            InvalidArgumentError: it is backed by a pyarrow or numpy type.
        """
        if isinstance(self._physical_dtype, type):
            return self._physical_dtype
        raise InvalidArgumentError(f"{self!r} is not backed by a Python type; use to_arrow_dtype() or "
                                   "to_numpy_dtype().")

    # Ray's factories of plain types
    @classmethod
    def int8(cls) -> "DataType":
        return cls(pa.int8())

    @classmethod
    def int16(cls) -> "DataType":
        return cls(pa.int16())

    @classmethod
    def int32(cls) -> "DataType":
        return cls(pa.int32())

    @classmethod
    def int64(cls) -> "DataType":
        return cls(pa.int64())

    @classmethod
    def uint8(cls) -> "DataType":
        return cls(pa.uint8())

    @classmethod
    def uint16(cls) -> "DataType":
        return cls(pa.uint16())

    @classmethod
    def uint32(cls) -> "DataType":
        return cls(pa.uint32())

    @classmethod
    def uint64(cls) -> "DataType":
        return cls(pa.uint64())

    @classmethod
    def float32(cls) -> "DataType":
        return cls(pa.float32())

    @classmethod
    def float64(cls) -> "DataType":
        return cls(pa.float64())

    @classmethod
    def string(cls) -> "DataType":
        return cls(pa.string())

    @classmethod
    def bool(cls) -> "DataType":
        return cls(pa.bool_())

    @classmethod
    def binary(cls) -> "DataType":
        return cls(pa.binary())

    @classmethod
    def from_arrow(cls, arrow_type: pa.DataType) -> "DataType":
        return cls(arrow_type)

    @classmethod
    def from_numpy(cls, numpy_dtype: np.dtype | str) -> "DataType":
        return cls(np.dtype(numpy_dtype))

    @classmethod
    def from_dtype(cls, dtype: Any) -> "DataType | None":
        """A dtype of any kind (pyarrow, numpy or its name, a Python type, a pandas dtype) as a DataType;
        None where it has none."""
        if dtype is None or isinstance(dtype, DataType):
            return dtype
        if isinstance(dtype, pa.DataType):
            return cls(dtype)
        if isinstance(dtype, type) and not issubclass(dtype, np.generic):
            return cls(dtype)
        arrow = getattr(dtype, "pyarrow_dtype", None)  # pandas.ArrowDtype
        if isinstance(arrow, pa.DataType):
            return cls(arrow)
        if type(dtype).__name__ == "StringDtype":
            return cls(pa.string())
        try:
            return cls(np.dtype(getattr(dtype, "numpy_dtype", dtype)))
        except TypeError:
            return None

    @classmethod
    def infer_dtype(cls, value: Any) -> "DataType":
        """The type of ``value``: numpy's for numpy values, pyarrow's inference otherwise (the Python type where
        pyarrow has none)."""
        if isinstance(value, (np.ndarray, np.generic)):
            return cls(value.dtype)
        try:
            return cls(pa.array([value]).type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            return cls(type(value))

    # nested types
    @classmethod
    def list(cls, value_type: "DataType") -> "DataType":
        return cls(pa.list_(value_type.to_arrow_dtype()))

    @classmethod
    def large_list(cls, value_type: "DataType") -> "DataType":
        return cls(pa.large_list(value_type.to_arrow_dtype()))

    @classmethod
    def fixed_size_list(cls, value_type: "DataType", list_size: int) -> "DataType":
        return cls(pa.list_(value_type.to_arrow_dtype(), list_size))

    @classmethod
    def struct(cls, fields: builtins.list[tuple[str, "DataType"]]) -> "DataType":
        return cls(pa.struct([(name, dtype.to_arrow_dtype()) for name, dtype in fields]))

    @classmethod
    def map(cls, key_type: "DataType", value_type: "DataType") -> "DataType":
        return cls(pa.map_(key_type.to_arrow_dtype(), value_type.to_arrow_dtype()))

    @classmethod
    def tensor(cls, shape: tuple[int, ...], dtype: "DataType") -> "DataType":
        """Tensors of one ``shape`` (pyarrow's fixed-shape tensor type, muster's tensor columns)."""
        return cls(pa.fixed_shape_tensor(dtype.to_arrow_dtype(), list(shape)))

    @classmethod
    def variable_shaped_tensor(cls, dtype: "DataType", ndim: int = 2) -> "DataType":
        """Tensors of ``ndim`` dimensions whose shapes differ row to row."""
        from muster.data.block import VariableShapeTensorType

        return cls(VariableShapeTensorType(dtype.to_arrow_dtype(), ndim))

    @classmethod
    def temporal(cls, temporal_type: str, unit: str | None = None, tz: str | None = None) -> "DataType":
        """``"timestamp"`` (``unit``, default ``"us"``, and ``tz``), ``"date32"``, ``"date64"``, ``"time32"``
        (``"s"``/``"ms"``), ``"time64"`` (``"us"``/``"ns"``) or ``"duration"``.

        Raises:
            InvalidArgumentError: another ``temporal_type``, or a unit pyarrow refuses for it.
        """
        kind = str(temporal_type).lower()
        if kind in ("date32", "date64"):
            return cls(pa.date32() if kind == "date32" else pa.date64())
        if kind not in _TEMPORAL_UNITS:
            raise InvalidArgumentError(f"DataType.temporal({temporal_type!r}): use one of 'timestamp', 'date32', "
                                       "'date64', 'time32', 'time64' or 'duration'.")
        unit = unit or _TEMPORAL_UNITS[kind]
        try:
            if kind == "timestamp":
                return cls(pa.timestamp(unit, tz=tz))
            return cls({"time32": pa.time32, "time64": pa.time64, "duration": pa.duration}[kind](unit))
        except (ValueError, pa.ArrowInvalid) as exc:
            raise InvalidArgumentError(f"DataType.temporal({temporal_type!r}, unit={unit!r}): {exc}") from None

    # categories
    def is_of(self, category: TypeCategory | str) -> builtins.bool:
        """Whether it belongs to ``category`` (a ``TypeCategory`` or its value; an unknown one: False)."""
        try:
            category = TypeCategory(category)
        except ValueError:
            return False
        test = {TypeCategory.LIST: self.is_list_type, TypeCategory.STRUCT: self.is_struct_type,
                TypeCategory.MAP: self.is_map_type, TypeCategory.TENSOR: self.is_tensor_type,
                TypeCategory.TEMPORAL: self.is_temporal_type,
                TypeCategory.LARGE_LIST: lambda: self._arrow_is(pa.types.is_large_list)}[category]
        return test()

    def _arrow(self) -> pa.DataType | None:
        """The pyarrow type to classify (a dictionary's values), None when there is none."""
        physical = self._physical_dtype
        if isinstance(physical, np.dtype):
            try:
                physical = pa.from_numpy_dtype(physical)
            except (pa.ArrowNotImplementedError, NotImplementedError):
                return None
        elif isinstance(physical, type):
            return _PYTHON_ARROW.get(physical)
        if isinstance(physical, pa.DictionaryType):
            return physical.value_type
        return physical

    def _arrow_is(self, test: Callable[[pa.DataType], builtins.bool],
                  arrow_only: builtins.bool = False) -> builtins.bool:
        arrow = self._arrow()
        return arrow is not None and (self.is_arrow_type() or not arrow_only) and bool(test(arrow))

    def is_list_type(self) -> builtins.bool:
        return self._arrow_is(lambda t: pa.types.is_list(t) or pa.types.is_large_list(t)
                              or pa.types.is_fixed_size_list(t), arrow_only=True)

    def is_tensor_type(self) -> builtins.bool:
        from muster.data.block import VariableShapeTensorType

        return isinstance(self._physical_dtype, (pa.FixedShapeTensorType, VariableShapeTensorType))

    def is_struct_type(self) -> builtins.bool:
        return self._arrow_is(pa.types.is_struct, arrow_only=True)

    def is_map_type(self) -> builtins.bool:
        return self._arrow_is(pa.types.is_map, arrow_only=True)

    def is_nested_type(self) -> builtins.bool:
        return self._arrow_is(pa.types.is_nested, arrow_only=True)

    def is_null_type(self) -> builtins.bool:
        return self._arrow_is(pa.types.is_null, arrow_only=True)

    def is_boolean_type(self) -> builtins.bool:
        return self._arrow_is(pa.types.is_boolean)

    def is_integer_type(self) -> builtins.bool:
        return self._arrow_is(pa.types.is_integer)

    def is_floating_type(self) -> builtins.bool:
        return self._arrow_is(pa.types.is_floating)

    def is_uint64_type(self) -> builtins.bool:
        return self._arrow_is(lambda t: t == pa.uint64())

    def is_numerical_type(self) -> builtins.bool:
        if self.is_numpy_type() and np.issubdtype(self.to_numpy_dtype(), np.complexfloating):
            return True
        return self._arrow_is(lambda t: pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t))

    def is_string_type(self) -> builtins.bool:
        if self.is_numpy_type():
            return self.to_numpy_dtype().kind in ("U", "S")
        return self._arrow_is(lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)
                              or pa.types.is_string_view(t))

    def is_binary_type(self) -> builtins.bool:
        return self._arrow_is(lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t)
                              or pa.types.is_binary_view(t) or pa.types.is_fixed_size_binary(t))

    def is_temporal_type(self) -> builtins.bool:
        physical = self._physical_dtype
        if isinstance(physical, type):
            return issubclass(physical, (datetime.datetime, datetime.date, datetime.time, datetime.timedelta))
        if isinstance(physical, np.dtype):
            return physical.kind in ("M", "m")
        return self._arrow_is(pa.types.is_temporal)

    def __repr__(self) -> str:
        physical = self._physical_dtype
        if isinstance(physical, type):
            return f"DataType(python:{physical.__name__})"
        return f"DataType({'arrow' if isinstance(physical, pa.DataType) else 'numpy'}:{physical})"

    def __eq__(self, other: object) -> builtins.bool:
        return (isinstance(other, DataType) and type(self._physical_dtype) is type(other._physical_dtype)
                and self._physical_dtype == other._physical_dtype)

    def __hash__(self) -> int:
        return hash((type(self._physical_dtype), self._physical_dtype))

    def __reduce__(self) -> Any:
        return DataType, (self._physical_dtype,)


__all__ = ["DataType", "TypeCategory"]
