"""How many rows a block holds: ``DataContext.target_max_block_size`` (bytes, Ray's 128 MiB by default)
caps the sources that know their row size, and Ray's deprecated ``parallelism=`` means
``override_num_blocks=``."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import muster.data as md
from muster.data.block import to_numpy
from muster.exceptions import InvalidArgumentError


@pytest.fixture
def small_blocks():
    """Blocks of at most 256 KiB: 8 rows of a (64, 64) float64 or int64 tensor."""
    ctx = md.DataContext.get_current()
    saved, ctx.target_max_block_size = getattr(ctx, "target_max_block_size", None), 256 * 1024
    yield
    ctx.target_max_block_size = saved


def test_target_max_block_size_caps_rows_per_block(small_blocks):
    """Before: the setting was taken and changed nothing; range_tensor and from_numpy made one block."""
    assert md.range_tensor(100, shape=(64, 64)).num_blocks() == 13
    assert md.from_numpy(np.zeros((100, 64, 64))).num_blocks() == 13
    assert md.from_items([{"x": np.zeros((64, 64))}] * 100).num_blocks() == 13  # 8 rows a block, as above
    # few rows: two blocks per CPU (4 here) decide, each under the cap: 20 rows in 3, 3, 3, 3, 2, 2, 2, 2 (was 3)
    assert md.from_items([{"x": np.zeros((64, 64))}] * 20).num_blocks() == 8
    assert md.range(100).num_blocks() == 8  # 8-byte rows: 13 rows a block, two blocks per CPU (was 1)
    batch = md.range_tensor(20, shape=(64, 64)).take_batch(20)
    assert batch["data"].shape == (20, 64, 64) and batch["data"][19, 5, 5] == 19

    with pytest.raises(InvalidArgumentError, match=r"target_max_block_size=0.*None"):
        md.DataContext(target_max_block_size=0)


def test_shuffle_and_sort_blocks_respect_the_byte_cap(small_blocks):
    """Before: a shuffle dealt 65,536 rows to a block whatever their size (one 3 MiB block here; a
    2 GiB one for 64K image rows), and a sort gave back the whole dataset as one block."""
    shuffled = list(md.range_tensor(100, shape=(64, 64)).random_shuffle(seed=1)._execute())
    sizes = [b.num_rows for b in shuffled]
    # piles are drawn around their mean (here 100 / 16 rows), so some come out past the cap: they are cut
    assert sum(sizes) == 100 and len(sizes) >= 13 and max(sizes) <= 8, sizes
    assert max(b.nbytes for b in shuffled) <= 256 * 1024
    ids = np.concatenate([to_numpy(b)["data"][:, 0, 0] for b in shuffled])
    assert sorted(ids) == list(range(100)) and list(ids) != sorted(ids)
    ctx = md.DataContext.get_current()
    saved, ctx.target_block_rows = ctx.target_block_rows, 40
    try:
        ordered = md.range(100, override_num_blocks=3).sort("id", descending=True)
        assert [b.num_rows for b in ordered._execute()] == [40, 40, 20]
        assert [r["id"] for r in ordered.take_all()] == list(range(99, -1, -1))
    finally:
        ctx.target_block_rows = saved


def test_take_batch_of_big_tensor_rows_stays_small():
    """Before: 64K-row blocks of 32 KiB rows (2 GiB each) and a byte estimate of 8 bytes a row, so
    several were made at once: more than 5 GiB for five rows. Now a block is at most 128 MiB and the
    in-flight budget (256 MiB) sees its true size."""
    tracemalloc.start()  # numpy's buffers are traced (the range's arrays are numpy's)
    try:
        batch = md.range_tensor(409600, shape=(64, 64)).take_batch(5)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert batch["data"].shape == (5, 64, 64) and batch["data"][4, 0, 0] == 4
    assert peak < 600 * 1024 * 1024, f"peak {peak / 2**20:.0f} MiB"
    assert md.DataContext().target_max_block_size == 128 * 1024 * 1024  # Ray's default


def test_parallelism_means_override_num_blocks_as_in_ray():
    """Ray's deprecated parallelism= (still taken by ray.data.range/range_tensor/from_items, with a
    warning): before, a TypeError."""
    with pytest.warns(DeprecationWarning, match=r"range\(parallelism=3\).*override_num_blocks=3"):
        assert md.range(10, parallelism=3).num_blocks() == 3
    with pytest.warns(DeprecationWarning, match="override_num_blocks=2"):
        assert md.range_tensor(8, shape=(2,), parallelism=2).num_blocks() == 2
    with pytest.warns(DeprecationWarning, match=r"from_items\(parallelism=5\)"):
        ds = md.from_items(list(range(10)), parallelism=5)
    assert ds.num_blocks() == 5 and [r["item"] for r in ds.take_all()] == list(range(10))
