"""``filter(expr=...)`` moved into a ``read_parquet`` scan below it, as Ray's optimizer pushes a predicate.

A filter's expression goes down the plan while the operator below leaves the rows it reads alone:

* a projection that only selects or renames (``Transform.filter_names``): the filter's columns take their
  names below it (a filter reading a column the projection drops or renames away stays above it, where it
  fails naming the column, as before);
* a ``sort`` or a ``repartition`` without shuffle or keys (``AllToAll.passes_filters``): the same rows in
  the same order either way;
* a ``random_shuffle`` or ``randomize_block_order`` without a seed (also ``passes_filters``): the same rows,
  in an order that is random either way. With a seed muster promises one order from (seed, epoch), drawn
  over the rows the shuffle gets; fewer rows below it would draw another order, so there a filter stays
  above it (Ray moves it below either way);
* a ``union`` (not a ``mix``): the filter on each branch, in the scan of each that reads parquet, a plain
  Filter on the others (the union's rows are its branches' in order, so the result is the same).

``limit`` (fewer rows after a filter than before it), a join, a ``mix`` and any function stop it. At the read, the
conjuncts of an ``&`` that have a ``pyarrow.compute`` form binding to the scan's columns go into the scan;
the rest stay a Filter right above the read. Only a tree of columns, literals and their operators travels
past an operator (a ``udf``, ``random()`` or ``monotonically_increasing_id()`` would see other rows there);
a string or pyarrow expression travels whole, past no projection.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pyarrow.compute as pc

from muster.data import projection
from muster.data.expr_tree import AliasExpr, BinaryExpr, ColumnExpr, Expr, LiteralExpr, Operation, UnaryExpr
from muster.data.plan import AllToAll, Node, RayCall, Read, Transform, Union
from muster.exceptions import InvalidTypeError

_PLAIN = (AliasExpr, BinaryExpr, ColumnExpr, LiteralExpr, UnaryExpr)  # no function, no per-row state


def pushed(node: Node, op: Transform, expr: Any) -> Node | None:
    """The plan ``node`` then ``op`` (the filter of ``expr``) with some or all of the filter in the scan of a
    read below; None when nothing can go there (the filter then stays where it is)."""
    below = node.op
    if isinstance(below, Read):
        return _into_read(node, below, op, expr)
    columns = _columns(expr)
    if columns is None:
        return None
    if isinstance(below, Union):
        return _into_union(node, below, op, expr)
    if len(node.inputs) != 1:
        return None
    if isinstance(below, AllToAll) and below.passes_filters:
        names: dict[str, str] | None = {c: c for c in columns}
    elif isinstance(below, Transform) and below.filter_names is not None and isinstance(expr, Expr):
        names = below.filter_names(frozenset(columns))
    else:
        return None
    if names is None:
        return None
    if any(old != new for new, old in names.items()):
        expr = _renamed(expr, names)
        op = projection.filter_op(expr)
    inner = pushed(node.inputs[0], op, expr)
    return None if inner is None else Node(below, (inner,))


def _into_union(node: Node, union: Union, op: Transform, expr: Any) -> Node | None:
    """A plain union with the filter on each branch (in the scan of those that read parquet); None when no
    branch takes it into a scan. A ``mix`` (``weights``) keeps it above: it interleaves by rows seen."""
    if union.weights is not None:
        return None
    branches = [(pushed(branch, op, expr), branch) for branch in node.inputs]
    if all(inner is None for inner, _ in branches):
        return None
    return Node(union, tuple(inner if inner is not None else Node(op, (branch,)) for inner, branch in branches))


def _into_read(node: Node, read: Read, op: Transform, expr: Any) -> Node | None:
    if read.push_filter is None:
        return None
    parts = _conjuncts(expr) if isinstance(expr, Expr) else [expr]
    rest: list[Any] = []
    ray = read.ray if isinstance(read.ray, RayCall) else None
    for part in parts:
        part_op = op if len(parts) == 1 else projection.filter_op(part)
        taken = _scanned(read, part)
        if taken is None:
            rest.append(part)
            continue
        ray = RayCall((*ray.steps, *part_op.ray.steps)) if ray is not None and isinstance(part_op.ray, RayCall) \
            else None
        read = dataclasses.replace(taken, filters=(*read.filters, part_op.name))
    if len(rest) == len(parts):
        return None
    # on Ray: its read, then its filters (Ray pushes them itself)
    scan = Node(dataclasses.replace(read, ray=ray if ray is not None else op.ray))
    if not rest:
        return scan
    residual = rest[0]
    for part in rest[1:]:
        residual = residual & part
    return Node(projection.filter_op(residual), (scan,))


def _scanned(read: Read, expr: Any) -> Read | None:
    """``read`` with ``expr`` in its scan, or None when it has no pyarrow form that binds to the scan."""
    assert read.push_filter is not None
    try:
        arrow = expr if isinstance(expr, pc.Expression) else expr.to_pyarrow()
    except InvalidTypeError:  # a udf, random(), download(): evaluated block by block instead
        return None
    return read.push_filter(arrow)


def _conjuncts(expr: Expr) -> list[Expr]:
    """``a & b & c`` as ``[a, b, c]`` (one item for anything else)."""
    if type(expr) is BinaryExpr and expr.op == Operation.AND:
        return [*_conjuncts(expr.left), *_conjuncts(expr.right)]
    return [expr]


def _columns(expr: Any) -> set[str] | None:
    """The columns a plain expression reads; None for a string or pyarrow one, or one with a function."""
    if not isinstance(expr, Expr):
        return set() if isinstance(expr, (pc.Expression, str)) else None
    if type(expr) not in _PLAIN:
        return None
    found = {expr.name} if type(expr) is ColumnExpr and expr.name is not None else set()
    for child in expr._children():
        inner = _columns(child)
        if inner is None:
            return None
        found |= inner
    return found


def _renamed(expr: Expr, names: dict[str, str]) -> Expr:
    """A copy of the plain expression ``expr`` reading each column ``c`` as ``names[c]``."""
    out = copy.deepcopy(expr)
    todo = [out]
    while todo:
        e = todo.pop()
        if type(e) is ColumnExpr:
            e._name = names.get(e.name, e.name)
        todo.extend(e._children())
    return out
