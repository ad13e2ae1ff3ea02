"""Ray 2.60's DataContext knobs (read as Ray's defaults), ExecutionResources' arithmetic, and write_csv's
refusal of tensor columns."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

import muster.data as md
from muster.data.context import RAY_ONLY_SETTINGS, ShuffleStrategy
from muster.exceptions import InvalidArgumentError


def test_ray_knobs_read_as_rays_defaults_and_restore():
    ctx = md.DataContext()
    # Ray 2.60's defaults, as a fresh ray.data.DataContext() reads them
    assert (ctx.max_errored_blocks, ctx.target_min_block_size, ctx.read_op_min_num_blocks) == (0, 1024 * 1024, 200)
    assert ctx.enable_tensor_extension_casting and ctx.print_on_execution_start and ctx.enable_operator_progress_bars
    assert ctx.shuffle_strategy is ShuffleStrategy.SHUFFLE_V2
    assert ctx.autoscaling_config.actor_pool_max_upscaling_delta is None
    readable = RAY_ONLY_SETTINGS - {"eager_free", "log_internal_stack_trace_to_stdout", "target_shuffle_max_block_size"}
    assert len(readable) > 90 and all(hasattr(ctx, name) for name in readable)
    old = ctx.max_errored_blocks  # the save-and-restore idiom
    ctx.max_errored_blocks = 3
    assert ctx.max_errored_blocks == 3
    ctx.max_errored_blocks = old
    assert ctx.max_errored_blocks == 0
    ctx.retried_io_errors.append("my error")  # a list default is this context's own
    assert "my error" in ctx.retried_io_errors and "my error" not in md.DataContext().retried_io_errors
    ctx.shuffle_strategy = "hash_shuffle"  # as Ray: the name becomes the strategy
    assert ctx.shuffle_strategy is ShuffleStrategy.HASH_SHUFFLE
    with pytest.raises(InvalidArgumentError, match="'bogus'.*'hash_shuffle'"):
        ctx.shuffle_strategy = "bogus"
    for misspelt in ("max_errored_block", "target_min_blocksize"):  # still refused, reading or setting
        with pytest.raises(AttributeError, match=f"no setting {misspelt!r}.*RAY_ONLY_SETTINGS"):
            setattr(ctx, misspelt, 1)
        with pytest.raises(AttributeError, match=f"no setting {misspelt!r}"):
            getattr(ctx, misspelt)


def test_context_copy_and_set_current():
    ctx = md.DataContext(target_block_rows=7)
    ctx.max_errored_blocks, ctx.preserve_order = 2, False
    ctx.set_config("k", [1])
    twin = ctx.copy()
    twin.max_errored_blocks, twin.target_block_rows = 5, 9
    twin.get_config("k").append(2)
    assert (ctx.max_errored_blocks, ctx.target_block_rows, ctx.get_config("k")) == (2, 7, [1])
    assert (twin.max_errored_blocks, twin.target_block_rows, twin.preserve_order) == (5, 9, False)
    current = md.DataContext.get_current()
    previous = md.DataContext._set_current(twin)
    try:
        assert previous is current and md.DataContext.get_current() is twin
    finally:
        md.DataContext._set_current(previous)
    with md.DataContext.current(ctx):
        assert md.DataContext.get_current() is ctx
    assert md.DataContext.get_current() is current


def test_execution_resources_arithmetic():
    R = md.ExecutionResources
    a, b = R(cpu=4, gpu=2, object_store_memory=1000, memory=10), R(cpu=1, gpu=0.5, object_store_memory=300)
    assert a.add(b) == R(cpu=5, gpu=2.5, object_store_memory=1300, memory=10)
    assert b.subtract(a) == R(cpu=-3, gpu=-1.5, object_store_memory=-700, memory=-10)
    assert not b.subtract(a).is_non_negative() and a.subtract(b).is_non_negative() and R.zero().is_zero()
    assert a.min(b) == R(cpu=1, gpu=0.5, object_store_memory=300) and a.max(R.inf()) == R.inf()
    assert b.satisfies_limit(a) and not a.satisfies_limit(b) and a.satisfies_limit(R.inf())
    assert R(cpu=1, object_store_memory=5).satisfies_limit(R.for_limits(object_store_memory=1),
                                                           ignore_object_store_memory=True)
    assert a.scale(0.5) == R(cpu=2, gpu=1, object_store_memory=500, memory=5) and R.inf().scale(0).is_zero()
    assert a.floordiv(b) == R(cpu=4, gpu=4, object_store_memory=3, memory=math.inf)
    assert R.combine_sum([a, b]) == a.add(b) and R.combine_sum([]).is_zero() and R.combine([], max) is None
    assert R(object_store_memory=1536).object_store_memory_str() == "1.5KiB"
    assert R(memory=3 * 1024 ** 3).memory_str() == "3.0GiB" and R.inf().memory_str() == "inf"
    assert repr(a) == "ExecutionResources(cpu=4, gpu=2, object_store_memory=1000.0B, memory=10.0B)"


def test_write_csv_refuses_tensor_columns_before_writing(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(InvalidArgumentError, match=r"'data'.*write_parquet.*write_numpy"):
        md.range_tensor(4, shape=(2,)).write_csv(str(out))
    assert not out.exists()
    made = md.range(4).map_batches(lambda b: {"id": b["id"], "img": np.zeros((len(b["id"]), 2, 2))})
    out.mkdir()
    (out / "old.csv").write_text("id\n1\n")
    with pytest.raises(InvalidArgumentError, match=r"'img'.*write_json"):  # schema known only once a block is made
        made.write_csv(str(out), mode="overwrite")
    assert os.listdir(out) == ["old.csv"]
    assert md.read_csv(made.drop_columns(["img"]).write_csv(str(tmp_path / "ok"))).count() == 4
