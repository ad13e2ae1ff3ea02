"""How a lazy ``Dataset`` prints, in Ray 2.60's two forms, without running any of its plan.

* a bare source whose schema is known before reading (``range``, in-memory data, a custom source's
  ``ReadTask(schema=)``): a table of its columns and types under ``shape: (rows, columns)``, the
  rows ``?`` when unknown, and ``(Dataset isn't materialized)``;
* otherwise the plan's operators, last first, each input one level in under ``+-``, ending in
  ``Dataset(num_rows=..., schema=...)`` for what the source knows (``?`` / ``Unknown schema``).

``MaterializedDataset`` keeps its one-line form (``dataset.py``).
"""

from __future__ import annotations

import pyarrow as pa

from muster.data.plan import Node, Read
from muster.data.schema import Schema

_WIDTH = 80  # a summary longer than this goes on several lines, as Ray's does
_CELL = 40  # a column name or type longer than this is cut, ending in an ellipsis
_INDENT = "   "


def lazy_repr(node: Node, cls_name: str = "Dataset", name: str | None = None) -> str:
    """``node``'s dataset as Ray prints an unexecuted one (see the module's docstring); ``name`` is
    ``set_name``'s, heading the table (``name: ...``) or first in the summary (``name=...``)."""
    rows, schema = _source_facts(node)
    if isinstance(node.op, Read) and schema is not None and len(schema.names):
        return (f"name: {name}\n" if name is not None else "") + _table(Schema(schema), rows)
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


def _table(schema: Schema, rows: int | None) -> str:
    """The column/type table of an unread source."""
    names = [_cell(str(n)) for n in schema.names]
    types = [_cell(str(t)) for t in schema.types]
    widths = [max(len(n), len(t), 3) for n, t in zip(names, types)]

    def row(cells: list[str]) -> str:
        return "│" + "┆".join(f" {c.ljust(w)} " for c, w in zip(cells, widths)) + "│"

    def border(left: str, mid: str, right: str) -> str:
        return left + mid.join("─" * (w + 2) for w in widths) + right

    shape = f"shape: ({'?' if rows is None else rows}, {len(names)})"
    return "\n".join([shape, border("╭", "┬", "╮"), row(names), row(["---"] * len(names)), row(types),
                      border("╰", "┴", "╯"), "(Dataset isn't materialized)"])


def _cell(text: str) -> str:
    return text if len(text) <= _CELL else text[:_CELL - 1] + "…"
