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
  Filter on the others (the union's rows are its branches' in order, so the result is the same);
* a ``join`` whose inputs' schemas are known (``Join.schema``), when every column the filter reads comes
  from one input (``combine.join_sources``: its name there, a suffixed one mapped back) whose rows the join
  never null-extends (``_JOIN_SIDES``): an inner join either input, a left outer, semi or anti join the
  left, a right one the right, a full outer join neither (a filter there would drop the rows the join pads
  with nulls, or keep those it pads from rows it dropped). A filter on key columns alone goes into the other
  input too, its keys named as there: a row of that input failing it would match no row that passes it,
  and only matched rows of that input come out (pyarrow joins keys of one type only, so a key's value, and
  the filter's result, is the same on both sides). Like a union, a join takes it when some input's scan does.

``limit`` (fewer rows after a filter than before it), a ``mix`` and any function stop it. At the read, the
conjuncts of an ``&`` that have a ``pyarrow.compute`` form binding to the scan's columns go into the scan;
the rest stay a Filter right above the read. Only a tree of columns, literals and their operators travels
past an operator (a ``udf``, ``random()`` or ``monotonically_increasing_id()`` would see other rows there);
a string or pyarrow expression travels whole, past no projection or join (its columns are not known).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pyarrow.compute as pc

from muster.data import combine, projection
from muster.data.expr_tree import AliasExpr, BinaryExpr, ColumnExpr, Expr, LiteralExpr, Operation, UnaryExpr
from muster.data.plan import AllToAll, Join, Node, RayCall, Read, Transform, Union
from muster.exceptions import InvalidTypeError

_PLAIN = (AliasExpr, BinaryExpr, ColumnExpr, LiteralExpr, UnaryExpr)  # no function, no per-row state
#: per join type, the inputs (0 left, 1 right) whose rows come out of it as they went in, never null-extended
_JOIN_SIDES = {"inner": (0, 1), "left_outer": (0,), "right_outer": (1,), "full_outer": (),
               "left_semi": (0,), "left_anti": (0,), "right_semi": (1,), "right_anti": (1,)}


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
    if isinstance(below, Join):
        return _into_join(node, below, op, expr, columns)
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
    inner = pushed(node.inputs[0], *_named(op, expr, names))
    return None if inner is None else Node(below, (inner,))


def _named(op: Transform, expr: Any, names: dict[str, str]) -> tuple[Transform, Any]:
    """The filter ``op`` of ``expr`` reading each column ``c`` as ``names[c]`` (itself when no name changes)."""
    if all(old == new for new, old in names.items()):
        return op, expr
    expr = _renamed(expr, names)
    return projection.filter_op(expr), expr


def _onto(node: Node, filters: dict[int, tuple[Transform, Any]]) -> Node | None:
    """``node`` with ``filters[i]`` (a filter and its expression) on its ``i``-th input, in its scan where it can
    go there, a plain Filter above the input where not; None when no input takes its filter into a scan."""
    branches = [(i, pushed(node.inputs[i], op, expr)) for i, (op, expr) in filters.items()]
    if all(inner is None for _, inner in branches):
        return None
    inputs = list(node.inputs)
    for i, inner in branches:
        inputs[i] = inner if inner is not None else Node(filters[i][0], (inputs[i],))
    return Node(node.op, tuple(inputs))


def _into_union(node: Node, union: Union, op: Transform, expr: Any) -> Node | None:
    """A plain union with the filter on each branch (in the scan of those that read parquet); None when no
    branch takes it into a scan. A ``mix`` (``weights``) keeps it above: it interleaves by rows seen."""
    if union.weights is not None:
        return None
    return _onto(node, {i: (op, expr) for i in range(len(node.inputs))})


def _into_join(node: Node, join: Join, op: Transform, expr: Any, columns: set[str]) -> Node | None:
    """The join with the filter on the inputs it gives the same rows on (see the module's docstring), named as
    there; None when there are none, or none takes it into a scan."""
    left, right = (n.known_schema() for n in node.inputs)
    sources = combine.join_sources(join, left, right) if left is not None and right is not None else None
    if not isinstance(expr, Expr) or sources is None or not columns or not columns <= sources.keys():
        return None
    sides = {sources[c][0] for c in columns}
    side = sides.pop()
    if sides or side not in _JOIN_SIDES[join.join_type]:
        return None
    names = {side: {c: sources[c][1] for c in columns}}
    keys = (join.keys, join.right_keys)
    if all(name in keys[side] for name in names[side].values()):  # on keys alone: onto the other input too
        names[1 - side] = {c: keys[1 - side][keys[side].index(name)] for c, name in names[side].items()}
    return _onto(node, {i: _named(op, expr, n) for i, n in names.items()})


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
