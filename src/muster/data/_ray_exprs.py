"""muster's expressions rebuilt as ``ray.data.expressions``' (for the Ray engine: ``with_column(s)`` and
``filter(expr=...)`` replay there with Ray's own). Imports Ray; only ``_ray_plan`` calls it, when it runs a plan."""

from __future__ import annotations

from typing import Any

from muster.data import expressions as mx
from muster.data.datatype import DataType
from muster.data.expressions import (DownloadExpr, MonotonicallyIncreasingIdExpr, RandomExpr, StarExpr, UnnestExpr,
                                     UUIDExpr)


def ray_dtype(dtype: DataType) -> Any:
    from ray.data.datatype import DataType as RayDataType

    return RayDataType(dtype._physical_dtype)


def to_ray(expr: Any) -> Any:
    """``expr`` (an expression, a ``{name: expression}`` mapping, or anything else, returned as it is) as Ray's."""
    import ray.data.expressions as rx

    if isinstance(expr, dict):
        return {k: to_ray(v) for k, v in expr.items()}
    if not isinstance(expr, mx.Expr):
        return expr
    if isinstance(expr, mx.ColumnExpr):
        return rx.col(expr.name)
    if isinstance(expr, mx.LiteralExpr):
        return rx.lit(expr.value)
    if isinstance(expr, mx.BinaryExpr):
        return rx.BinaryExpr(rx.Operation(expr.op.value), to_ray(expr.left), to_ray(expr.right))
    if isinstance(expr, mx.UnaryExpr):
        return rx.UnaryExpr(rx.Operation(expr.op.value), to_ray(expr.operand))
    if isinstance(expr, mx.AliasExpr):
        return to_ray(expr.expr).alias(expr.name)
    if isinstance(expr, mx.UDFExpr):  # the same function (a @udf class's lazy instance too)
        build: Any = rx.udf(ray_dtype(expr.data_type))(expr.fn)
        return build(*(to_ray(a) for a in expr.args), **{k: to_ray(v) for k, v in expr.kwargs.items()})
    if isinstance(expr, UnnestExpr):
        return rx.unnest(to_ray(expr.expr))
    if isinstance(expr, DownloadExpr):
        return rx.download(expr.uri_column_name, filesystem=expr.filesystem)
    if isinstance(expr, UUIDExpr):
        return rx.uuid()
    if isinstance(expr, StarExpr):
        return rx.star()
    if isinstance(expr, RandomExpr):
        return rx.random(seed=expr.seed, reseed_after_execution=expr.reseed_after_execution)
    if isinstance(expr, MonotonicallyIncreasingIdExpr):
        return rx.monotonically_increasing_id()
    raise NotImplementedError(type(expr).__name__)
