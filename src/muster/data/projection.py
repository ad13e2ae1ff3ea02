"""``with_column``/``with_columns`` and ``filter(expr=...)`` over expressions: Ray's (``muster.data.expressions``)
or raw ``pyarrow.compute`` ones.

Every expression of one call is evaluated over the block's own columns (one projection, as Ray's), then the
block gets each output: an existing column replaced in place, a new one appended in the call's order; an
``unnest(...)`` adds one column per struct field.
"""

from __future__ import annotations

from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from muster.data import block as blk
from muster.data.exceptions import DataTypeError
from muster.data.expr_repr import ray_text
from muster.data.expressions import Expr, StarExpr, UnnestExpr
from muster.data.plan import BlockFn, RayCall, Transform
from muster.exceptions import InvalidArgumentError, InvalidTypeError, MusterError

_MAX_TEXT = 60  # Ray cuts the expression in an operator's name at 60 characters
_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, KeyError)


def text(expr: Any) -> str:
    """``expr`` as Ray prints it in an operator's name."""
    if isinstance(expr, pc.Expression):
        return ray_text(expr)
    if not isinstance(expr, Expr):
        return repr(expr)
    out = expr._text()
    return out if len(out) <= _MAX_TEXT else out[:_MAX_TEXT - 3] + "..."


def values(expr: Any, block: pa.Table) -> pa.Array | pa.ChunkedArray:
    """``expr``'s column over ``block`` (a constant repeated for every row); a udf's values cast to its
    ``return_dtype`` where that is a pyarrow type, as Ray's."""
    if isinstance(expr, pc.Expression):
        import pyarrow.dataset as pads

        return pads.dataset(block).to_table(columns={"_": expr}).column("_")
    out = expr._eval(block)
    if not isinstance(out, (pa.Array, pa.ChunkedArray)):
        if isinstance(out, pa.Scalar) or not hasattr(out, "__len__") or isinstance(out, (str, bytes, dict)):
            scalar = out if isinstance(out, pa.Scalar) else pa.scalar(out)
            return pa.repeat(scalar, block.num_rows)
        out = blk.array_from_values(out.to_numpy() if hasattr(out, "to_numpy") else out)
    dtype = expr.data_type
    if dtype.is_arrow_type() and out.type != dtype.to_arrow_dtype():
        out = out.cast(dtype.to_arrow_dtype())
    return out


def with_columns_op(args: list[Any], where: str) -> Transform:
    """The ``with_column(s)`` operator: each argument ``{name: expression}`` or ``unnest(expression)``."""
    exprs: dict[str, Any] = {}
    for i, arg in enumerate(args):
        if isinstance(arg, UnnestExpr):
            exprs[f"\0unnest{i}"] = arg  # its columns are named after the struct's fields
            continue
        if not isinstance(arg, dict) or not all(isinstance(e, (Expr, pc.Expression)) for e in arg.values()):
            raise InvalidTypeError(f"{where}: {arg!r} is not column name -> expression; pass an expression such "
                                   "as col('a') * 2 (from muster.data.expressions import col, lit), or unnest(...); "
                                   "for a function of a batch, use add_column.")
        if any(isinstance(e, StarExpr) for e in arg.values()):
            raise InvalidTypeError(f"{where}: star() is every column, not one; name a column with col(...).")
        exprs.update(arg)
    if not exprs:
        raise InvalidArgumentError(f"{where}(): pass at least one column name -> expression.")
    why = ("with_column(s) with pyarrow.compute expressions has no ray.data equivalent: use Ray's expressions "
           "(muster.data.expressions) or add_column(name, fn)")
    ray = why if any(isinstance(e, pc.Expression) for e in exprs.values()) else RayCall.of("with_columns", *args)
    plain = all(isinstance(e, Expr) and not isinstance(e, UnnestExpr) and _arrow_form(e) for e in exprs.values())
    fn = with_columns(exprs, where)
    return Transform("Project", fn, ray, schema_of=schema_of(fn) if plain else None)  # Ray's name for it


def _arrow_form(expr: Expr) -> bool:
    """Whether ``expr`` is columns, literals and pyarrow's operators only (no Python function to call)."""
    try:
        expr.to_pyarrow()
    except InvalidTypeError:
        return False
    return True


def schema_of(fn: BlockFn) -> Callable[[pa.Schema], pa.Schema | None]:
    """A projection's output schema from its input's: ``fn`` applied to no rows of it (None where ``fn`` refuses
    it, a column it names missing: the error comes when the dataset runs, as in Ray)."""
    def output(schema: pa.Schema) -> pa.Schema | None:
        try:
            return fn(schema.empty_table())[0].schema
        except (MusterError, pa.ArrowException):
            return None

    return output


def with_columns(exprs: dict[str, Any], where: str) -> BlockFn:
    def apply(block: pa.Table) -> list[pa.Table]:
        for name, arr in _columns(exprs, block, where).items():
            if name in block.column_names:
                block = block.set_column(block.column_names.index(name), name, arr)
            else:
                block = block.append_column(name, arr)
        return [block]

    return apply


def _columns(exprs: dict[str, Any], block: pa.Table, where: str) -> dict[str, Any]:
    """Each expression's column over ``block`` (an ``unnest``'s: one per field).

    Raises:
        DataTypeError: a column is missing, or pyarrow cannot compute an expression on these types.
    """
    made: dict[str, Any] = {}
    try:
        for name, expr in exprs.items():
            if isinstance(expr, UnnestExpr):
                made.update(expr.columns(block, where))
            else:
                made[name] = values(expr, block)
    except _ARROW_ERRORS as exc:
        detail = exc.args[0] if isinstance(exc, KeyError) else exc
        raise DataTypeError(f"{where}: {detail}. The block's columns are {block.column_names}.") from exc
    return made


def filter_op(expr: Any) -> Transform:
    """``filter(expr=...)`` with an expression: the rows where it is true (null counts as false)."""
    if not isinstance(expr, (Expr, pc.Expression)):
        raise InvalidTypeError(f"filter(expr={expr!r}): pass an expression (col('x') > 5), Ray's string form "
                               "(\"x > 5\"), or a function fn=.")
    where = f"filter(expr={text(expr)})"
    if isinstance(expr, pc.Expression):
        why = ("filter(expr=<pyarrow expression>) has no ray.data equivalent (Ray takes its own expressions): "
               "pass a function, filter(lambda row: ...), or muster.data.expressions' col(...) > ...")
        return Transform(f"Filter({text(expr)})", lambda b: [b.filter(expr)], why, keeps_columns=True)

    def keep(block: pa.Table) -> list[pa.Table]:
        mask = _columns({"mask": expr}, block, where)["mask"]
        if not pa.types.is_boolean(mask.type):
            raise DataTypeError(f"{where}: the expression gives {mask.type} values, not true/false; compare it, "
                                "e.g. col('x') > 0.")
        return [block.filter(mask, null_selection_behavior="drop")]

    return Transform(f"Filter({text(expr)})", keep, RayCall.of("filter", expr=expr), keeps_columns=True)


def renamed_back(mapping: dict[str, str]) -> Callable[[frozenset[str]], dict[str, str] | None]:
    """For ``rename_columns(mapping)``: the columns a filter above it reads, by their names below it (None
    when it reads an old name renamed away: it fails there, and must not find the column below)."""
    old_of = {new: old for old, new in mapping.items()}

    def names(read: frozenset[str]) -> dict[str, str] | None:
        if any(c in mapping and c not in old_of for c in read):
            return None
        return {c: old_of.get(c, c) for c in read}

    return names
