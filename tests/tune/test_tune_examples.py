"""``muster.tune.examples``: Ray's ``ray.tune.examples.pbt_function``, the toy trainable Ray's PB2 docstring
and pb2_example import (``from ray.tune.examples.pbt_function import pbt_function`` was a
ModuleNotFoundError)."""

from __future__ import annotations

import pytest

from muster import tune
from muster.tune.examples.pbt_function import optimal_lr, pbt_function
from muster.tune.schedulers.pb2 import PB2


def test_the_optimal_lr_is_a_triangle_over_accuracy():
    assert optimal_lr(0) == 0.001 and optimal_lr(50) == pytest.approx(0.005)
    assert optimal_lr(100) == pytest.approx(0.01) and optimal_lr(150) == pytest.approx(0.005)
    assert optimal_lr(250) == 0.001


@pytest.mark.timeout(240)
def test_pb2_over_pbt_function_as_rays_pb2_example(storage):
    tuner = tune.Tuner(
        pbt_function,
        run_config=tune.RunConfig(name="pb2", storage_path=storage, verbose=0, stop={"training_iteration": 6}),
        tune_config=tune.TuneConfig(scheduler=PB2(time_attr="training_iteration", perturbation_interval=2,
                                                  hyperparam_bounds={"lr": [0.0001, 0.02]}),
                                    metric="mean_accuracy", mode="max", num_samples=4),
        param_space={"lr": 0.0001, "checkpoint_interval": 2},
    )
    results = tuner.fit()
    assert results.num_errors == 0 and len(results) == 4
    for result in results:
        # 6 where the stop met the trial's own count; 7 where PB2 restarted it (at 2 or 4) from a donor's
        # checkpoint of iteration 6: a trial goes on from its donor checkpoint's iteration, as on Ray, and its
        # next report is 7 (a donor stops at 6, so none is further on)
        iteration, since_restore = result.metrics["training_iteration"], result.metrics["iterations_since_restore"]
        assert iteration == 6 or (iteration == 7 and since_restore < 7), result.metrics
        assert set(result.metrics) >= {"mean_accuracy", "cur_lr", "optimal_lr", "q_err", "done"}
        assert result.checkpoint is not None  # every 2nd step saves one
    assert {r.config["lr"] for r in results} == {r.metrics["cur_lr"] for r in results}  # reports the lr it ran with
