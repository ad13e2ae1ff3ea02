"""Operators that need all of their input first: shuffle, block order, repartition, sort, groupby.

Randomness is seeded from (seed, epoch): each pass over a training shard gets
a new order, and every rank computes the same one (so the split stays exact).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from muster.data import block as blk
from muster.data.plan import ReadTask
from muster.exceptions import InvalidArgumentError


def _rng(seed: int, epoch: int) -> np.random.Generator:
    return np.random.default_rng([seed, epoch])


class _Permutations:
    """Seeded per-epoch permutations; epoch e+1's is drawn on a background thread while epoch e is consumed."""

    def __init__(self, seed: int):
        self.seed = seed
        self._next: tuple[int, int, Future[np.ndarray]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"seed": self.seed}

    def __setstate__(self, state: dict[str, Any]) -> None:
        _Permutations.__init__(self, state["seed"])

    def _draw(self, epoch: int, n: int) -> np.ndarray:
        perm = _rng(self.seed, epoch).permutation(n)
        return perm.astype(np.int32) if n < 2**31 else perm

    def get(self, epoch: int, n: int) -> np.ndarray:
        ahead = self._next
        perm = ahead[2].result() if ahead is not None and ahead[:2] == (epoch, n) else self._draw(epoch, n)
        future: Future[np.ndarray] = Future()

        def draw() -> None:
            future.set_result(self._draw(epoch + 1, n))

        threading.Thread(target=draw, name="muster-data-next-permutation", daemon=True).start()
        self._next = (epoch + 1, n, future)
        return perm


def random_shuffle(seed: int, rows_per_block: int) -> Callable[[list[pa.Table], int], list[pa.Table]]:
    perms = _Permutations(seed)

    def run(blocks: list[pa.Table], epoch: int) -> list[pa.Table]:
        table = blk.concat(blocks)
        if table.num_rows == 0:
            return [table]
        return blk.split_rows(table.take(pa.array(perms.get(epoch, table.num_rows))), rows_per_block)

    return run


def randomize_block_order(seed: int) -> Callable[[list[pa.Table], int], list[pa.Table]]:
    def run(blocks: list[pa.Table], epoch: int) -> list[pa.Table]:
        return [blocks[i] for i in _rng(seed, epoch).permutation(len(blocks))]

    return run


def randomize_reads(seed: int) -> Callable[[tuple[ReadTask, ...], int], tuple[ReadTask, ...]]:
    def run(tasks: tuple[ReadTask, ...], epoch: int) -> tuple[ReadTask, ...]:
        return tuple(tasks[i] for i in _rng(seed, epoch).permutation(len(tasks)))

    return run


def repartition(n: int) -> Callable[[list[pa.Table], int], list[pa.Table]]:
    def run(blocks: list[pa.Table], _epoch: int) -> list[pa.Table]:
        table = blk.concat(blocks)
        bounds = np.linspace(0, table.num_rows, n + 1).astype(int)
        return [table.slice(int(a), int(b - a)) for a, b in zip(bounds[:-1], bounds[1:])]

    return run


def sort(keys: list[str], descending: list[bool]) -> Callable[[list[pa.Table], int], list[pa.Table]]:
    order = [(k, "descending" if d else "ascending") for k, d in zip(keys, descending)]

    def run(blocks: list[pa.Table], _epoch: int) -> list[pa.Table]:
        table = blk.concat(blocks)
        for k in keys:
            if table.num_columns and k not in table.column_names:
                raise InvalidArgumentError(f"sort(key={k!r}): no such column; the dataset has {table.column_names}.")
        return [table.sort_by(order)] if table.num_rows else [table]

    return run


def aggregate(keys: list[str], aggs: list[tuple[str, str, str]]) -> Callable[[list[pa.Table], int], list[pa.Table]]:
    """``aggs``: (column, pyarrow aggregation, output name); ``keys`` may be empty (whole dataset)."""

    def run(blocks: list[pa.Table], _epoch: int) -> list[pa.Table]:
        table = blk.concat(blocks)
        for k in keys + [c for c, _, _ in aggs if c]:
            if k not in table.column_names:
                raise InvalidArgumentError(f"groupby/aggregate: no column {k!r}; the dataset has {table.column_names}.")
        if not keys:
            out = {name: [_whole(table, col, fn)] for col, fn, name in aggs}
            return [pa.table(out)]
        spec = [(col, fn) if col else ([], "count_all") for col, fn, _ in aggs]
        grouped = table.group_by(keys, use_threads=False).aggregate(spec)  # type: ignore[arg-type]
        names = [f"{col}_{fn}" if col else "count_all" for col, fn, _ in aggs]
        grouped = grouped.select(keys + names).rename_columns(keys + [name for _, _, name in aggs])
        return [grouped.sort_by([(k, "ascending") for k in keys])]

    return run


def _whole(table: pa.Table, col: str, fn: str) -> Any:
    import pyarrow.compute as pc

    if not col:
        return table.num_rows
    return getattr(pc, fn)(table.column(col)).as_py()


def map_groups(keys: list[str], fn: Callable[[Any], Any], batch_format: str
               ) -> Callable[[list[pa.Table], int], list[pa.Table]]:
    from muster.data.plan import _guard, fn_name

    def run(blocks: list[pa.Table], _epoch: int) -> list[pa.Table]:
        table = blk.concat(blocks)
        if table.num_rows == 0:
            return []
        table = table.sort_by([(k, "ascending") for k in keys])
        key_cols = [table.column(k).to_numpy(zero_copy_only=False) for k in keys]
        change = np.zeros(table.num_rows, dtype=bool)
        change[0] = True
        for col in key_cols:
            change[1:] |= col[1:] != col[:-1]
        starts = list(np.flatnonzero(change)) + [table.num_rows]
        out = []
        for a, b in zip(starts[:-1], starts[1:]):
            part = table.slice(int(a), int(b - a))
            batch = blk.to_batch(part, batch_format)
            result = _guard("MapGroups", fn, part, lambda: fn(batch))
            out.append(blk.from_batch(result, f"map_groups({fn_name(fn)})"))
        return out

    return run
