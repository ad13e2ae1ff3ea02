"""Read tasks for data already in memory (``from_arrow``, ``from_items``, ``from_numpy``...) and for ``range``:
each knows its rows and schema before it runs, and block sizes follow the ``DataContext``."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import pyarrow as pa

from muster.data import block as blk
from muster.data.plan import ReadTask


def block_tasks(blocks: list[pa.Table], label: str) -> tuple[ReadTask, ...]:
    return tuple(ReadTask((lambda b=b: [b]), f"{label}[{i}]", blk.nbytes(b), rows=b.num_rows, schema=b.schema)
                 for i, b in enumerate(blocks))


def rows_per_block(row_bytes: int) -> int:
    """``DataContext.target_block_rows``, or fewer rows where those would pass ``target_max_block_size``
    bytes (Ray's 128 MiB): 32 KiB tensors make blocks of 4,096 rows, not 2 GiB ones of 65,536."""
    from muster.data.context import DataContext

    ctx = DataContext.get_current()
    cap = ctx.target_max_block_size
    if cap is None or row_bytes <= 0:
        return ctx.target_block_rows
    return max(1, min(ctx.target_block_rows, cap // row_bytes))


def table_blocks(table: pa.Table, rows: int | None = None, parallelism: int = -1) -> list[pa.Table]:
    """``table`` sliced (no copy) into ``parallelism`` blocks, or else blocks of ``rows`` rows
    (default: :func:`rows_per_block` of the table's bytes per row)."""
    if parallelism and parallelism > 0:
        rows = max(1, -(-table.num_rows // parallelism))
    elif rows is None:
        rows = rows_per_block(-(-blk.nbytes(table) // table.num_rows) if table.num_rows else 0)
    return blk.split_rows(table, rows) if table.num_rows else [table]


def range_tasks(n: int, rows: int, tensor_shape: tuple[int, ...] | None) -> tuple[ReadTask, ...]:
    """``range``/``range_tensor`` in blocks of ``rows`` rows; each task's size (for the in-flight
    budget) is the bytes its block will hold."""
    row_bytes = 8 * math.prod(tensor_shape or ())

    def make(start: int, stop: int) -> Callable[[], list[pa.Table]]:
        def read() -> list[pa.Table]:
            ids = np.arange(start, stop, dtype=np.int64)
            if tensor_shape is None:
                return [pa.table({"id": ids})]
            data = np.broadcast_to(ids.reshape(-1, *([1] * len(tensor_shape))), (len(ids), *tensor_shape))
            return [pa.table({"data": blk.array_from_values(np.ascontiguousarray(data))})]

        return read

    spans = [(s, min(n, s + rows)) for s in range(0, n, rows)]
    schema = make(0, 1)()[0].schema  # a one-row block's: a tensor's extension type, with its shape
    return tuple(ReadTask(make(s, e), f"range[{s}:{e}]", row_bytes * (e - s), rows=e - s, schema=schema)
                 for s, e in spans) or (ReadTask(lambda: [pa.table({"id": pa.array([], pa.int64())})], "range[0:0]",
                                                 rows=0, schema=schema),)
