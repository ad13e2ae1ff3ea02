"""Retries from the latest checkpoint, failure budgets, and rerunning or restoring a run."""

from __future__ import annotations

import json
import os
import signal
import tempfile

import pytest
import torch

import muster.train as train
from muster.train import (
    Checkpoint,
    FailureConfig,
    Result,
    RunAlreadyFinishedError,
    RunConfig,
    ScalingConfig,
    TrainingFailedError,
)
from muster.train.torch import TorchTrainer


def resumable_loop(config):
    """Three epochs; each rank saves its shard. Crashes once (per marker file) after epoch 1 is safe."""
    import torch.distributed as dist

    ctx = train.get_context()
    rank = ctx.get_world_rank()
    start, resumed_from = 0, None
    ckpt = train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as folder:
            state = torch.load(os.path.join(folder, f"shard_{rank}.pt"))
        start = resumed_from = state["epoch"] + 1
    for epoch in range(start, config["epochs"]):
        dist.barrier()
        with tempfile.TemporaryDirectory() as tmp:
            torch.save({"epoch": epoch, "rank": rank}, os.path.join(tmp, f"shard_{rank}.pt"))
            train.report(
                {"epoch": epoch, "attempt": ctx.get_attempt(), "resumed_from": resumed_from},
                checkpoint=Checkpoint.from_directory(tmp),
            )
        dist.barrier()  # every rank's report of this epoch has returned: its checkpoint must survive
        crash = config.get("crash")
        if config.get("always") and rank == 1:
            raise RuntimeError(f"injected failure at epoch {epoch}, attempt {ctx.get_attempt()}")
        if crash and rank == 1 and epoch == config["crash_after"] and not os.path.exists(config["marker"]):
            open(config["marker"], "w").close()
            if crash == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"injected failure at epoch {epoch}")


class Hooks(train.UserCallback):
    """Ray V2's callback: what it heard, in order."""

    def __init__(self):
        self.heard = []

    def after_report(self, run_context, metrics, checkpoint):
        name = os.path.basename(checkpoint.path) if checkpoint is not None else None
        self.heard.append(("report", run_context.train_loop_config["epochs"],
                           [(m["epoch"], m["attempt"]) for m in metrics], name))

    def after_exception(self, run_context, worker_exceptions):
        self.heard.append(("exception", {rank: type(e).__name__ for rank, e in worker_exceptions.items()}))


@pytest.mark.parametrize("crash", ["raise", "kill"])
def test_retry_resumes_from_the_latest_checkpoint(fit, tmp_path, crash):
    config = {"epochs": 3, "crash": crash, "crash_after": 1, "marker": str(tmp_path / "crashed")}
    hooks = Hooks()
    result = fit(resumable_loop, workers=2, config=config, failure_config=FailureConfig(max_failures=1),
                 callbacks=[hooks])
    assert os.path.exists(config["marker"])  # it did crash once
    assert result.error is None
    # Each round once every rank reported it (metrics in rank order), after its commit; the failure by rank.
    error = "WorkerCrashedError" if crash == "kill" else "RuntimeError"  # what rank 1 raised, as in Ray
    assert hooks.heard == [
        ("report", 3, [(0, 0), (0, 0)], "checkpoint_000001"),
        ("report", 3, [(1, 0), (1, 0)], "checkpoint_000002"),
        ("exception", {1: error}),
        ("report", 3, [(2, 1), (2, 1)], "checkpoint_000003"),
    ]
    rows = result.all_reports
    first = [r for r in rows if r["_attempt"] == 0]
    second = [r for r in rows if r["_attempt"] == 1]
    assert sorted((r["_rank"], r["epoch"]) for r in first) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    # The second attempt got the epoch-1 checkpoint and ran only epoch 2.
    assert sorted((r["_rank"], r["epoch"]) for r in second) == [(0, 2), (1, 2)]
    assert all(r["attempt"] == 1 and r["resumed_from"] == 2 for r in second)
    assert all(r["attempt"] == 0 and r["resumed_from"] is None for r in first)
    assert result.metrics["epoch"] == 2 and result.metrics["attempt"] == 1
    assert list(result.metrics_dataframe["epoch"]) == [0, 1, 2]
    # Rounds keep counting across attempts.
    assert [r["training_iteration"] for r in result.all_reports if r["_rank"] == 0] == [1, 2, 3]
    assert result.checkpoint.path.endswith("checkpoint_000003")
    with result.checkpoint.as_directory() as folder:
        assert torch.load(os.path.join(folder, "shard_1.pt")) == {"epoch": 2, "rank": 1}
    state = json.load(open(os.path.join(result.path, ".muster_run.json")))
    assert state["status"] == "FINISHED"


def rank1_fails_before_a_round(config):
    """Rounds i=0..2, each with a checkpoint; on the first attempt rank 1 fails before reporting i=2,
    after rank 0 reported it (so that report is rolled back: the retry runs i=2 again)."""
    import time

    rank, reported = train.get_context().get_world_rank(), config["marker"] + ".rank0"
    start = 0
    if train.get_checkpoint() is not None:
        with train.get_checkpoint().as_directory() as folder:
            start = json.load(open(os.path.join(folder, "i.json")))["i"] + 1
    for i in range(start, 3):
        if i == 2 and rank == 1 and not os.path.exists(config["marker"]):
            while not os.path.exists(reported):  # rank 0's report of i=2 is recorded first
                time.sleep(0.05)
            open(config["marker"], "w").close()
            raise RuntimeError("injected failure before reporting i=2")
        with tempfile.TemporaryDirectory() as tmp:
            json.dump({"i": i}, open(os.path.join(tmp, "i.json"), "w"))
            train.report({"i": i}, checkpoint=Checkpoint.from_directory(tmp))
        if i == 2 and rank == 0:
            open(reported, "w").close()


