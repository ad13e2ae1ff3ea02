"""One behaviour, two engines: every test here runs on the embedded engine and on a Ray cluster.

TorchTrainer (reports, checkpoints, a worker SIGKILLed mid-run and resumed
from the checkpoint, ranks out of step, an elastic gang that grows) and Tune
must look the same to user code whichever engine runs them.
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time

import pytest
import torch

import muster
import muster.train as train
from muster.train import Checkpoint, FailureConfig, RunConfig, ScalingConfig
from muster.train.torch import TorchTrainer


# -- training -----------------------------------------------------------------------
def training_loop(config):
    """Each rank reports 3 epochs with a checkpoint; rank 1 SIGKILLs itself once after epoch 0."""
    import torch.distributed as dist

    ctx = train.get_context()
    rank = ctx.get_world_rank()
    start = 0
    ckpt = train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as folder:
            start = torch.load(os.path.join(folder, f"rank_{rank}.pt"))["epoch"] + 1
    for epoch in range(start, 3):
        t = torch.ones(1) * (rank + 1)
        dist.all_reduce(t)  # a real collective across the gang
        with tempfile.TemporaryDirectory() as tmp:
            torch.save({"epoch": epoch}, os.path.join(tmp, f"rank_{rank}.pt"))
            here = muster.get_runtime_context()  # the worker actor's ids: on Ray, Ray's own
            train.report({"epoch": epoch, "sum": t.item(), "attempt": ctx.get_attempt(),
                          "ids": (here.get_actor_id(), here.get_task_id(), here.get_worker_id()),
                          "job": here.get_job_id(),
                          "resources": here.get_assigned_resources()},
                         checkpoint=Checkpoint.from_directory(tmp))
        dist.barrier()  # every rank's report returned: this checkpoint must survive
        if config.get("marker") and rank == 1 and epoch == 0 and not os.path.exists(config["marker"]):
            open(config["marker"], "w").close()
            os.kill(os.getpid(), signal.SIGKILL)


def test_trainer_reports_and_checkpoints(engine, storage):
    result = TorchTrainer(
        training_loop, train_loop_config={},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=storage, name=f"conf_{engine}", verbose=0),
    ).fit()
    assert result.error is None
    assert list(result.metrics_dataframe["epoch"]) == [0, 1, 2]
    assert all(r["sum"] == 3.0 for r in result.all_reports)
    # each worker is an actor, as Ray's Train workers are: Ray's ids on Ray (an ActorID is 16 bytes, a TaskID
    # 24, a WorkerID 28), muster's on the embedded engine; each rank's the same through the run
    ids = {tuple(r["ids"]) for r in result.all_reports}
    assert len(ids) == 2 and all(len({one[i] for one in ids}) == 2 for i in range(3)), ids
    assert all(r["resources"] == {"CPU": 1.0} for r in result.all_reports)
    job = muster.get_runtime_context().get_job_id()  # the driver's: its workers run for the same job
    assert {r["job"] for r in result.all_reports} == {job}
    for actor, task, worker in ids:
        if engine == "ray":
            assert (len(actor), len(task), len(worker)) == (32, 48, 56)
            assert actor.endswith(job)  # Ray's ActorID ends with its job's id
        else:
            assert task.startswith(actor[:8]) and len(actor) == 24 and actor.startswith(job)
    with result.checkpoint.as_directory() as folder:
        assert {"rank_0.pt", "rank_1.pt"} <= set(os.listdir(folder))
        assert torch.load(os.path.join(folder, "rank_1.pt")) == {"epoch": 2}


# Two gangs: on Ray each attempt starts fresh Ray worker processes, which import torch (and this module)
# as they unpickle the training function. On a loaded 2-core machine that took 154 s in all (60 s to the
# first report, 90 s more to the retry's), where 120 s ran out mid-import; alone, it also pays the cluster's start
@pytest.mark.timeout(300)
def test_trainer_resumes_after_a_worker_is_sigkilled(engine, storage, tmp_path):
    marker = str(tmp_path / "killed")
    result = TorchTrainer(
        training_loop, train_loop_config={"marker": marker},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=storage, name=f"kill_{engine}", verbose=0,
                             failure_config=FailureConfig(max_failures=1)),
    ).fit()
    assert os.path.exists(marker)  # rank 1 really died
    assert result.error is None
    first = sorted((r["_rank"], r["epoch"]) for r in result.all_reports if r["_attempt"] == 0)
    second = sorted((r["_rank"], r["epoch"]) for r in result.all_reports if r["_attempt"] == 1)
    assert first == [(0, 0), (1, 0)]  # epoch 0's reports survived the kill ...
    assert second == [(0, 1), (0, 2), (1, 1), (1, 2)]  # ... and the retry went on from its checkpoint
    assert result.checkpoint.path.endswith("checkpoint_000003")


def out_of_step_loop(config):
    """Round 1 in step; then rank 1 reports rounds 2 and 3 while rank 0 dies before its round 2."""
    import torch.distributed as dist

    ctx = train.get_context()
    rank, ahead = ctx.get_world_rank(), os.path.join(config["dir"], "rank1_ahead")
    if ctx.get_attempt() > 0:
        ckpt = train.get_checkpoint()
        with open(os.path.join(config["dir"], f"resumed_{rank}"), "w") as f:
            f.write(" ".join([os.path.basename(ckpt.path), *sorted(os.listdir(ckpt.path))]))
        return
    for rnd in range(3):
        if rank == 0 and rnd == 1:
            for _ in range(6000):  # bounded wait: rank 1's reports of rounds 2 and 3 have returned
                if os.path.exists(ahead):
                    break
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGKILL)
        with tempfile.TemporaryDirectory() as tmp:
            torch.save({"round": rnd}, os.path.join(tmp, f"part_{rank}.pt"))
            train.report({"round": rnd}, checkpoint=Checkpoint.from_directory(tmp))
        if rnd == 0:
            dist.barrier()
    open(ahead, "w").close()
    time.sleep(120)  # stopped with the gang


def test_out_of_step_ranks_resume_from_the_last_whole_checkpoint(engine, storage, tmp_path):
    result = TorchTrainer(
        out_of_step_loop, train_loop_config={"dir": str(tmp_path)},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=storage, name=f"step_{engine}", verbose=0,
                             failure_config=FailureConfig(max_failures=1)),
    ).fit()
    for rank in (0, 1):
        resumed = (tmp_path / f"resumed_{rank}").read_text().split()
        assert resumed[0] == "checkpoint_000001"
        assert {"part_0.pt", "part_1.pt"} <= set(resumed[1:])  # whole: both ranks' files
    assert sorted(n for n in os.listdir(result.path) if n.startswith("checkpoint_")) == ["checkpoint_000001"]


# -- Tune -----------------------------------------------------------------------------
def quadratic(config):
    from muster import tune

    for step in range(3):
        tune.report({"score": (config["x"] - 2) ** 2 + step, "step": step})


def test_tuner_grid_over_a_function(engine, storage):
    from muster import tune

    grid = tune.Tuner(
        quadratic, param_space={"x": tune.grid_search([0, 1, 2, 3])},
        tune_config=tune.TuneConfig(metric="score", mode="min"),
        run_config=tune.RunConfig(storage_path=storage, name=f"grid_{engine}", verbose=0),
    ).fit()
    assert len(grid) == 4 and grid.num_errors == 0
    best = grid.get_best_result(scope="last")
    assert best.config["x"] == 2 and best.metrics["score"] == 2


def ddp_trial(config):
    import torch.distributed as dist

    t = torch.ones(1) * config["lr"]
    dist.all_reduce(t)
    train.report({"loss": abs(t.item() - 0.2), "world": dist.get_world_size()})


def test_tuner_over_a_two_worker_trainer(engine, storage):
    from muster import tune

    trainer = TorchTrainer(ddp_trial, scaling_config=ScalingConfig(num_workers=2),
                           run_config=RunConfig(verbose=0))
    grid = tune.Tuner(
        trainer, param_space={"train_loop_config": {"lr": tune.grid_search([0.05, 0.1])}},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(storage_path=storage, name=f"tune_trainer_{engine}", verbose=0),
    ).fit()
    assert len(grid) == 2 and grid.num_errors == 0, grid.errors
    best = grid.get_best_result()
    assert best.config["train_loop_config"]["lr"] == 0.1 and best.metrics["world"] == 2
    assert best.metrics["loss"] == pytest.approx(0.0, abs=1e-6)


# -- elastic -------------------------------------------------------------------------
@muster.remote(num_cpus=1)
class Blocker:
    def ready(self):
        return True


def test_elastic_run_starts_small_and_grows_when_cpus_free_up(engine, storage):
    """(min=2, max=4) with only 2 CPUs free: it starts with 2, and grows to 4 once they free up,
    carrying the data position across the change of world size."""
    from _elastic import check_data_position, counts_by_attempt, elastic_loop

    blockers = [Blocker.remote() for _ in range(int(muster.cluster_resources()["CPU"]) - 2)]
    muster.get([b.ready.remote() for b in blockers])
    out: dict = {}
    runner = threading.Thread(target=lambda: out.update(result=TorchTrainer(
        elastic_loop, train_loop_config={"step_s": 0.05},
        scaling_config=ScalingConfig(num_workers=(2, 4)),
        run_config=RunConfig(storage_path=storage, name=f"grow_{engine}", verbose=0),
    ).fit()))
    runner.start()
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(storage, f"grow_{engine}", "checkpoint_000002")):
            assert time.monotonic() < deadline and runner.is_alive(), "the 2-worker gang never checkpointed"
            time.sleep(0.05)
    finally:
        for b in blockers:
            muster.kill(b)
    runner.join(120)
    assert not runner.is_alive()
    reports = out["result"].all_reports
    worlds = list(counts_by_attempt(reports).values())
    assert worlds[0] == 2 and worlds[-1] == 4, worlds
    check_data_position(reports)
