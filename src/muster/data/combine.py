"""Whole-table operations behind ``Dataset.zip``, ``Dataset.join`` and the stratified
``train_test_split``: both sides are gathered (one machine), combined with pyarrow, and checked so
that nothing is lost silently. A join and a zip are plan operators (``plan.Join``, ``plan.Zip``), run when the
dataset is; on the Ray engine a join holds one side and streams the other through (``stream_join``)."""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from muster.data import block as blk
from muster.data.plan import Join, Node, RayCall, Zip
from muster.exceptions import InvalidArgumentError, InvalidTypeError

#: Ray's join types, as pyarrow names them.
JOIN_TYPES = {"inner": "inner", "left_outer": "left outer", "right_outer": "right outer",
              "full_outer": "full outer", "left_semi": "left semi", "right_semi": "right semi",
              "left_anti": "left anti", "right_anti": "right anti"}
_RAY_JOIN_OPTIONS = {"partition_size_hint", "aggregator_ray_remote_args", "validate_schemas"}


def zip_tables(tables: list[pa.Table]) -> pa.Table:
    """Columns side by side; a repeated name gets ``_1``, ``_2``..."""
    if len({t.num_rows for t in tables}) > 1:
        raise InvalidArgumentError(
            f"zip(): the datasets have {[t.num_rows for t in tables]} rows; zip needs the same number in each."
        )
    columns: dict[str, Any] = {}
    for t in tables:
        for name in t.column_names:
            out, k = name, 1
            while out in columns:
                out, k = f"{name}_{k}", k + 1
            columns[out] = t.column(name)
    return pa.table(columns)


def zip_node(inputs: list[Node]) -> Node:
    """The plan putting ``inputs``' columns side by side when it runs (``zip_tables`` of each one gathered)."""
    return Node(Zip("Zip", _zip_blocks), tuple(inputs))


def _zip_blocks(inputs: list[list[pa.Table]]) -> list[pa.Table]:
    return [zip_tables([blk.concat(blocks) if blocks else pa.table({}) for blocks in inputs])]


def check_join(join_type: str, keys: list[str], right_keys: list[str], ray_options: dict[str, Any]) -> None:
    """The join's arguments that need no data: its type, Ray's options, the keys' count."""
    if join_type not in JOIN_TYPES:
        raise InvalidArgumentError(f"join(join_type={join_type!r}): use one of {', '.join(JOIN_TYPES)}.")
    unknown = sorted(set(ray_options) - _RAY_JOIN_OPTIONS)
    if unknown:
        raise InvalidTypeError(f"join() got unknown option(s) {unknown}.")
    if len(keys) != len(right_keys):
        raise InvalidArgumentError(f"join(on={keys!r}, right_on={right_keys!r}): give as many keys on each side.")


def join_tables(left: pa.Table, right: pa.Table, join_type: str, keys: list[str], right_keys: list[str],
                left_suffix: str | None, right_suffix: str | None) -> pa.Table:
    """``left`` joined with ``right``; a right column other than its keys named like a left column needs
    a suffix (pyarrow would keep both under one name, or one side's values only)."""
    for side, table, names in (("left", left, keys), ("right", right, right_keys)):
        missing = [k for k in names if k not in table.column_names]
        if missing:
            raise InvalidArgumentError(f"join: the {side} dataset has no column {missing[0]!r}; it has "
                                       f"{table.column_names}.")
    how = JOIN_TYPES[join_type]
    # as Ray's: the right keys are merged into the left ones, so any other right column may clash, with a left key too
    both = set(left.column_names) & (set(right.column_names) - set(right_keys))
    if both and how.split()[-1] not in ("semi", "anti"):
        if not (left_suffix or right_suffix):
            raise InvalidArgumentError(
                f"join: the output would have the columns {sorted(both)} from both datasets; pass left_suffix= "
                "and/or right_suffix= (e.g. right_suffix='_right') so that neither side's values are lost."
            )
        left = _renamed(left, "left_suffix", {c: c + left_suffix for c in both if c not in keys} if left_suffix
                        else {})
        # Ray's rule: a left key keeps its name; a right column named like it takes right_suffix, or "_right"
        # (in a right outer join the left key leaves the output, so it keeps its name)
        right = _renamed(right, "right_suffix", {c: c + right_suffix for c in both} if right_suffix else {
            c: c + "_right" for c in both if c in keys and join_type != "right_outer"})
    return left.join(right, keys=keys, right_keys=right_keys, join_type=how, use_threads=False)


def _renamed(table: pa.Table, suffix: str, renames: dict[str, str]) -> pa.Table:
    """``table`` with the columns in ``renames`` renamed, refusing a new name one of its columns has already."""
    if not renames:
        return table
    taken = [(old, new) for old, new in renames.items() if new in table.column_names]
    if taken:
        old, new = sorted(taken)[0]
        raise InvalidArgumentError(f"join: {suffix} would rename column {old!r} to {new!r}, which that dataset "
                                   f"already has; pick another {suffix}.")
    return table.rename_columns([renames.get(c, c) for c in table.column_names])


def join_node(left: Node, right: Node, join_type: str, keys: list[str], right_keys: list[str], num_partitions: int,
              left_suffix: str | None, right_suffix: str | None) -> Node:
    """The plan joining ``left`` with ``right`` into ``num_partitions`` blocks; where both inputs' schemas are
    known, checked now (a key missing, columns clashing: ``join_tables``'s errors), else when it runs."""
    op = Join("Join", join_type, tuple(keys), tuple(right_keys), functools.partial(
        _join_blocks, join_type=join_type, keys=keys, right_keys=right_keys, left_suffix=left_suffix,
        right_suffix=right_suffix, num_partitions=num_partitions), RayCall.of(
        "join", join_type, num_partitions, on=tuple(keys), right_on=tuple(right_keys), left_suffix=left_suffix,
        right_suffix=right_suffix))
    schemas = left.known_schema(), right.known_schema()
    if schemas[0] is not None and schemas[1] is not None:
        op.fn([schemas[0].empty_table()], [schemas[1].empty_table()])
    return Node(op, (left, right))