def test_metrics_dataframe_leaves_out_rolled_back_reports(fit, tmp_path):
    """As Ray V2's: each round once, the retried one (it showed i = [0, 1, 2, 2]); all_reports keeps every attempt's."""
    result = fit(rank1_fails_before_a_round, config={"marker": str(tmp_path / "crashed")},
                 failure_config=FailureConfig(max_failures=1))
    assert list(result.metrics_dataframe["i"]) == [0, 1, 2]
    assert list(Result.from_path(result.path).metrics_dataframe["i"]) == [0, 1, 2]
    assert result.metrics == {"i": 2}
    rank0 = [(r["i"], r["_attempt"]) for r in result.all_reports if r["_rank"] == 0]
    assert rank0 == [(0, 0), (1, 0), (2, 0), (2, 1)]
    assert len(result.all_metrics_dataframe) == 7


def test_no_retry_budget_raises_and_lists_the_attempt(fit, tmp_path):
    config = {"epochs": 3, "crash": "raise", "crash_after": 0, "marker": str(tmp_path / "m")}
    with pytest.raises(TrainingFailedError) as info:
        fit(resumable_loop, workers=2, config=config, failure_config=FailureConfig(max_failures=0))
    message = str(info.value)
    assert "after 1 attempt(s)" in message and "--- attempt 1: root cause ---" in message
    assert "attempt 2" not in message
    assert "injected failure at epoch 0" in message and "rank 1" in message
    assert len(info.value.attempts) == 1
    state = json.load(open(os.path.join(info.value.run_path, ".muster_run.json")))
    assert state["status"] == "ERRORED"


def test_budget_spent_lists_every_attempt(fit, tmp_path):
    config = {"epochs": 3, "always": True}
    with pytest.raises(TrainingFailedError) as info:
        fit(resumable_loop, workers=2, config=config, failure_config=FailureConfig(max_failures=1))
    message = str(info.value)
    assert "after 2 attempt(s)" in message and "max_failures=1" in message
    assert "--- attempt 1: root cause ---" in message and "--- attempt 2: root cause ---" in message
    assert len(info.value.attempts) == 2
    # The second attempt resumed from the first one's checkpoint before failing again.
    assert "injected failure at epoch 0, attempt 0" in message
    assert "injected failure at epoch 1, attempt 1" in message


def short_loop(config):
    train.report({"done": True, "attempt": train.get_context().get_attempt(),
                  "had_checkpoint": train.get_checkpoint() is not None})


def test_rerun_of_a_finished_run_is_refused(storage):
    def trainer(name="same"):
        return TorchTrainer(
            short_loop,
            scaling_config=ScalingConfig(num_workers=1),
            run_config=RunConfig(name=name, storage_path=storage, verbose=0),
        )

    trainer().fit()
    with pytest.raises(RunAlreadyFinishedError) as info:
        trainer().fit()
    message = str(info.value)
    assert "'same'" in message and "FINISHED" in message
    assert "RunConfig(name=...)" in message  # offers a new name
    assert isinstance(info.value, ValueError)
    assert trainer("other").fit().metrics["done"] is True


def test_rerun_of_a_failed_run_resumes_from_its_checkpoint(fit, tmp_path):
    config = {"epochs": 3, "crash": "raise", "crash_after": 1, "marker": str(tmp_path / "m")}
    with pytest.raises(TrainingFailedError):
        fit(resumable_loop, workers=2, config=config, name="again")
    result = fit(resumable_loop, workers=2, config=config, name="again")  # the marker now stops the crash
    assert result.metrics["epoch"] == 2 and result.metrics["resumed_from"] == 2
    assert [r["epoch"] for r in result.all_reports if r["_rank"] == 0] == [0, 1, 2]


def test_can_restore_and_restore_a_failed_run(fit, tmp_path, storage):
    config = {"epochs": 3, "crash": "kill", "crash_after": 1, "marker": str(tmp_path / "m")}
    with pytest.raises(TrainingFailedError) as info:
        fit(resumable_loop, workers=2, config=config, name="restorable")
    path = info.value.run_path
    assert path == os.path.join(storage, "restorable")
    assert TorchTrainer.can_restore(path)
    assert not TorchTrainer.can_restore(str(tmp_path))
    assert not TorchTrainer.can_restore(os.path.join(storage, "missing"))
    with pytest.raises(ValueError, match="no muster run"):
        TorchTrainer.restore(str(tmp_path / "nothing"))

    restored = TorchTrainer.restore(path)
    assert isinstance(restored, TorchTrainer)
    result = restored.fit()
    assert result.path == path
    assert result.metrics["epoch"] == 2 and result.metrics["resumed_from"] == 2
    assert result.checkpoint.path.endswith("checkpoint_000003")

    # A FINISHED run can be restored too: it runs again from its latest checkpoint.
    again = TorchTrainer.restore(path, train_loop_per_worker=short_loop).fit()
    assert again.metrics["had_checkpoint"] is True and again.metrics["done"] is True
