"""Expressions printed as Ray 2.60 prints them: ``tree_text`` draws one of ``muster.data.expressions`` as Ray's
``repr`` does (``MUL`` over ``├── left: ...``); ``ray_text`` prints a raw pyarrow expression as Ray prints its own
in an operator's name.

A filter's pyarrow expression as Ray 2.60 prints an expression in an operator's name:
``Filter(col('id') > 1)``, ``Filter((col('a') + (col('b') * 2)) > 3)``, ``Filter(col('x').is_null())``.

pyarrow offers no walk over an expression's tree, so this reads the text pyarrow prints for it
(``(id > 1)``, ``add_checked(a, 2)``, ``is_null(x, {nan_is_null=false})``) back into a small tree and
prints that in Ray's style: columns as ``col('name')``, values as Python writes them (cut at 20
characters), an operand that is itself a binary operation in parentheses, the whole cut at 60
characters. Text it cannot read comes out as pyarrow prints it.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow.compute as pc

_MAX_TEXT, _MAX_VALUE = 60, 20  # Ray's cuts: the whole name's expression, one literal
_BINARY = {">": ">", "<": "<", ">=": ">=", "<=": "<=", "==": "==", "!=": "!=", "and": "&", "or": "|",
           "and_kleene": "&", "or_kleene": "|"}
_ARITHMETIC = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/"}
_METHODS = {"is_null": "is_null", "is_valid": "is_not_null"}  # pyarrow's call -> Ray's method
_TOKEN = re.compile(r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<op>>=|<=|==|!=|[<>(),{}\[\]=:])'
                    r'|(?P<word>[^\s<>=!(),{}\[\]:"]+))')
_NUMBER = re.compile(r"-?\d+(\.\d*)?([eE][-+]?\d+)?")
_VALUES = {"true": True, "false": False, "null": None}


class _Unreadable(Exception):
    """pyarrow's text is not one this module reads."""


class _Binary(tuple):
    """``(op, left, right)``: printed in parentheses where it is an operand."""


def ray_text(expression: pc.Expression) -> str:
    """``expression`` as Ray prints the same expression in an operator's name (see the module's docstring)."""
    raw = str(expression)
    try:
        tokens = [m.group(m.lastgroup or "word") for m in _TOKEN.finditer(raw) if m.group(0).strip()]
        tree, end = _read(tokens, 0)
        text = raw if end != len(tokens) else _print(tree)
    except (IndexError, ValueError, _Unreadable):
        text = raw
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT - 3] + "..."


def _read(tokens: list[str], at: int) -> tuple[Any, int]:
    """The tree of the expression starting at ``tokens[at]``, and where it ends."""
    token = tokens[at]
    if token == "(":  # (left op right)
        left, at = _read(tokens, at + 1)
        op = tokens[at]
        right, at = _read(tokens, at + 1)
        if op not in _BINARY or tokens[at] != ")":
            raise _Unreadable(op)
        return _Binary((_BINARY[op], left, right)), at + 1
    if token.startswith('"'):
        return ("value", token[1:-1].replace('\\"', '"').replace("\\\\", "\\")), at + 1
    if at + 1 < len(tokens) and tokens[at + 1] == "(":  # a call: name(args[, {options}])
        args: list[Any] = []
        options: list[str] = []
        at += 2
        while tokens[at] != ")":
            if tokens[at] == "{":
                options, at = _options(tokens, at)
            else:
                arg, at = _read(tokens, at)
                args.append(arg)
            at += 1 if tokens[at] == "," else 0
        return _call(token, args, options), at + 1
    if token in _VALUES:
        return ("value", _VALUES[token]), at + 1
    if _NUMBER.fullmatch(token):
        return ("value", int(token) if re.fullmatch(r"-?\d+", token) else float(token)), at + 1
    return ("col", token), at + 1


def _options(tokens: list[str], at: int) -> tuple[list[str], int]:
    """The tokens of a call's ``{...}`` options (nested brackets included), and the index after them."""
    depth, start = 0, at
    while True:
        depth += {"{": 1, "[": 1, "}": -1, "]": -1}.get(tokens[at], 0)
        at += 1
        if depth == 0:
            return tokens[start + 1:at - 1], at


