"""The expressions of ``ray.data.expressions`` that are no function of a column's values alone:
``star()`` (every input column), ``unnest(expr)`` (a struct's fields as columns, for ``with_columns``),
``download(uri_column)`` (each URI's bytes) and ``uuid()`` (a fresh UUID4 string per row)."""

from __future__ import annotations

import logging
import uuid as _uuid
from typing import Any

import pyarrow as pa

from muster.data.datatype import DataType
from muster.data.exceptions import DataTypeError
from muster.data.expr_tree import Expr
from muster.exceptions import InvalidArgumentError, InvalidTypeError

logger = logging.getLogger(__name__)


class StarExpr(Expr):
    """Every input column (``col(*)``): ``with_columns`` keeps them all, as Ray's projections do."""

    def _eval(self, block: pa.Table) -> Any:
        raise InvalidTypeError("star() stands for every column, not one: use it where a projection keeps the "
                               "input's columns, or name the columns with col(...).")

    def _text(self) -> str:
        return "col(*)"


class UnnestExpr(Expr):
    """The fields of the struct ``expr`` evaluates to, one column each (in the struct's order)."""

    def __init__(self, expr: Expr):
        self.expr = expr

    def _children(self) -> list[Expr]:
        return [self.expr]

    def _eval(self, block: pa.Table) -> Any:
        return self.expr._eval(block)

    def _text(self) -> str:
        return f"unnest({self.expr._text()})"

    def columns(self, block: pa.Table, where: str) -> dict[str, Any]:
        """Field name -> values over ``block``.

        Raises:
            DataTypeError: the expression's values are no struct.
        """
        values = self.expr._eval(block)
        values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
        if not isinstance(values, pa.StructArray):
            raise DataTypeError(f"{where}: unnest({self.expr._text()}) got {getattr(values, 'type', values)} "
                                   "values; unnest takes a struct-typed expression (a struct column, or a udf "
                                   "with return_dtype=DataType.struct([...]) returning a pyarrow StructArray).")
        return {values.type.field(i).name: values.field(i) for i in range(values.type.num_fields)}


class DownloadExpr(Expr):
    """The bytes at each URI of column ``uri_column_name`` (None where the URI is null or cannot be read)."""

    def __init__(self, uri_column_name: str, filesystem: Any = None):
        self.uri_column_name, self.filesystem = uri_column_name, filesystem
        self.data_type = DataType.binary()

    def _eval(self, block: pa.Table) -> Any:
        from muster.core.filesystem import as_fsspec, url_to_fs

        if self.uri_column_name not in block.column_names:
            raise KeyError(f"no column {self.uri_column_name!r}")
        fs = as_fsspec(self.filesystem, "download(filesystem=)")
        out: list[bytes | None] = []
        for uri in block.column(self.uri_column_name).to_pylist():
            if uri is None:
                out.append(None)
                continue
            try:
                this_fs, path = (fs, uri) if fs is not None else url_to_fs(uri)
                out.append(this_fs.cat_file(path))
            except OSError as exc:  # as Ray's: the row's bytes are None, the run goes on
                logger.warning("download(%r): could not read %r (%s); its value is None.",
                               self.uri_column_name, uri, exc)
                out.append(None)
        return pa.array(out, type=pa.binary())

    def _text(self) -> str:
        return f"download({self.uri_column_name!r})"


class UUIDExpr(Expr):
    """A new random UUID4 (as a 36-character string) for every row."""

    def __init__(self) -> None:
        self.data_type = DataType.string()

    def _eval(self, block: pa.Table) -> Any:
        return pa.array([str(_uuid.uuid4()) for _ in range(block.num_rows)], type=pa.string())

    def _text(self) -> str:
        return "uuid()"


def star() -> StarExpr:
    """Every input column."""
    return StarExpr()


def unnest(expr: Expr) -> UnnestExpr:
    """Expand a struct-typed expression into one column per field, for ``Dataset.with_columns``
    (``ds.with_columns(unnest(make_features(col("a"), col("b"))))``). One level deep: a field that is
    itself a struct stays one struct column.

    Raises:
        InvalidTypeError: ``expr`` is no expression, or is already an ``unnest``.
    """
    if isinstance(expr, UnnestExpr):
        raise InvalidTypeError(f"unnest({expr._text()}): unnest() cannot wrap another unnest(); unnest the inner "
                               "expression once, and chain a second with_columns to flatten further.")
    if not isinstance(expr, Expr):
        raise InvalidTypeError(f"unnest({expr!r}): pass an expression, e.g. unnest(col('s')) or a struct udf.")
    return UnnestExpr(expr)


def download(uri_column_name: str, *, filesystem: Any = None) -> DownloadExpr:
    """Each row's bytes at the URI in column ``uri_column_name`` (local paths, ``s3://``, ``gs://``, ``http(s)://``
    ...: fsspec's schemes), for ``with_column``; ``filesystem`` (pyarrow's or fsspec's) reads them instead.
    A URI that cannot be read gives None, with a warning, as Ray's.

    Raises:
        InvalidArgumentError: ``uri_column_name`` is no column name.
    """
    if not isinstance(uri_column_name, str) or not uri_column_name:
        raise InvalidArgumentError(f"download({uri_column_name!r}): pass the name of the column holding the URIs.")
    return DownloadExpr(uri_column_name, filesystem)


def uuid() -> UUIDExpr:
    """A UUID4 string for every row (``uuid().str.replace("-", "")`` for 32 hex digits)."""
    return UUIDExpr()
