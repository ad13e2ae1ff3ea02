"""Ray's asynchronous checkpoint validation: ValidationConfig, report(validation=...), statuses, retention."""

from __future__ import annotations

import os
import tempfile
import time

import pytest
import torch

import muster.train as train
from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.train import (
    Checkpoint,
    CheckpointConfig,
    FailureConfig,
    Result,
    RunConfig,
    ScalingConfig,
    TrainingFailedError,
    ValidationConfig,
    ValidationTaskConfig,
)
from muster.train.torch import TorchTrainer


def fit_one(loop, storage, name="run", config=None, validation_config=None, **run_kwargs):
    """One worker (the validation task takes the machine's other CPU, so it runs beside training)."""
    return TorchTrainer(
        loop, train_loop_config=config, scaling_config=ScalingConfig(num_workers=1),
        validation_config=validation_config,
        run_config=RunConfig(name=name, storage_path=storage, verbose=0, **run_kwargs),
    ).fit()


def evaluate(checkpoint, scale=1, mode="ok"):
    if mode == "raise":
        raise RuntimeError("evaluation broke")
    if mode == "sleep":
        time.sleep(60)
    with checkpoint.as_directory() as folder:
        epoch = torch.load(os.path.join(folder, "m.pt"))["epoch"]
    return {"val_score": epoch * scale}


def five_validated_checkpoints(config):
    asks = {
        0: True,
        1: ValidationTaskConfig(fn_kwargs={"scale": 10}),
        2: True,
        3: ValidationTaskConfig(fn_kwargs={"mode": "raise"}),
        4: ValidationTaskConfig(fn_kwargs={"mode": "sleep"}, timeout_s=1),
    }
    for epoch in range(config.get("epochs", 5)):
        with tempfile.TemporaryDirectory() as tmp:
            torch.save({"epoch": epoch}, os.path.join(tmp, "m.pt"))
            train.report({"epoch": epoch}, checkpoint=Checkpoint.from_directory(tmp), validation=asks[epoch])
    seen = train.get_all_reported_checkpoints()  # VALIDATED: waits for the last checkpoint's validation
    train.report({"seen": [(os.path.basename(c.checkpoint.path), c.metrics.get("val_score"), c.status.value)
                           for c in seen]})
    if config.get("fail"):
        raise RuntimeError("stop here")


def test_validations_run_beside_training_and_rank_the_checkpoints(storage):
    result = fit_one(
        five_validated_checkpoints, storage, config={}, validation_config=ValidationConfig(evaluate),
        checkpoint_config=CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="val_score"),
    )
    # 0, 10 and 2 validated; round 4's function raised (kept unscored), round 5's timed out and was cancelled.
    # Retention keeps the best two by the validated score, and the latest; best_checkpoints are the two.
    assert result.metrics["seen"] == [
        ["checkpoint_000002", 10, "VALIDATED"],
        ["checkpoint_000003", 2, "VALIDATED"],
        ["checkpoint_000005", None, "VALIDATION_TIMEOUT"],
    ]
    best = [(os.path.basename(c.path), m.get("val_score"), m["epoch"]) for c, m in result.best_checkpoints]
    assert best == [("checkpoint_000002", 10, 1), ("checkpoint_000003", 2, 2)]
    assert result.checkpoint.path.endswith("checkpoint_000005")
    assert sorted(os.listdir(os.path.join(result.path, "validations"))) == [
        "checkpoint_000002.json", "checkpoint_000003.json", "checkpoint_000005.json",
    ]
    back = Result.from_path(result.path)
    assert [(os.path.basename(c.path), m.get("val_score")) for c, m in back.best_checkpoints] == [
        (name, score) for name, score, _ in best
    ]
    assert "_validation" not in result.metrics_dataframe.columns


def test_a_validation_the_last_driver_did_not_finish_runs_when_the_run_resumes(storage):
    once = dict(validation_config=ValidationConfig(evaluate), failure_config=FailureConfig(max_failures=0))
    with pytest.raises(TrainingFailedError, match="stop here"):
        fit_one(five_validated_checkpoints, storage, "again", {"epochs": 2, "fail": True}, **once)
    path = os.path.join(storage, "again")
    assert [s for *_, s in Result.from_path(path).metrics["seen"]] == ["VALIDATED", "VALIDATED"]
    # The run failed after its validations ended. Drop one's outcome, as a driver killed mid-validation
    # leaves it (the manifest asks for a validation, no outcome is stored): it is pending again.
    os.remove(os.path.join(path, "validations", "checkpoint_000002.json"))
    assert [m.get("val_score") for _, m in Result.from_path(path).best_checkpoints] == [None, 0]  # newest first
    with pytest.raises(TrainingFailedError, match="stop here"):
        fit_one(five_validated_checkpoints, storage, "again", {"epochs": 0, "fail": True}, **once)
    # the resumed driver validated it again before it ended
    assert [(os.path.basename(c.path), m.get("val_score")) for c, m in Result.from_path(path).best_checkpoints] == [
        ("checkpoint_000002", 10), ("checkpoint_000001", 0)
    ]


def asks_without_a_checkpoint():
    train.report({"x": 1}, validation=True)


def asks_with_a_checkpoint():
    with tempfile.TemporaryDirectory() as tmp:
        open(os.path.join(tmp, "f"), "w").close()
        train.report({"x": 1}, checkpoint=Checkpoint.from_directory(tmp), validation=True)


def test_bad_validation_requests_name_the_fix(storage):
    with pytest.raises(TrainingFailedError, match="pass checkpoint= in the same report"):
        fit_one(asks_without_a_checkpoint, storage, validation_config=ValidationConfig(evaluate))
    with pytest.raises(TrainingFailedError, match=r"no validation_config: pass validation_config=muster.train"):
        fit_one(asks_with_a_checkpoint, storage, "no_config")
    with pytest.raises(InvalidArgumentError, match="timeout_s=0"):
        ValidationTaskConfig(timeout_s=0)
    with pytest.raises(InvalidTypeError, match="ValidationConfig"):
        ValidationConfig(fn=3)


def test_a_trainer_tuned_by_a_tuner_validates_its_checkpoints(storage):
    from muster import tune

    trainer = TorchTrainer(
        five_validated_checkpoints, scaling_config=ScalingConfig(num_workers=1),
        validation_config=ValidationConfig(evaluate),
    )
    grid = tune.Tuner(
        trainer, param_space={"train_loop_config": {"epochs": tune.grid_search([2])}},
        run_config=RunConfig(name="tuned", storage_path=storage, verbose=0),
    ).fit()
    (result,) = list(grid)
    assert result.error is None
    assert [(os.path.basename(c.path), m.get("val_score")) for c, m in result.best_checkpoints] == [
        ("checkpoint_000002", 10), ("checkpoint_000001", 0)
    ]
