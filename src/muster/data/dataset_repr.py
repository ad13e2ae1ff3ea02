"""How a lazy ``Dataset`` prints, in Ray 2.60's two forms, without running any of its plan.

* a plan whose schema is known before reading (a bare ``range``, in-memory data, ``read_parquet``, a
  custom source's ``ReadTask(schema=)``, under operators that keep its columns: shuffle, sort,
  repartition, ``limit``, a filter, a union of one schema): a table of its columns and types under
  ``shape: (rows, columns)``, the rows ``?`` when unknown, and ``(Dataset isn't materialized)``;
* otherwise the plan's operators, last first, each input one level in under ``+-``, ending in
  ``Dataset(num_rows=..., schema=...)`` for what the source knows (``?`` / ``Unknown schema``).

A ``MaterializedDataset`` prints that table holding its first and last rows (``materialized_repr``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from muster.data import block as blk
from muster.data.plan import Node, Read
from muster.data.schema import Schema

_WIDTH = 80  # a summary longer than this goes on several lines, as Ray's does
_CELL = 40  # a column name or type longer than this is cut, ending in an ellipsis
_INDENT = "   "
_SHOWN, _HEAD = 10, 5  # a materialized dataset shows up to 10 rows: with more, its first 5 and last 5


def lazy_repr(node: Node, cls_name: str = "Dataset", name: str | None = None,
              seen: tuple[int | None, pa.Schema | None] | None = None) -> str:
    """``node``'s dataset as Ray prints an unexecuted one (see the module's docstring); ``name`` is
    ``set_name``'s, heading the table (``name: ...``) or first in the summary (``name=...``); ``seen``, the
    rows and schema of a pass that ran to its end (or the schema a ``schema()`` call fetched, rows None),
    which Ray keeps and prints as the table too."""
    known, rows = node.known_schema(), node.known_rows()
    if seen is not None:
        known, rows = known or seen[1], seen[0] if rows is None else rows
    if known is not None and len(known.names):
        return (f"name: {name}\n" if name is not None else "") + _table(Schema(known), rows)
    rows, schema = _source_facts(node)
    lines: list[str] = []
    depth = _plan_lines(node, 0, lines)
    leaf = _summary(cls_name, rows, schema, _INDENT * depth, name)
    if depth == 0:
        return "\n".join([*lines, leaf])
    return "\n".join([*lines, f"{_INDENT * (depth - 1)}+- {leaf}"])


def _source_facts(node: Node) -> tuple[int | None, pa.Schema | None]:
    """The rows and schema the plan's one source knows before reading (None each when unknown, or when the
    plan joins several inputs, as Ray leaves them)."""
    while not isinstance(node.op, Read):
        if len(node.inputs) != 1:
            return None, None
        node = node.inputs[0]
    return node.known_rows(), node.op.known_schema()


def _plan_lines(node: Node, depth: int, lines: list[str]) -> int:
    """The operators above the sources, depth first, appended to ``lines``; the deepest level reached."""
    if isinstance(node.op, Read):
        return depth
    lines.append(node.op.name if depth == 0 else f"{_INDENT * (depth - 1)}+- {node.op.name}")
    return max([_plan_lines(n, depth + 1, lines) for n in node.inputs], default=depth + 1)


def _summary(cls_name: str, rows: int | None, schema: pa.Schema | None, indent: str, name: str | None) -> str:
    """``Dataset(num_rows=..., schema={...})``, over several lines (``indent`` deep) when longer than 80."""
    count = "?" if rows is None else str(rows)
    fields = [] if schema is None else [f"{n}: {t}" for n, t in zip(Schema(schema).names, Schema(schema).types)]
    schema_text = "Unknown schema" if schema is None else "{" + ", ".join(fields) + "}"
    named = "" if name is None else f"name={name}, "
    line = f"{cls_name}({named}num_rows={count}, schema={schema_text})"
    if len(line) <= _WIDTH:
        return line
    inner = indent + _INDENT
    if len(f"{inner}schema={schema_text}") > _WIDTH and fields:
        cut = [_shorten(f"{inner}{_INDENT}{f}", f.split(": ", 1)[1]) for f in fields]
        schema_text = "{\n" + ",\n".join(cut) + f"\n{inner}}}"
    named = "" if name is None else f"\n{inner}name={name},"
    return f"{cls_name}({named}\n{inner}num_rows={count},\n{inner}schema={schema_text}\n{indent})"


def _shorten(field_line: str, type_text: str) -> str:
    """A schema field's line cut to 80 characters, keeping its whole type (and at least 10 of the name)."""
    if len(field_line) <= _WIDTH:
        return field_line
    tail = f"...: {type_text}"
    return field_line[:max(_WIDTH - len(tail), 10)] + tail


def materialized_repr(blocks: list[pa.Table], name: str | None) -> str:
    """A materialized dataset's table, its first ``_HEAD`` and last rows (``…`` between) when it has more
    than ``_SHOWN``; its one-line summary when it has no columns."""
    schema = blocks[0].schema if blocks else pa.schema([])
    rows = sum(b.num_rows for b in blocks)
    if not len(schema.names):
        return _summary("MaterializedDataset", rows, schema, "", name)
    table = pa.concat_tables(blocks) if blocks else schema.empty_table()
    picked = [table.slice(0, _SHOWN)] if rows <= _SHOWN else [table.slice(0, _HEAD), table.slice(rows - _SHOWN + _HEAD)]
    shown = [[[_cell(_text(r[c])) for c in schema.names] for r in blk.iter_rows(part)] for part in picked]
    return (f"name: {name}\n" if name is not None else "") + _table(Schema(schema), rows, shown)


def _text(value: Any) -> str:
    """A cell's value as Ray prints it: ``str`` of the Python value, on one line."""
    value = value.item() if isinstance(value, np.generic) else value
    return str(value).replace("\n", " ").replace("\r", " ")


def _table(schema: Schema, rows: int | None, parts: list[list[list[str]]] | None = None) -> str:
    """The column/type table: of an unread plan, or (``parts``: its first rows, and its last) of a
    materialized dataset, holding those rows with a ``…`` row between the parts."""
    gap = [["…"] * len(schema.names)] if parts is not None and len(parts) > 1 else []
    shown = None if parts is None else [*parts[0], *gap, *(r for part in parts[1:] for r in part)]
    names = [_cell(str(n)) for n in schema.names]
    types = [_cell(str(t)) for t in schema.types]
    widths = [max([len(n), len(t), 3, *(len(r[i]) for r in shown or [])]) for i, (n, t) in enumerate(zip(names, types))]

    def row(cells: list[str]) -> str:
        return "│" + "┆".join(f" {c.ljust(w)} " for c, w in zip(cells, widths)) + "│"

    def border(left: str, mid: str, right: str, fill: str = "─") -> str:
        return left + mid.join(fill * (w + 2) for w in widths) + right

    shape = f"shape: ({'?' if rows is None else rows}, {len(names)})"
    lines = [shape, border("╭", "┬", "╮"), row(names), row(["---"] * len(names)), row(types)]
    if shown:
        lines += [border("╞", "╪", "╡", "═"), *(row(r) for r in shown)]
    done = "(Dataset isn't materialized)" if parts is None else f"(Showing {sum(map(len, parts))} of {rows} rows)"
    return "\n".join([*lines, border("╰", "┴", "╯"), done])


def _cell(text: str) -> str:
    return text if len(text) <= _CELL else text[:_CELL - 1] + "…"
