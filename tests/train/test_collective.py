"""``muster.train.collective`` (Ray Train V2's ``ray.train.collective``): barrier and broadcast_from_rank_zero."""

from __future__ import annotations

import os
import time

import pytest

import muster.train as train
from muster.exceptions import TrainingFailedError


def _loop(config):
    from muster.train.collective import barrier, broadcast_from_rank_zero

    rank = train.get_context().get_world_rank()
    at_barrier = os.path.join(config["dir"], "rank0_at_barrier")
    # rank 1 comes 1 s after rank 0 reached the barrier: a plain 1 s from rank 1's own start let a rank 0 that a
    # loaded box started 0.2 s later wait less than the 0.8 s asserted
    if rank == 1:
        deadline = time.monotonic() + 60
        while not os.path.exists(at_barrier) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(1.0)
    start = time.monotonic()
    if rank == 0:
        open(at_barrier, "w").close()
    barrier()
    waited = time.monotonic() - start
    first = broadcast_from_rank_zero({"run_id": "abc"} if rank == 0 else None)
    second = broadcast_from_rank_zero(rank * 10 + 7)  # other ranks' values are ignored
    train.report({"waited": waited, "first": first, "second": second})


def test_barrier_waits_and_broadcast_sends_rank_zeros_value(fit, tmp_path):
    result = fit(_loop, config={"dir": str(tmp_path)})
    rows = {r["_rank"]: r for r in result.all_reports}
    assert rows[0]["waited"] >= 0.8  # rank 0 waited for the sleeping rank 1
    assert [rows[r]["first"] for r in (0, 1)] == [{"run_id": "abc"}] * 2
    assert [rows[r]["second"] for r in (0, 1)] == [7, 7]


def _mismatched_loop():
    from muster.train import collective

    if train.get_context().get_world_rank() == 0:
        collective.barrier()
    else:
        collective.broadcast_from_rank_zero(1)


def test_calls_out_of_order_fail_naming_both(fit):
    with pytest.raises(TrainingFailedError, match=r"broadcast_from_rank_zero\(\) on rank 1 but barrier\(\) on rank 0"):
        fit(_mismatched_loop)


def test_outside_a_worker_says_where_it_works():
    from muster.train.collective import barrier

    with pytest.raises(RuntimeError, match="only inside train_loop_per_worker"):
        barrier()
