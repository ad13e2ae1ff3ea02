"""Ray's ``ray.tune.examples.pbt_function``: a toy problem where the best learning rate moves as
training goes, so a fixed ``lr`` stalls and PBT/PB2's schedules win.

``pbt_function(config)`` is a function trainable. Each step its accuracy grows fastest when
``config["lr"]`` is near an optimal rate that rises from 0.001 to 0.01 while the accuracy climbs to
100, then falls back to 0.001 as it climbs to 200 (a triangle); an ``lr`` more than 3x the optimum
loses accuracy; Gaussian noise is added. It reports ``mean_accuracy``, ``cur_lr``, ``optimal_lr``,
``q_err`` (how many times off the rate is) and ``done`` (accuracy past 200: with
``stop={"done": True}`` the trial ends there), with a checkpoint (``checkpoint.json``: accuracy and
step) every ``config["checkpoint_interval"]`` steps (default 1), and resumes from one, as Ray's does.

Run ``python -m muster.tune.examples.pbt_function [--smoke-test]`` for a PBT search over it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
from typing import Any

import numpy as np

from muster import tune
from muster.train import Checkpoint

_PEAK = 100.0  # the accuracy where the optimal lr is highest; training is done at twice this
_LOW_LR, _HIGH_LR = 0.001, 0.01
_TOO_HIGH = 3.0  # an lr this many times the optimum or more loses accuracy
_NOISE = 2.0


def optimal_lr(accuracy: float) -> float:
    """The learning rate that helps most at this accuracy: up from 0.001 to 0.01, then back down."""
    rising = accuracy < _PEAK
    lr = _HIGH_LR * (accuracy / _PEAK if rising else 1.0 - (accuracy - _PEAK) / _PEAK)
    return min(_HIGH_LR, max(_LOW_LR, lr))


def _resume() -> tuple[float, int]:
    """(accuracy, next step) from the trial's checkpoint, else a fresh start (0.0, step 1)."""
    checkpoint = tune.get_checkpoint()
    if not checkpoint:
        return 0.0, 1
    with checkpoint.as_directory() as folder, open(os.path.join(folder, "checkpoint.json")) as f:
        saved = json.load(f)
    return float(saved["acc"]), int(saved["step"]) + 1


def pbt_function(config: dict[str, Any]) -> None:
    """The trainable (see the module docstring); it runs until the trial is stopped."""
    lr = config["lr"]
    every = config.get("checkpoint_interval", 1)
    accuracy, step = _resume()
    while True:
        best = optimal_lr(accuracy)
        q_err = max(lr, best) / min(lr, best)
        if q_err < _TOO_HIGH:
            accuracy += random.random() / q_err
        elif lr > best:
            accuracy -= (q_err - _TOO_HIGH) * random.random()
        accuracy = max(0.0, accuracy + _NOISE * float(np.random.normal()))
        metrics = {"mean_accuracy": accuracy, "cur_lr": lr, "optimal_lr": best, "q_err": q_err,
                   "done": accuracy > 2 * _PEAK}
        if step % every:
            tune.report(metrics)
        else:  # step counts from 1, so checkpoints fall on the iterations PBT perturbs at
            with tempfile.TemporaryDirectory() as folder:
                with open(os.path.join(folder, "checkpoint.json"), "w") as f:
                    json.dump({"acc": accuracy, "step": step}, f)
                tune.report(metrics, checkpoint=Checkpoint.from_directory(folder))
        step += 1


def run_tune_pbt(smoke_test: bool = False) -> tune.ResultGrid:
    """A PBT search over ``lr`` (and a factor that does nothing) on 8 trials; its results."""
    interval = 5
    scheduler = tune.schedulers.PopulationBasedTraining(
        time_attr="training_iteration", perturbation_interval=interval,
        hyperparam_mutations={"lr": tune.uniform(0.0001, 0.02), "some_other_factor": [1, 2]})
    tuner = tune.Tuner(
        pbt_function,
        run_config=tune.RunConfig(name="pbt_function", verbose=0,
                                  stop={"done": True, "training_iteration": 10 if smoke_test else 1000}),
        tune_config=tune.TuneConfig(scheduler=scheduler, metric="mean_accuracy", mode="max",
                                    num_samples=8, reuse_actors=True),
        param_space={"lr": 0.0001, "some_other_factor": 1, "checkpoint_interval": interval})
    return tuner.fit()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke-test", action="store_true", help="stop each trial after 10 iterations")
    args, _ = parser.parse_known_args()
    print("Best hyperparameters found were:", run_tune_pbt(args.smoke_test).get_best_result().config)
