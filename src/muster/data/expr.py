"""Ray's string filter expressions (``filter(expr="sepal.length > 5.0 and label == 'a'")``) as
pyarrow compute expressions, parsed with Python's own grammar: names (dotted ones too) are
columns; numbers, strings, booleans and None are values; comparisons, ``in`` / ``not in`` a
list, ``and`` / ``or`` / ``not``, ``+ - * /`` and ``is None`` / ``is not None`` combine them.
Nothing is evaluated as Python.
"""

from __future__ import annotations

import ast
import operator
from typing import Any

import pyarrow.compute as pc

from muster.exceptions import InvalidArgumentError

_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge}
_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def parse(text: str) -> pc.Expression:
    """The pyarrow expression ``text`` means.

    Raises:
        InvalidArgumentError: ``text`` is not an expression of the kinds above.
    """
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise InvalidArgumentError(f"filter(expr={text!r}): not an expression ({exc.msg}); write e.g. "
                                   "\"x > 5 and label == 'a'\".") from None
    out = _convert(tree, text)
    if not isinstance(out, pc.Expression):
        raise InvalidArgumentError(f"filter(expr={text!r}) names no column; compare a column with a value.")
    return out


def _convert(node: ast.AST, text: str) -> Any:
    if isinstance(node, ast.BoolOp):
        parts = [_convert(v, text) for v in node.values]
        combined = parts[0]
        for part in parts[1:]:
            combined = (combined & part) if isinstance(node.op, ast.And) else (combined | part)
        return combined
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return ~_convert(node.operand, text)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_convert(node.operand, text)
    if isinstance(node, ast.Compare):
        left, result = _convert(node.left, text), None
        for op, right_node in zip(node.ops, node.comparators):
            right = _convert(right_node, text)
            term = _compare(op, left, right, text)
            result = term if result is None else result & term
            left = right
        return result
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        return _ARITHMETIC[type(node.op)](_convert(node.left, text), _convert(node.right, text))
    if isinstance(node, (ast.Name, ast.Attribute)):
        return pc.field(_dotted(node, text))
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_convert(e, text) for e in node.elts]
    raise InvalidArgumentError(f"filter(expr={text!r}): {ast.unparse(node)!r} is not supported here; use "
                               "comparisons, in [...], and/or/not, + - * /, or pass a function instead.")


def _compare(op: ast.cmpop, left: Any, right: Any, text: str) -> Any:
    if isinstance(op, (ast.In, ast.NotIn)):
        if not isinstance(right, list):
            raise InvalidArgumentError(f"filter(expr={text!r}): 'in' takes a list of values, e.g. x in [1, 2].")
        member = left.isin(right)
        return ~member if isinstance(op, ast.NotIn) else member
    if isinstance(op, (ast.Is, ast.IsNot)) and right is None:
        return left.is_valid() if isinstance(op, ast.IsNot) else left.is_null()
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
