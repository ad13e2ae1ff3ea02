"""Small in-memory sources cut into as many blocks as Ray 2.60's (two per CPU for ``range``, one per item up
to 200 for ``from_items``), so a slow map over a few rows keeps every CPU busy. Before, each was one block:
``from_items(8 rows).map_batches(Model, concurrency=2)`` ran on one actor and ``range(8).map(slow)`` in one
task, leaving the other CPU idle."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pandas as pd

import muster
import muster.data as md


class SlowModel:
    def __call__(self, batch):
        time.sleep(0.05)
        return {"x": batch["x"], "pid": [os.getpid()] * len(batch["x"])}


def test_small_sources_make_rays_block_counts():
    cpus = int(muster.cluster_resources()["CPU"])
    assert md.range(1000).materialize().num_blocks() == 2 * cpus  # Ray: 2 per CPU under 1 MiB per block
    rows = max(1, 10 // (2 * cpus))  # Ray's rows per block of range(10): 2 on 2 CPUs, 1 on 4
    assert md.range(10).num_blocks() == -(-10 // rows)
    assert md.range_tensor(1000, shape=(2,)).num_blocks() == 2 * cpus
    assert md.from_items([{"x": i} for i in range(8)]).materialize().num_blocks() == 8  # Ray: one per item
    assert md.from_items([{"x": i} for i in range(200)]).num_blocks() == 200  # ...up to 200
    assert md.from_items([{"x": i} for i in range(1000)]).num_blocks() == 2 * cpus  # (Ray: 200) muster's floor
    split = md.from_items([{"x": i} for i in range(10)], override_num_blocks=4).materialize()
    assert [len(b["x"]) for b in split.iter_batches(batch_size=None)] == [3, 3, 2, 2]  # Ray's (was 3, 3, 3, 1)
    assert md.from_pandas(pd.DataFrame({"a": range(10)})).num_blocks() == 1  # one per frame or array, as Ray's
    assert md.from_numpy(np.arange(10)).num_blocks() == 1
    assert md.range(1_000_000).num_blocks() == 16  # large: muster's 65,536-row blocks, unchanged


def test_a_slow_class_over_eight_rows_runs_on_both_actors():
    rows = md.from_items([{"x": i} for i in range(8)]).map_batches(SlowModel, batch_size=1, concurrency=2).take_all()
    assert [r["x"] for r in rows] == list(range(8))
    assert len({r["pid"] for r in rows}) == 2  # before: one block, so one actor mapped all 8 rows


def test_a_slow_function_over_eight_rows_runs_in_several_tasks_at_once(threads_only):
    other_started = threading.Event()
    waited = []

    def slow(row):
        if row["id"] == 0:  # returns once another row runs alongside it (before: one task, rows in turn)
            waited.append(other_started.wait(timeout=2))
        else:
            other_started.set()
        return row

    assert sorted(r["id"] for r in md.range(8).map(slow).take_all()) == list(range(8))
    assert waited == [True]