def _call(name: str, args: list[Any], options: list[str]) -> Any:
    """A pyarrow call as Ray's operation: arithmetic as a binary operation, ``invert`` as ``~``, the null
    checks as methods, ``is_in`` as ``in`` its value set; any other as ``name(args)``."""
    base = name.removesuffix("_checked")
    if base in _ARITHMETIC and len(args) == 2:
        return _Binary((_ARITHMETIC[base], *args))
    if name == "invert" and len(args) == 1:
        return ("not", args[0])
    if name in _METHODS and len(args) == 1:
        return ("method", _METHODS[name], args[0])
    if name == "is_in" and len(args) == 1 and "value_set" in options:
        listed = options[options.index("[") + 1:options.index("]")]
        values = [_read([t], 0)[0][1] for t in listed if t != ","]
        return _Binary(("in", args[0], ("value", values)))
    return ("call", name, args)


def _print(node: Any) -> str:
    if isinstance(node, _Binary):
        op, left, right = node
        sides = [f"({_print(s)})" if isinstance(s, _Binary) else _print(s) for s in (left, right)]
        return f"{sides[0]} {op} {sides[1]}"
    kind = node[0]
    if kind == "col":
        return f"col({node[1]!r})"
    if kind == "value":
        text = repr(node[1])
        return text if len(text) <= _MAX_VALUE else text[:_MAX_VALUE - 3] + "..."
    if kind == "not":
        return f"~({_print(node[1])})" if isinstance(node[1], _Binary) else f"~{_print(node[1])}"
    if kind == "method":
        inner = f"({_print(node[2])})" if isinstance(node[2], _Binary) else _print(node[2])
        return f"{inner}.{node[1]}()"
    return f"{node[1]}({', '.join(_print(a) for a in node[2])})"


_TREE_CUT = 50  # Ray cuts a literal at 50 characters in the tree


def tree_text(expr: Any, prefix: str = "", last: bool = True) -> str:
    """``expr`` (of ``muster.data.expressions``) as Ray's ``repr`` draws it: a node's label, then each child on
    its own line under box-drawing branches, with the role it plays (``left:``, ``arg[0]:``)."""
    lines = [_label(expr)]
    children = _labelled_children(expr)
    for i, (role, child) in enumerate(children):
        child_last = i == len(children) - 1
        child_prefix = prefix + ("    " if last else "\u2502   ")
        branch = "\u2514\u2500\u2500 " if child_last else "\u251c\u2500\u2500 "
        first, *rest = tree_text(child, child_prefix, child_last).split("\n")
        lines.append(f"{child_prefix}{branch}{role + ': ' if role else ''}{first}")
        lines.extend(rest)
    return "\n".join(lines)


def _label(expr: Any) -> str:
    from muster.data import expressions as mx

    if isinstance(expr, mx.ColumnExpr):
        return f"COL({expr.name!r})"
    if isinstance(expr, mx.LiteralExpr):
        text = repr(expr.value)
        return f"LIT({text if len(text) <= _TREE_CUT else text[:_TREE_CUT - 3] + '...'})"
    if isinstance(expr, (mx.BinaryExpr, mx.UnaryExpr)):
        return expr.op.name
    if isinstance(expr, mx.AliasExpr):
        return f"ALIAS({expr.name!r})"
    if isinstance(expr, mx.UDFExpr):
        return f"UDF({getattr(expr.fn, '__name__', type(expr.fn).__name__)})"
    labels = {mx.StarExpr: "COL(*)", mx.UnnestExpr: "UNNEST", mx.UUIDExpr: "UUID()",
              mx.MonotonicallyIncreasingIdExpr: "MONOTONICALLY_INCREASING_ID()"}
    if isinstance(expr, mx.RandomExpr):
        return "RANDOM()" if expr.seed is None else \
            f"RANDOM(seed={expr.seed}, reseed_after_execution={expr.reseed_after_execution})"
    if isinstance(expr, mx.DownloadExpr):
        return f"DOWNLOAD({expr.uri_column_name!r})"
    return labels.get(type(expr), type(expr).__name__)


def _labelled_children(expr: Any) -> list[tuple[str, Any]]:
    from muster.data import expressions as mx

    if isinstance(expr, mx.BinaryExpr):
        return [("left", expr.left), ("right", expr.right)]
    if isinstance(expr, mx.UnaryExpr):
        return [("operand", expr.operand)]
    if isinstance(expr, mx.UDFExpr):
        return [(f"arg[{i}]", a) for i, a in enumerate(expr.args)] + [(f"kwarg[{k!r}]", v)
                                                                       for k, v in expr.kwargs.items()]
    return [("", child) for child in expr._children()]
