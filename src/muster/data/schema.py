"""``ray.data.Schema``: what ``Dataset.schema()`` returns, printed as Ray prints it.

It wraps the blocks' ``pyarrow.Schema`` (``base_schema``); anything else asked of it
(``field``, ``metadata``, ``get_field_index``, ...) is the pyarrow schema's.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from muster.data import block as blk


class Schema:
    """A dataset's columns: ``names``, ``types`` and the pyarrow ``base_schema``."""

    def __init__(self, base_schema: pa.Schema):
        self.base_schema = base_schema

    @property
    def names(self) -> list[str]:
        return list(self.base_schema.names)

    @property
    def types(self) -> list[Any]:
        """Each column's type: pyarrow's, or for a tensor column one that prints as Ray's tensor type."""
        return [_TensorColumn(f.type) if isinstance(f.type, blk._TENSOR_TYPES) else f.type for f in self.base_schema]

    def __getattr__(self, name: str) -> Any:
        if name == "base_schema":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.base_schema, name)

    def __eq__(self, other: object) -> bool:
        other_schema = other.base_schema if isinstance(other, Schema) else other
        return isinstance(other_schema, pa.Schema) and self.base_schema.equals(other_schema)

    def __hash__(self) -> int:
        return hash(str(self.base_schema))

    def __len__(self) -> int:
        return len(self.base_schema)

    def __iter__(self) -> Any:
        return iter(self.base_schema)

    def __repr__(self) -> str:
        rows = [("Column", "Type"), ("------", "----")] + [(n, str(t)) for n, t in zip(self.names, self.types)]
        width = max(len(name) for name, _ in rows)
        return "\n".join(f"{name.ljust(width)}  {kind}".rstrip() for name, kind in rows)


class _TensorColumn:
    """How a tensor column's type prints, as Ray 2.60 names its Arrow tensor types:
    ``ArrowTensorTypeV2(shape=(32, 32, 3), dtype=uint8)``, ``ArrowVariableShapedTensorType(ndim=3, dtype=float)``."""

    def __init__(self, arrow_type: Any):
        self.arrow_type = arrow_type

    def __repr__(self) -> str:
        dtype = self.arrow_type.value_type  # Arrow's name (double, float, uint8), as Ray prints it
        if isinstance(self.arrow_type, blk.VariableShapeTensorType):
            return f"ArrowVariableShapedTensorType(ndim={self.arrow_type.ndim}, dtype={dtype})"
        return f"ArrowTensorTypeV2(shape={tuple(self.arrow_type.shape)}, dtype={dtype})"

    __str__ = __repr__

    @property
    def shape(self) -> tuple[int, ...]:
        """Each row's shape, as Ray's ``ArrowTensorTypeV2.shape`` (a fixed-shape column's only)."""
        if isinstance(self.arrow_type, blk.VariableShapeTensorType):
            raise AttributeError(f"{self!r} has no one shape: its rows' shapes differ (its ndim is {self.ndim}).")
        return tuple(self.arrow_type.shape)

    @property
    def ndim(self) -> int:
        return int(self.arrow_type.ndim) if isinstance(self.arrow_type, blk.VariableShapeTensorType) else len(
            self.arrow_type.shape)

    @property
    def scalar_type(self) -> Any:
        """The Arrow type of the values, as Ray's ``scalar_type``."""
        return self.arrow_type.value_type

    def __eq__(self, other: object) -> bool:
        return other == self.arrow_type or (isinstance(other, _TensorColumn) and other.arrow_type == self.arrow_type)

    def __hash__(self) -> int:
        return hash(str(self.arrow_type))
