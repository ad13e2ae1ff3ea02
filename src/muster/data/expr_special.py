"""The expressions of ``ray.data.expressions`` that are no function of a column's values alone:
``star()`` (every input column), ``unnest(expr)`` (a struct's fields as columns, for ``with_columns``),
``download(uri_column)`` (each URI's bytes), ``uuid()`` (a fresh UUID4 string per row), ``random()`` (a float in
[0, 1) per row) and ``monotonically_increasing_id()`` (a unique, per-task increasing int64 per row).

The last two depend on which task of its operator evaluates them (``muster.data.task_context``), as Ray's:
a seeded ``random`` draws from numpy's generator seeded with (block of the task, task, pass, seed); an id is
the task's index in its upper 31 bits and the row's number within the task in its lower 33."""

from __future__ import annotations

import logging
import uuid as _uuid
from typing import Any

import numpy as np
import pyarrow as pa

from muster.data import task_context
from muster.data.datatype import DataType
from muster.data.exceptions import DataError, DataTypeError
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


class RandomExpr(Expr):
    """A float drawn uniformly from [0, 1) for every row; with ``seed``, reproducible (see :func:`random`)."""

    def __init__(self, seed: int | None = None, reseed_after_execution: bool = True):
        self.seed, self.reseed_after_execution = seed, reseed_after_execution
        self.data_type = DataType.float64()
        self._counter = f"random-{_uuid.uuid4().hex}"  # its blocks within a task, apart from other randoms'

    def _eval(self, block: pa.Table) -> Any:
        seed: list[int] | None = None
        if self.seed is not None:
            task = task_context.current()
            execution = task.epoch if self.reseed_after_execution else 0
            seed = [task.advance(self._counter, 1), task.task_idx, execution, self.seed]  # fastest-changing first
        return pa.array(np.random.default_rng(seed).random(block.num_rows), type=pa.float64())

    def _key(self) -> Any:
        return ("random", self.seed, self.reseed_after_execution)

    def _text(self) -> str:
        return "random()"


_ROW_BITS, _TASK_BITS = 33, 31


class MonotonicallyIncreasingIdExpr(Expr):
    """A unique int64 per row: the task's index in the upper 31 bits, the row's number within the task in the
    lower 33 (so consecutive within a task, increasing across tasks in order)."""

    def __init__(self) -> None:
        self.data_type = DataType.int64()
        self._counter = f"monotonic-id-{_uuid.uuid4().hex}"  # its rows within a task, apart from other ids'

    def _eval(self, block: pa.Table) -> Any:
        task = task_context.current()
        start = task.advance(self._counter, block.num_rows)
        if start + block.num_rows > 1 << _ROW_BITS or task.task_idx >= 1 << _TASK_BITS:
            raise DataError(f"monotonically_increasing_id(): task {task.task_idx} reached row "
                            f"{start + block.num_rows}; ids hold at most {(1 << _TASK_BITS) - 1} tasks of "
                            f"{(1 << _ROW_BITS) - 1} rows each. Use more, smaller read tasks "
                            "(override_num_blocks=), or uuid() for ids without that limit.")
        base = (task.task_idx << _ROW_BITS) + start
        return pa.array(np.arange(base, base + block.num_rows, dtype=np.int64), type=pa.int64())

    def structurally_equals(self, other: Any) -> bool:
        """Never: each call gives its own ids (as Ray's)."""
        return False

    def _text(self) -> str:
        return "monotonically_increasing_id()"


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


def random(*, seed: int | None = None, reseed_after_execution: bool = True) -> RandomExpr:
    """A random float in [0, 1) for every row, for ``with_column``.

    Args:
        seed: None draws from the system's entropy (new values every time). An integer seeds numpy's generator
            for each block with (the block's number within its task, the task's index, the pass, ``seed``), so
            the same plan gives the same values.
        reseed_after_execution: with ``seed``, True (Ray's default) gives each execution of the dataset its own
            values (each ``take_all``, each epoch of ``iter_batches``, of it or of a dataset derived from it, as
            Ray numbers executions), the first's the same every run; False gives every execution the same values.

    Raises:
        InvalidTypeError: ``seed`` is no integer.
    """
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise InvalidTypeError(f"random(seed={seed!r}): pass an integer seed, or None for fresh values every time.")
    return RandomExpr(None if seed is None else int(seed), bool(reseed_after_execution))


def monotonically_increasing_id() -> MonotonicallyIncreasingIdExpr:
    """A unique, increasing int64 id for every row, for ``with_column``: not consecutive, but consecutive within
    the blocks of one task (a read task, or one upstream block), each task's ids above the previous task's
    (task index << 33 plus the row's number in the task). Ids depend on how the dataset is split into tasks.
    """
    return MonotonicallyIncreasingIdExpr()
