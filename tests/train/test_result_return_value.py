"""``Result.return_value``: what the training function returned on rank 0, as Ray Train V2's
(``ray.train.v2.api.result.Result``). Checked against Ray 2.60 with the same loops under
``ray.init(num_cpus=2)``: a 2-worker run's is rank 0's return, one that returns nothing has None, and
``Result.from_path`` has None (it is not stored)."""

from __future__ import annotations

import os
import time

import muster.train as train
from muster.train import FailureConfig, Result


def _returns(config):
    rank = train.get_context().get_world_rank()
    train.report({"loss": 1.0})
    return {"rank": rank, "value": config["v"]}


def _returns_nothing(config):
    train.report({"loss": 1.0})


def test_return_value_is_rank_0s_and_not_stored(fit):
    result = fit(_returns, workers=2, config={"v": 7}, name="returns")
    assert result.return_value == {"rank": 0, "value": 7}
    assert Result.from_path(result.path).return_value is None
    assert fit(_returns_nothing, workers=1, name="returns_nothing").return_value is None
    assert "return_value={'rank': 0, 'value': 7}" in repr(result)  # (in Ray's dataclass repr too)


def _fails_once(config):
    ctx = train.get_context()
    train.report({"loss": 1.0})
    if ctx.get_world_rank() == 1 and ctx.get_attempt() == 0:
        time.sleep(0.5)  # rank 0 has returned by now: its value belongs to a failed attempt
        raise RuntimeError("first attempt fails")
    return (ctx.get_world_rank(), ctx.get_attempt(), os.getpid())


def test_return_value_is_that_of_the_attempt_that_succeeds(fit):
    result = fit(_fails_once, workers=2, name="retried", failure_config=FailureConfig(max_failures=1))
    rank, attempt, pid = result.return_value
    assert (rank, attempt) == (0, 1) and pid != os.getpid()


def _trial_fits_a_trainer(config):
    from muster import tune
    from muster.train import ScalingConfig
    from muster.train.torch import TorchTrainer

    inner = TorchTrainer(_returns, train_loop_config={"v": config["v"]}, scaling_config=ScalingConfig(num_workers=2))
    tune.report({"returned": inner.fit().return_value})


def test_a_trainer_fit_in_a_tune_trial_gives_its_return_value_too(storage):
    from muster import tune

    grid = tune.Tuner(_trial_fits_a_trainer, param_space={"v": 3},
                      run_config=tune.RunConfig(storage_path=storage, name="nested_return", verbose=0)).fit()
    assert grid.num_errors == 0, grid.errors
    assert grid[0].metrics["returned"] == {"rank": 0, "value": 3}
    assert not hasattr(grid[0], "return_value")  # a trial's result is a tune.Result, as Ray's
