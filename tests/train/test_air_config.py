"""``muster.air``'s RunConfig / FailureConfig / CheckpointConfig are Ray's legacy (Tune's) classes, as
``ray.air``'s are in Ray 2.60: Tune's options port, Train V2's are refused, and a trainer refuses Tune's."""

from __future__ import annotations

import os

import pytest

import muster.air as air
from muster import train, tune
from muster.exceptions import InvalidArgumentError
from muster.train.torch import TorchTrainer


def _one_report(config=None):
    train.report({"x": 1})


def _counts(config):
    for i in range(10):
        tune.report({"i": i})


def test_air_classes_take_tunes_options_and_refuse_train_v2s():
    rc = air.RunConfig(stop={"training_iteration": 3}, verbose=0, log_to_file=True, callbacks=[tune.Callback()])
    assert isinstance(rc, train.RunConfig)  # what a Tuner and a trainer take
    assert type(rc.checkpoint_config) is air.CheckpointConfig is tune.CheckpointConfig
    assert type(rc.failure_config) is air.FailureConfig
    for name, value in (("worker_runtime_env", {"env_vars": {"A": "1"}}), ("logging_config", object())):
        with pytest.raises(InvalidArgumentError, match=rf"{name} is Ray Train V2's.*muster.train.RunConfig"):
            air.RunConfig(**{name: value})
    assert air.FailureConfig(fail_fast="raise").fail_fast == "raise"
    with pytest.raises(InvalidArgumentError, match=r"fail_fast=True, max_failures=2.*needs max_failures=0"):
        air.FailureConfig(fail_fast=True, max_failures=2)
    with pytest.raises(InvalidArgumentError, match=r"fail_fast='nope'.*True, False or 'raise'"):
        air.FailureConfig(fail_fast="nope")
    with pytest.raises(InvalidArgumentError, match=r"controller_failure_limit=1.*muster.train.FailureConfig"):
        air.FailureConfig(controller_failure_limit=1)
    train.FailureConfig(controller_failure_limit=1)  # V2's own class takes it


def test_a_tuner_runs_with_air_configs(storage):
    grid = tune.Tuner(_counts, run_config=air.RunConfig(
        name="air_tuner", storage_path=storage, verbose=0, stop={"training_iteration": 2},
        failure_config=air.FailureConfig(fail_fast=True), checkpoint_config=air.CheckpointConfig(num_to_keep=1),
    )).fit()
    assert grid.num_errors == 0, grid.errors
    assert grid[0].metrics["training_iteration"] == 2 and grid[0].metrics["i"] == 1


def test_a_trainer_refuses_tunes_options_naming_the_fix_and_runs_without_them(storage):
    scaling = train.ScalingConfig(num_workers=1)
    refused = [
        (air.RunConfig(name="a", storage_path=storage, stop={"training_iteration": 2}), r"stop=.* is Ray Tune's"),
        (air.RunConfig(name="b", storage_path=storage, callbacks=[tune.Callback()]), r"callbacks=.* is Ray Tune's"),
        (air.RunConfig(name="c", storage_path=storage, log_to_file=True, progress_reporter=tune.CLIReporter()),
         r"log_to_file, progress_reporter are Ray Tune's|progress_reporter, log_to_file are Ray Tune's"),
        (train.RunConfig(name="d", storage_path=storage,
                         checkpoint_config=air.CheckpointConfig(checkpoint_frequency=2)),
         r"checkpoint_frequency is Ray Tune's.*muster.train.CheckpointConfig"),
    ]
    for run_config, says in refused:
        trainer = TorchTrainer(_one_report, scaling_config=scaling, run_config=run_config)
        with pytest.raises(InvalidArgumentError, match=says) as info:
            trainer.fit()
        assert "TorchTrainer(run_config=" in str(info.value)
        assert not os.path.exists(os.path.join(storage, run_config.name))  # refused before anything ran
    result = TorchTrainer(_one_report, scaling_config=scaling,
                          run_config=air.RunConfig(name="plain", storage_path=storage, verbose=0)).fit()
    assert result.metrics == {"x": 1}


def test_tunes_classes_extend_the_air_ones_as_rays_do(storage):
    # ray.tune.RunConfig/FailureConfig subclass ray.air's: Train V2's options are refused there too.
    assert issubclass(tune.RunConfig, air.RunConfig) and tune.RunConfig is not air.RunConfig
    assert issubclass(tune.FailureConfig, air.FailureConfig) and tune.FailureConfig is not air.FailureConfig
    rc = tune.RunConfig(stop={"training_iteration": 3}, verbose=0)
    assert type(rc.failure_config) is tune.FailureConfig and type(rc.checkpoint_config) is tune.CheckpointConfig
    with pytest.raises(InvalidArgumentError, match=r"tune.RunConfig\(worker_runtime_env=.*muster.train.RunConfig"):
        tune.RunConfig(worker_runtime_env={"env_vars": {"A": "1"}})
    with pytest.raises(InvalidArgumentError, match=r"muster.tune.FailureConfig\(controller_failure_limit=1"):
        tune.FailureConfig(controller_failure_limit=1)
    assert tune.FailureConfig(fail_fast="raise").fail_fast == "raise"
    with pytest.raises(InvalidArgumentError, match=r"muster.tune.RunConfig\(stop=.*is Ray Tune's"):
        TorchTrainer(_one_report, scaling_config=train.ScalingConfig(num_workers=1),
                     run_config=tune.RunConfig(name="t", storage_path=storage, stop={"training_iteration": 2})).fit()
