"""The live per-operator view of a pass in the driver's terminal (plain lines when not a TTY), and the
counters behind it: rows in/out, rows/s, bytes in flight against the budget, time blocked on backpressure."""

from __future__ import annotations

import time

import pytest

import muster.data as md


@pytest.fixture
def ctx():
    c = md.DataContext.get_current()
    saved = (c.progress_every_s, c.max_bytes_in_flight, c.enable_progress_bars)
    yield c
    c.progress_every_s, c.max_bytes_in_flight, c.enable_progress_bars = saved


def slow(batch):
    time.sleep(0.03)
    return {"id": batch["id"], "sq": batch["id"] ** 2}


def test_plain_lines_per_operator_while_a_pass_runs(ctx, capsys, threads_only):
    ctx.progress_every_s = 0.2
    rows = md.range(600, override_num_blocks=30).map_batches(slow, batch_size=None).take_all()
    assert len(rows) == 600
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("[muster.data] ")]
    assert any(line.startswith("[muster.data] MapBatches(slow): ") for line in lines), out
    assert any(line.startswith("[muster.data] ReadRange: ") for line in lines), out
    line = next(line for line in lines if "MapBatches(slow)" in line)
    assert " rows/s, " in line and " MiB in flight, blocked " in line and " in -> " in line
    assert "/256.0 MiB" in line  # the budget


def test_no_lines_for_a_short_pass_or_when_turned_off(ctx, capsys, threads_only):
    ctx.progress_every_s = 5.0
    md.range(100).map_batches(slow).take_all()
    ctx.progress_every_s, ctx.enable_progress_bars = 0.1, False
    md.range(300, override_num_blocks=10).map_batches(slow, batch_size=None).take_all()
    assert "[muster.data]" not in capsys.readouterr().out


def test_counters_show_rows_in_out_and_backpressure(ctx, threads_only):
    ctx.max_bytes_in_flight = 1000  # less than one block (8 kB): the slow consumer below holds the pipeline back
    ds = md.range(20000, override_num_blocks=20).filter(lambda r: r["id"] % 2 == 0)
    for _ in ds.iter_batches(batch_size=1000, prefetch_batches=0):
        time.sleep(0.01)
    ops = {op.op: op for op in ds._stats.snapshot()}
    filt = next(v for k, v in ops.items() if k.startswith("Filter("))
    assert (filt.rows_in, filt.rows_out) == (20000, 10000)
    assert ops["ReadRange"].rows_out == 20000 and filt.rows_per_s > 0
    assert filt.blocked_s > 0  # ready tasks were held back by the budget
    assert filt.budget_bytes == 1000 and filt.bytes_in_flight == 0 and filt.done  # the pass ended
    assert "blocked on backpressure" in ds.stats()


def test_stats_keep_operators_of_one_name_apart(tmp_path):
    """Two read_parquet inputs (a join's, a union's, one dataset twice) and two same-named maps each get a line,
    numbered in plan order as Ray's operator ids are. Before, both reads' counters were added up on one line."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": [1, 2, 3]}), tmp_path / "left.parquet")
    pq.write_table(pa.table({"id": [2, 3], "b": ["x", "y"]}), tmp_path / "right.parquet")
    left, right = md.read_parquet(str(tmp_path / "left.parquet")), md.read_parquet(str(tmp_path / "right.parquet"))
    joined = left.join(right, "inner", 1, on=("id",))
    assert len(joined.take_all()) == 2
    assert _headers(joined) == ["Operator 1 ReadParquet_1", "Operator 2 ReadParquet_2", "Operator 3 Join"]
    assert _per_operator(joined) == ["ReadParquet_1: 3 rows", "ReadParquet_2: 2 rows", "Join: 2 rows"], joined.stats()
    same = left.map_batches(lambda b: b).union(left.map_batches(lambda b: b))
    assert same.count() == 6
    assert _headers(same) == ["Operator 1 ReadParquet_1->MapBatches(<lambda>)_1",
                              "Operator 2 ReadParquet_2->MapBatches(<lambda>)_2"], same.stats()
    assert _per_operator(same) == ["ReadParquet_1: 3 rows", "MapBatches(<lambda>)_1: 3 rows",
                                   "ReadParquet_2: 3 rows", "MapBatches(<lambda>)_2: 3 rows"], same.stats()
    one = md.range(4).map_batches(lambda b: b)
    assert one.count() == 4 and _headers(one) == ["Operator 1 ReadRange->MapBatches(<lambda>)"]
    assert _per_operator(one) == ["ReadRange: 4 rows", "MapBatches(<lambda>): 4 rows"]


def _headers(ds):
    """The ``Operator N name`` of each operator block of ``ds.stats()`` (Ray's layout)."""
    return [ln.split(":")[0] for ln in ds.stats().splitlines() if ln.startswith("Operator ")]


def _per_operator(ds):
    """muster's per-operator lines of ``ds.stats()`` (fused operators each on its own), up to their row count."""
    lines = ds.stats().split("* Per operator", 1)[1].splitlines()[1:]
    return [ln.strip()[2:].split(" in ")[0] for ln in lines if ln.startswith("\t* ")]
