"""Ray Data 2.60's user guides (Working with PyTorch, End-to-end: Offline Batch Inference, Iterating over Data,
Saving Data), ported by ``import muster as ray``: what each one showed differently from Ray before its fix.
The expected values are what Ray 2.60 gave for the same calls."""

from __future__ import annotations

import os

import numpy as np
import pytest

import muster.data as md
from muster.data import DataContext


class _Scale:
    """The guide's stateful predictor, reduced: built once per actor, maps a batch."""

    def __init__(self, k: float):
        self.k = k

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"id": batch["id"], "score": batch["id"] * self.k}


def test_map_batches_gathers_a_tasks_batches_into_one_block_as_rays_tasks_do(tmp_path, threads_only):
    """A map task's batches come out as one block (up to target_max_block_size bytes), as Ray's map tasks
    buffer them: ``range(10, override_num_blocks=1).map_batches(f, batch_size=2)`` is one block of 10 rows
    and writes one file (Ray 2.60: 1 block, 1 file; over 2 and 5 input blocks with batch_size 3 and 4, 2 and 3
    blocks). Before, each batch was a block of its own: 5 blocks, so 5 files of 2 rows."""
    def same(batch):
        return batch

    def sizes(ds):
        return [b.num_rows for b in ds.materialize()._execute()]

    assert sizes(md.range(10, override_num_blocks=1).map_batches(same, batch_size=2)) == [10]
    assert sizes(md.range(10, override_num_blocks=2).map_batches(same, batch_size=3)) == [5, 5]
    assert sizes(md.range(10, override_num_blocks=5).map_batches(same, batch_size=4)) == [4, 4, 2]
    out = tmp_path / "one"
    md.range(10, override_num_blocks=1).map_batches(same, batch_size=2).write_parquet(str(out))
    assert len(os.listdir(out)) == 1 and md.read_parquet(str(out)).count() == 10
    # DataContext.target_max_block_size still cuts (Ray 2.60 gave [5, 5] here; muster gathers batches of 2
    # int64 rows, 16 bytes each, until they pass 40 bytes)
    ctx = DataContext.get_current()
    saved, ctx.target_max_block_size = ctx.target_max_block_size, 40
    try:
        assert sizes(md.range(10, override_num_blocks=1).map_batches(same, batch_size=2)) == [6, 4]
    finally:
        ctx.target_max_block_size = saved


def test_batch_inference_on_an_actor_pool_writes_a_file_per_input_block(tmp_path):
    """batch_inference.rst: a predictor class on ``concurrency=2`` actors in batches of 2, then
    ``drop_columns(...).write_parquet``: over a 5-row ``from_numpy`` Ray 2.60 wrote one file. Before, three
    (one per batch)."""
    ds = md.from_numpy(np.arange(5)).rename_columns({"data": "id"})
    predictions = ds.map_batches(_Scale, concurrency=2, batch_size=2, fn_constructor_kwargs={"k": 0.5})
    out = tmp_path / "predictions"
    predictions.drop_columns(["id"]).write_parquet(str(out))
    assert len(os.listdir(out)) == 1
    assert sorted(r["score"] for r in md.read_parquet(str(out)).take_all()) == [0.0, 0.5, 1.0, 1.5, 2.0]


def test_num_rows_per_file_is_rays_deprecated_name_warned_and_not_with_min_rows(tmp_path):
    """saving-data.rst's older ``num_rows_per_file=``: Ray 2.60 takes it as ``min_rows_per_file`` with a
    DeprecationWarning, and refuses both together (ValueError). Before, taken silently, and with both given
    ``min_rows_per_file`` won unnoticed."""
    ds = md.range(10, override_num_blocks=5)
    with pytest.warns(DeprecationWarning, match="min_rows_per_file"):
        files = ds.write_csv(str(tmp_path / "csv"), num_rows_per_file=4)
    assert len(files) == 3  # blocks of 2 rows gathered to 4, 4 and 2, as min_rows_per_file=4 does
    with pytest.raises(ValueError, match=r"num_rows_per_file=4, min_rows_per_file=3\): pass only min_rows"):
        ds.write_parquet(str(tmp_path / "pq"), num_rows_per_file=4, min_rows_per_file=3)