def _join_blocks(left: list[pa.Table], right: list[pa.Table], join_type: str, keys: list[str],
                 right_keys: list[str], left_suffix: str | None, right_suffix: str | None,
                 num_partitions: int) -> list[pa.Table]:
    joined = join_tables(blk.concat(left), blk.concat(right), join_type, keys, right_keys, left_suffix, right_suffix)
    return blk.split_rows(joined, max(1, -(-joined.num_rows // num_partitions))) if joined.num_rows else [joined]


#: The join types whose every output row has one right row (the others: one left row, or full outer).
_RIGHT_PROBED = ("right_outer", "right_semi", "right_anti")


def stream_join(op: Join, left: Callable[[], Iterable[pa.Table]], right: Callable[[], Iterable[pa.Table]]
                ) -> Iterator[pa.Table]:
    """``op``'s output, a block at a time, holding one input whole: the other (the probe side: the right for
    a right outer, semi or anti join, else the left) runs after it and is joined one block at a time, so the
    output streams while it runs. A full outer join keeps the probe side's keys too, and ends with the held
    side's rows that none matched. Each input is a callable that starts it (the held one is started first).
    The rows are ``op.fn``'s of the gathered inputs; their order and the blocks' sizes may differ."""
    probe_right = op.join_type in _RIGHT_PROBED
    held_blocks = list(left() if probe_right else right())
    held = [blk.concat(held_blocks)] if held_blocks else []
    probed, left_schema, left_keys = False, None, []  # a full outer join's: the left input's schema and keys
    for block in right() if probe_right else left():
        probed = True
        if probe_right:
            yield from op.fn(held, [block])
        elif op.join_type == "full_outer":
            keys, left_schema = block.select(list(op.keys)), block.schema if left_schema is None else left_schema
            left_keys.append(keys)
            yield from op.fn([block], [_matching(held, keys, op, "left semi")])
        else:
            yield from op.fn([block], held)
    if not probed:  # no probe block: as the gathered inputs join
        yield from op.fn(held, []) if probe_right else op.fn([], held)
    elif left_schema is not None:
        unmatched = _matching(held, blk.concat(left_keys), op, "left anti")
        yield from op.fn([left_schema.empty_table()], [unmatched])


def _matching(held: list[pa.Table], keys: pa.Table, op: Join, how: str) -> pa.Table:
    """The held right input's rows whose keys are (``left semi``) or are not (``left anti``) among ``keys``
    (left key columns): pyarrow's semi/anti join, which keeps the right's columns as they are."""
    if not held:
        return pa.table({})
    return held[0].join(keys, keys=list(op.right_keys), right_keys=list(op.keys), join_type=how, use_threads=False)


def join_sources(op: Join, left: pa.Schema, right: pa.Schema) -> dict[str, tuple[int, str]] | None:
    """Each column of ``op``'s output for inputs of these schemas: the input it comes from (0 left, 1 right)
    and its name there. pyarrow's join gives the left's columns, then the right's but its keys (a right outer
    join: the left's but its keys, then the right's; a semi or anti join: its one side's), each renamed by its
    suffix where the names clash; the names are pyarrow's own output's. A name the output has twice is left
    out; None when the inputs would not join."""
    joined = op.schema(left, right)
    if joined is None:
        return None
    how, lefts, rights = op.join_type, [(0, n) for n in left.names], [(1, n) for n in right.names]
    if how in ("left_semi", "left_anti"):
        sources = lefts
    elif how in ("right_semi", "right_anti"):
        sources = rights
    elif how == "right_outer":
        sources = [s for s in lefts if s[1] not in op.keys] + rights
    else:
        sources = lefts + [s for s in rights if s[1] not in op.right_keys]
    if len(sources) != len(joined.names):
        return None
    return {name: source for name, source in zip(joined.names, sources) if joined.names.count(name) == 1}


def test_share(test_size: float | int, n: int) -> float:
    """``train_test_split``'s ``test_size`` for ``n`` rows as the share of rows that go to test.

    Raises:
        InvalidArgumentError: neither a fraction in (0, 1) nor a row count in [1, n].
    """
    if isinstance(test_size, float) and 0 < test_size < 1:
        return test_size
    if isinstance(test_size, int) and 0 < test_size <= n:
        return test_size / n
    raise InvalidArgumentError(f"train_test_split(test_size={test_size!r}): use a fraction in (0, 1) or a row "
                               f"count in [1, {n}].")


def stratified_split(table: pa.Table, test_size: float | int, column: str) -> tuple[pa.Table, pa.Table]:
    """``(train, test)`` with each value of ``column`` split alike, so both keep its proportions."""
    if column not in table.column_names:
        raise InvalidArgumentError(f"train_test_split(stratify={column!r}): no such column; the dataset has "
                                   f"{table.column_names}.")
    share = test_share(test_size, table.num_rows)
    train, test = [], []
    for value in pc.unique(table.column(column)).to_pylist():
        rows = table.filter(pc.is_null(table.column(column)) if value is None
                            else pc.equal(table.column(column), pa.scalar(value, table.schema.field(column).type)))
        cut = rows.num_rows - int(np.ceil(rows.num_rows * share))
        train.append(rows.slice(0, cut))
        test.append(rows.slice(cut))
    return blk.concat(train), blk.concat(test)
