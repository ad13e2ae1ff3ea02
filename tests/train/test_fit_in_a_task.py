"""``trainer.fit()`` called in a task or an actor: the driver runs it (Ray runs a trainer wherever fit() is)."""

from __future__ import annotations

import os

import pytest

import muster
import muster.train as train
from muster.train import Checkpoint, RunConfig, ScalingConfig, TrainingFailedError, ValidationConfig
from muster.train.torch import TorchTrainer


def sums_ranks(config):
    train.report({"x": config["x"], "world": train.get_context().get_world_size()})


def fails(config):
    raise RuntimeError("inner run fails")


@muster.remote
def launch(storage, loop, x):
    trainer = TorchTrainer(loop, train_loop_config={"x": x}, scaling_config=ScalingConfig(num_workers=2),
                           run_config=RunConfig(storage_path=storage, name=f"inner_{x}", verbose=0))
    return trainer.fit().metrics


def test_a_task_fits_a_trainer(storage):
    """Before, the driver answered the task's fit(): 'unknown request from a worker: FitRequest'."""
    metrics = muster.get(launch.remote(storage, sums_ranks, 3))
    assert metrics["x"] == 3 and metrics["world"] == 2
    assert os.path.isdir(os.path.join(storage, "inner_3"))
    with pytest.raises(TrainingFailedError, match="inner run fails"):
        muster.get(launch.remote(storage, fails, 4))


def validate_with_a_trainer(checkpoint, storage):
    step = checkpoint.to_dict()["step"]
    trainer = TorchTrainer(sums_ranks, train_loop_config={"x": step * 10}, scaling_config=ScalingConfig(num_workers=2),
                           run_config=RunConfig(storage_path=storage, name=f"validate_{step}", verbose=0))
    return {"score": trainer.fit().metrics["x"]}


def reports_for_validation(config):
    for step in range(2):
        train.report({"step": step}, checkpoint=Checkpoint.from_dict({"step": step}),
                     validation=train.ValidationTaskConfig(fn_kwargs={"storage": config["storage"]}))


def test_a_validation_function_fits_a_trainer(storage):
    """Ray's asynchronous-validation guide validates each checkpoint with a TorchTrainer in the fn."""
    result = TorchTrainer(reports_for_validation, train_loop_config={"storage": storage},
                          scaling_config=ScalingConfig(num_workers=1),
                          validation_config=ValidationConfig(fn=validate_with_a_trainer),
                          run_config=RunConfig(storage_path=storage, name="outer", verbose=0)).fit()
    assert sorted(m["score"] for _, m in result.best_checkpoints) == [0, 10]
