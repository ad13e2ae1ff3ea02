"""``ray.data.expressions``: Ray Data's column expressions, for ``Dataset.with_column``/``with_columns`` and
``filter(expr=...)``.

``col("a") + col("b") * lit(2)``, comparisons, ``& | ~``, ``is_null``/``is_in``, ``alias``, the math helpers
(``ceil``, ``log2``, ``power``, ``cast(DataType...)``, ...), the ``.str``/``.list``/``.struct``/``.map``/``.dt``/
``.arr`` namespaces, ``@udf(return_dtype=...)`` functions and callable classes over whole columns, ``unnest`` (a
struct's fields as columns), ``download`` (each URI's bytes), ``uuid()``, ``random()`` and
``monotonically_increasing_id()``: Ray's, with Ray's results.
The tree is ``muster.data.expr_tree``'s (evaluated one pyarrow block at a time with ``pyarrow.compute``);
``to_pyarrow()`` gives the ``pyarrow.compute.Expression`` where one exists; ``repr`` draws the tree as Ray's.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from muster.data.datatype import DataType
from muster.data.expr_special import (DownloadExpr, MonotonicallyIncreasingIdExpr, RandomExpr, StarExpr,
                                      UnnestExpr, UUIDExpr, download, monotonically_increasing_id, random, star,
                                      unnest, uuid)
from muster.data.expr_tree import (AliasExpr, BinaryExpr, ColumnExpr, ComputeExpr, Expr, LiteralExpr, Operation,
                                   UDFExpr, UnaryExpr, _fn_name)
from muster.exceptions import InvalidTypeError


class _LazyInstance:
    """A ``@udf`` class's instance, made on first call in the process that evaluates it (so it travels
    as its class and arguments, as Ray starts it on an actor); the process's threads share it."""

    def __init__(self, cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]):
        self.cls, self.ctor_args, self.ctor_kwargs = cls, args, kwargs
        self.__name__ = cls.__name__
        self._instance: Any = None
        self._lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            if self._instance is None:
                self._instance = self.cls(*self.ctor_args, **self.ctor_kwargs)
        return self._instance(*args, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_instance", "_lock")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _instance=None, _lock=threading.Lock())


def udf(return_dtype: DataType) -> Callable[[Any], Any]:
    """Make a function (or a callable class) of whole columns into an expression.

    The function gets each argument's values as a pyarrow array (a block's worth at a time) and returns the
    column's values (a pyarrow array, a numpy array or a pandas Series). A class is instantiated with its
    constructor's arguments where the expression is evaluated, once per process, and then called.

    Args:
        return_dtype: the values' ``DataType`` (``unnest`` reads a struct's fields from it).

    Returns:
        A decorator: the decorated function, called with expressions (or values), returns a ``UDFExpr``.

    Raises:
        InvalidTypeError: ``return_dtype`` is no ``DataType``.
    """
    if not isinstance(return_dtype, DataType):
        raise InvalidTypeError(f"udf(return_dtype={return_dtype!r}): pass a muster.data.datatype.DataType, "
                               "e.g. DataType.int64().")

    def decorate(fn: Any) -> Any:
        if isinstance(fn, type):
            return _udf_class(fn, return_dtype)

        def build(*args: Any, **kwargs: Any) -> UDFExpr:
            return UDFExpr(fn, args, kwargs, return_dtype, user=True)

        build.__name__ = _fn_name(fn)
        build.__doc__ = fn.__doc__
        return build

    return decorate


def _udf_class(cls: type, return_dtype: DataType) -> type:
    class ExpressionClass:
        """``cls(...)`` records its arguments; calling it with expressions builds the expression."""

        def __init__(self, *args: Any, **kwargs: Any):
            self._fn = _LazyInstance(cls, args, kwargs)

        def __call__(self, *args: Any, **kwargs: Any) -> UDFExpr:
            return UDFExpr(self._fn, args, kwargs, return_dtype, user=True)

    ExpressionClass.__name__, ExpressionClass.__qualname__ = cls.__name__, cls.__qualname__
    ExpressionClass.__module__ = cls.__module__
    return ExpressionClass


def pyarrow_udf(return_dtype: DataType) -> Callable[[Any], Any]:
    """``udf`` for functions of pyarrow arrays; muster's blocks are pyarrow tables, so the same as ``udf``."""
    return udf(return_dtype)


def col(name: str) -> ColumnExpr:
    """The column ``name``."""
    if not isinstance(name, str) or not name:
        raise InvalidTypeError(f"col({name!r}): pass a column name.")
    return ColumnExpr(name)


def lit(value: Any) -> LiteralExpr:
    """A constant (the same value in every row)."""
    return LiteralExpr(value)


def __getattr__(name: str) -> Any:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.data.expressions", name)


__all__ = ["Operation", "Expr", "ColumnExpr", "LiteralExpr", "BinaryExpr", "UnaryExpr", "UDFExpr", "AliasExpr",
           "ComputeExpr", "DownloadExpr", "StarExpr", "UnnestExpr", "UUIDExpr", "RandomExpr",
           "MonotonicallyIncreasingIdExpr", "pyarrow_udf", "udf", "col", "lit", "download", "star", "unnest", "uuid",
           "random", "monotonically_increasing_id"]
