"""Ray's string filter expressions (``filter(expr="sepal.length > 5.0 and label == 'a'")``) as
pyarrow compute expressions, parsed with Python's own grammar: names (dotted ones too) are
columns; numbers, strings, booleans and None are values; comparisons, ``in`` / ``not in`` a
list, ``and`` / ``or`` / ``not``, ``+ - * /`` and ``is None`` / ``is not None`` combine them.
Nothing is evaluated as Python.

The same text also parses to an expression of ``muster.data.expressions`` (:func:`parse_expr`):
that form goes to Ray, which takes its own predicate expressions where strings are deprecated.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass
from typing import Any, Callable

import pyarrow.compute as pc

from muster.data.expr_tree import ColumnExpr, Expr
from muster.exceptions import InvalidArgumentError

_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge}
_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


@dataclass(frozen=True)
class _Build:
    """What a parsed filter is built as: its expression type and the calls that differ between the two."""

    kind: type
    column: Callable[[str], Any]
    isin: Callable[[Any, list], Any]
    null: Callable[[Any], Any]
    not_null: Callable[[Any], Any]
    negate: Callable[[Any], Any]  # of an expression (a number is negated as it is)


#: a ``pyarrow.compute`` expression (the embedded engine's, pushed into a Parquet scan)
_ARROW = _Build(pc.Expression, pc.field, lambda e, values: e.isin(values), lambda e: e.is_null(),
                lambda e: e.is_valid(), pc.negate)
#: an expression of ``muster.data.expressions``, which becomes Ray's own on the Ray engine (no unary minus there)
_MUSTER = _Build(Expr, ColumnExpr, lambda e, values: e.is_in(values), lambda e: e.is_null(),
                 lambda e: e.is_not_null(), lambda e: 0 - e)


def parse(text: str) -> pc.Expression:
    """The pyarrow expression ``text`` means.

    Raises:
        InvalidArgumentError: ``text`` is not an expression of the kinds above.
    """
    return _parse(text, _ARROW)


def parse_expr(text: str) -> Any:
    """The ``muster.data.expressions`` expression ``text`` means (the same rows as :func:`parse`'s).

    Raises:
        InvalidArgumentError: ``text`` is not an expression of the kinds above.
    """
    return _parse(text, _MUSTER)


def _parse(text: str, to: _Build) -> Any:
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise InvalidArgumentError(f"filter(expr={text!r}): not an expression ({exc.msg}); write e.g. "
                                   "\"x > 5 and label == 'a'\".") from None
    out = _convert(tree, text, to)
    if not isinstance(out, to.kind):
        raise InvalidArgumentError(f"filter(expr={text!r}) names no column; compare a column with a value.")
    return out


def _convert(node: ast.AST, text: str, to: _Build) -> Any:
    if isinstance(node, ast.BoolOp):
        parts = [_convert(v, text, to) for v in node.values]
        combined = parts[0]
        for part in parts[1:]:
            combined = (combined & part) if isinstance(node.op, ast.And) else (combined | part)
        return combined
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        operand = _convert(node.operand, text, to)
        is_expr = isinstance(operand, to.kind)  # apart: inline, mypy would narrow operand to object
        return ~operand if is_expr else not operand  # of a value: ~True is -2, not False
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _convert(node.operand, text, to)
        if isinstance(value, to.kind):
            return to.negate(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value
        raise InvalidArgumentError(f"filter(expr={text!r}): {ast.unparse(node)!r}: '-' takes a number or a column.")
    if isinstance(node, ast.Compare):
        left, result = _convert(node.left, text, to), None
        for op, right_node in zip(node.ops, node.comparators):
            right = _convert(right_node, text, to)
            term = _compare(op, left, right, text, to)
            result = term if result is None else result & term
            left = right
        return result
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        return _ARITHMETIC[type(node.op)](_convert(node.left, text, to), _convert(node.right, text, to))
    if isinstance(node, (ast.Name, ast.Attribute)):
        return to.column(_dotted(node, text))
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_convert(e, text, to) for e in node.elts]
    raise InvalidArgumentError(f"filter(expr={text!r}): {ast.unparse(node)!r} is not supported here; use "
                               "comparisons, in [...], and/or/not, + - * /, or pass a function instead.")


def _compare(op: ast.cmpop, left: Any, right: Any, text: str, to: _Build) -> Any:
    if isinstance(op, (ast.In, ast.NotIn)):
        if not isinstance(right, list):
            raise InvalidArgumentError(f"filter(expr={text!r}): 'in' takes a list of values, e.g. x in [1, 2].")
        member = to.isin(left, right)
        return ~member if isinstance(op, ast.NotIn) else member
    if isinstance(op, (ast.Is, ast.IsNot)) and right is None:
        return to.null(left) if isinstance(op, ast.Is) else to.not_null(left)
    if type(op) not in _COMPARE:
        raise InvalidArgumentError(f"filter(expr={text!r}): this comparison is not supported; use == != < <= > >=.")
    return _COMPARE[type(op)](left, right)


def _dotted(node: ast.AST, text: str) -> str:
    """``sepal.length`` -> the column "sepal.length" (Ray's examples name such columns)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value, text)}.{node.attr}"
    raise InvalidArgumentError(f"filter(expr={text!r}): {ast.unparse(node)!r} is not a column name.")
