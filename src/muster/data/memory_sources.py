"""Read tasks for data already in memory (``from_arrow``, ``from_items``, ``from_numpy``...) and for ``range``:
each knows its rows and schema before it runs, and block sizes follow the ``DataContext``."""

from __future__ import annotations

import math
import os
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


def engine_cpus() -> int:
    """The CPUs of the engine that would run a pipeline: the running engine's, else this machine's."""
    from muster.core import api

    runtime = api.running()
    if runtime is not None:
        try:
            return max(1, int(runtime.resources().get("CPU", 0)))
        except Exception:  # noqa: BLE001 - an engine shutting down: count the machine's
            pass
    return os.cpu_count() or 1


def small_source_blocks(rows: int) -> int:
    """The blocks an in-memory source of ``rows`` rows is cut into at least: two per CPU of the engine (Ray's
    floor for a read), so a slow ``map`` over a few rows keeps every CPU busy, and fewer when it has fewer rows,
    two rows a block at least (a source of 3 rows stays one block). Not Ray's 200 blocks, one per item of
    ``from_items``: a task per one-row block made small pipelines slower. :func:`rows_per_block` still caps
    larger sources' blocks."""
    return max(1, min(rows // 2, 2 * engine_cpus()))


def even_blocks(table: pa.Table, parallelism: int) -> list[pa.Table]:
    """``table`` sliced (no copy) into ``min(rows, parallelism)`` blocks whose sizes differ by one row at most,
    the first ones larger (as Ray's ``from_items``: 10 rows in 4 blocks are 3, 3, 2, 2)."""
    n = max(1, min(table.num_rows, parallelism))
    size, extra = divmod(table.num_rows, n)
    starts = [i * size + min(i, extra) for i in range(n + 1)]
    return [table.slice(a, b - a) for a, b in zip(starts, starts[1:])]


def table_blocks(table: pa.Table, rows: int | None = None, parallelism: int = -1) -> list[pa.Table]:
    """``table`` sliced (no copy) into ``parallelism`` blocks, or else blocks of ``rows`` rows
    (default: :func:`rows_per_block` of the table's bytes per row)."""
    if parallelism and parallelism > 0:
        rows = max(1, -(-table.num_rows // parallelism))
    elif rows is None:
        rows = rows_per_block(-(-blk.nbytes(table) // table.num_rows) if table.num_rows else 0)
    return blk.split_rows(table, rows) if table.num_rows else [table]


def range_rows(n: int, row_bytes: int) -> int:
    """Rows per block of ``range(n)``/``range_tensor`` by default: :func:`rows_per_block`, or fewer, so that a
    small range makes :func:`small_source_blocks` blocks (``range(10)`` on 4 CPUs: 5 blocks of 2 rows)."""
    return max(1, min(rows_per_block(row_bytes), -(-n // small_source_blocks(n))))


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
