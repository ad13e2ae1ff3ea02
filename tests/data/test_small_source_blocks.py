"""A small in-memory source (``from_items``, ``range``, ``range_tensor``) is cut into two blocks per CPU of the
engine (fewer when it has fewer rows: two rows a block at least), so a slow map over a few rows keeps every CPU
busy, as Ray's does (Ray cuts them into up to 200 blocks; two per CPU costs small pipelines less). Before, each
was one block: ``from_items(8 rows).map_batches(Model, concurrency=2)`` ran on one actor and
``range(8).map(slow)`` in one task, leaving the other CPUs idle."""

from __future__ import annotations

import os
import threading
import time

import muster
import muster.data as md


class SlowModel:
    def __call__(self, batch):
        time.sleep(0.05)
        return {"x": batch["x"], "pid": [os.getpid()] * len(batch["x"])}


def test_small_sources_make_two_blocks_per_cpu_and_large_ones_keep_their_row_cap():
    assert muster.cluster_resources()["CPU"] == 4  # the session engine's: 8 blocks at most
    assert md.from_items([{"x": i} for i in range(30)]).num_blocks() == 8
    assert md.from_items([{"x": i} for i in range(4)]).num_blocks() == 2  # fewer rows: two rows a block
    assert md.from_items([{"x": i} for i in range(3)]).num_blocks() == 1  # never a one-row block
    assert md.range(8).num_blocks() == 4
    assert md.range(100).num_blocks() == 8  # 13 rows a block, the last 9
    assert md.range(10).num_blocks() == 5  # 2 rows a block (10 / 8, rounded up)
    assert md.range_tensor(1000, shape=(2,)).num_blocks() == 8
    assert md.range(1_000_000).num_blocks() == 16  # large: muster's 65,536-row blocks, as before
    sizes = [len(b["x"]) for b in md.from_items([{"x": i} for i in range(10)]).iter_batches(batch_size=None)]
    assert sizes == [2, 2, 2, 2, 2]
    sizes = [len(b["x"]) for b in md.from_items([{"x": i} for i in range(20)]).iter_batches(batch_size=None)]
    assert sizes == [3, 3, 3, 3, 2, 2, 2, 2]  # even, the first ones larger (as Ray's from_items)
    rows = md.from_items([{"x": i} for i in range(30)]).map(lambda r: r).take_all()
    assert [r["x"] for r in rows] == list(range(30))  # muster's engine keeps the order of rows


def test_a_slow_class_over_eight_rows_runs_on_both_actors():
    rows = md.from_items([{"x": i} for i in range(8)]).map_batches(SlowModel, batch_size=1, concurrency=2).take_all()
    assert [r["x"] for r in rows] == list(range(8))
    assert len({r["pid"] for r in rows}) == 2  # before: one block, so one actor mapped all 8 rows


def test_two_rows_of_a_slow_map_over_eight_rows_run_at_once(threads_only):
    other_started = threading.Event()
    waited = []

    def slow(row):
        if row["id"] == 0:  # returns once another row runs alongside it (before: one task, rows in turn)
            waited.append(other_started.wait(timeout=2))
        else:
            other_started.set()
        return row

    assert [r["id"] for r in md.range(8).map(slow).take_all()] == list(range(8))
    assert waited == [True]


def test_a_slow_map_runs_in_several_worker_processes_at_once():
    """The first job goes out alone for a few milliseconds to tell cheap jobs (run on this process's threads)
    from slow ones; slow ones then fan out to the idle workers."""
    def slow(row):
        start = time.time()
        time.sleep(0.3)
        return {"id": row["id"], "pid": os.getpid(), "start": start, "end": time.time()}

    rows = md.range(8).map(slow).take_all()
    assert [r["id"] for r in rows] == list(range(8))
    workers = [r for r in rows if r["pid"] != os.getpid()]
    overlapping = {(a["pid"], b["pid"]) for a in workers for b in workers
                   if a["pid"] != b["pid"] and a["start"] < b["end"] and b["start"] < a["end"]}
    assert overlapping  # two worker processes mapped rows at the same time (before: one task, rows in turn)


def test_a_cheap_map_over_a_small_source_runs_its_blocks_here_not_a_round_trip_each():
    """A worker's round trip (about a millisecond) costs more than a cheap map over a tiny block: once the first
    block is back within a few milliseconds, the other blocks map on this process's threads, so the 8 blocks
    of ``from_items`` of 30 rows cost about what one did."""
    items = [{"x": i} for i in range(30)]
    sent_out = []
    for _ in range(3):  # a loaded machine may be slow to answer once: then all go out, as before
        rows = md.from_items(items).map(lambda r: {"x": r["x"], "pid": os.getpid()}).take_all()
        assert [r["x"] for r in rows] == list(range(30))
        sent_out.append(sum(r["pid"] != os.getpid() for r in rows))  # blocks of 4 rows, then two of 3
        if sent_out[-1] <= 4:
            break
    assert min(sent_out) <= 4, sent_out  # only the first block went to a worker (before: one per idle CPU)
