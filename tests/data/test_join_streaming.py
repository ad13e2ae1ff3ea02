"""``combine.stream_join``: a join that holds one input and streams the other (the Ray engine runs a join so)
gives the rows, the column names and the types of the gathered join (the embedded engine's), for every join
type, suffix and key naming, with the inputs in several blocks, duplicate and null keys included."""

from __future__ import annotations

import pyarrow as pa
import pytest

from muster.data import combine
from muster.data.plan import Node, Read

LEFT = pa.table({"id": [1, 2, 3, None, 2, 5], "v": ["a", "b", "c", "n", "b2", "e"], "lo": [10, 20, 30, 40, 50, 60]})
RIGHT = pa.table({"id": [2, 3, 3, 4, None, 9], "v": ["B", "C", "C2", "D", "N", "Z"], "ro": [1, 2, 3, 4, 5, 6]})
KEYED = pa.table({"k": [2, 3, 3, 4, None], "id": [7, 7, 7, 7, 7], "w": [1, 2, 3, 4, 5]})  # a payload "id" too


def _op(join_type, right_keys, suffixes):
    leaf = Node(Read("Read", ()), ())  # no known schema: the join is checked when it runs
    return combine.join_node(leaf, leaf, join_type, ["id"], right_keys, 2, *suffixes).op


def _blocks(table, size):
    return [table.slice(i, size) for i in range(0, table.num_rows, size)]


def _rows(blocks):
    table = pa.concat_tables([b for b in blocks if b.num_columns])
    return table.schema, sorted(map(repr, table.to_pylist()))


@pytest.mark.parametrize("join_type", sorted(combine.JOIN_TYPES))
@pytest.mark.parametrize("right, right_keys, suffixes", [
    (RIGHT, ["id"], ("_l", None)), (RIGHT, ["id"], (None, "_r")), (RIGHT, ["id"], ("_l", "_r")),
    (KEYED, ["k"], (None, "_r"))])
def test_a_streamed_join_gives_the_gathered_joins_rows(join_type, right, right_keys, suffixes):
    op = _op(join_type, right_keys, suffixes)
    gathered = _rows(op.fn([LEFT], [right]))
    for size in (1, 4, 100):
        started = []
        streamed = combine.stream_join(op, lambda: started.append("left") or _blocks(LEFT, size),
                                       lambda: started.append("right") or _blocks(right, size))
        assert _rows(streamed) == gathered, (size, suffixes)
        probe = "right" if join_type.startswith("right") else "left"
        assert started == ["left", "right"] if probe == "right" else ["right", "left"]  # the probe side last


@pytest.mark.parametrize("join_type", ["inner", "full_outer", "right_outer"])
def test_a_streamed_join_of_an_input_with_no_rows(join_type):
    op = _op(join_type, ["id"], (None, "_r"))
    for left, right in ((LEFT.slice(0, 0), RIGHT), (LEFT, RIGHT.slice(0, 0))):
        assert _rows(combine.stream_join(op, lambda: [left], lambda: [right])) == _rows(op.fn([left], [right]))
