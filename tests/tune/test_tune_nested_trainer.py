"""A trial's function that fits a ``TorchTrainer`` and reports results of its own too (before and
after the fit): the trainer's reports and the trial's own are one sequence of trial results, as
Ray 2.60 gives them with ``TuneReportCallback`` (the same script under ``ray.init(num_cpus=2)``:
``training_iteration`` and ``iterations_since_restore`` 1, 2 for the trainer's two reports, 3 for
the trial's own ``tune.report`` after ``fit()``)."""

from __future__ import annotations

import os
import tempfile
import warnings

from muster import train, tune
from muster.train import Checkpoint, ScalingConfig
from muster.train.torch import TorchTrainer


def _two_reports(config):
    for i in range(2):
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "step"), "w").write(str(i))
            train.report({"loss": config["lr"] * (i + 1)}, checkpoint=Checkpoint.from_directory(d))


def _reports_around_a_fit(config):
    tune.report({"before": 1.0})
    result = TorchTrainer(_two_reports, train_loop_config=config,
                          scaling_config=ScalingConfig(num_workers=1)).fit()
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "own"), "w").write("after")
        tune.report({"final_loss": result.metrics["loss"]}, checkpoint=Checkpoint.from_directory(d))


class _Iterations(tune.Callback):
    def __init__(self):
        self.seen: list[int] = []

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.seen.append(result["training_iteration"])


def test_the_trials_own_reports_around_a_nested_fit_continue_its_results(storage):
    heard = _Iterations()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        grid = tune.Tuner(
            _reports_around_a_fit, param_space={"lr": 0.5},
            run_config=tune.RunConfig(storage_path=storage, name="around", verbose=0, callbacks=[heard]),
        ).fit()
    late = [str(w.message) for w in caught if "decided without it" in str(w.message)]
    assert late == []
    (r,) = list(grid)
    assert r.error is None
    assert heard.seen == [1, 2, 3, 4]
    df = r.metrics_dataframe
    assert list(df["training_iteration"]) == [1, 2, 3, 4]
    assert list(df["iterations_since_restore"]) == [1, 2, 3, 4]  # one run of the trial: no restore
    assert list(df["time_since_restore"]) == sorted(df["time_since_restore"])
    assert list(df["loss"].fillna(-1)) == [-1, 0.5, 1.0, -1]
    assert r.metrics["final_loss"] == 1.0 and r.metrics["training_iteration"] == 4
    # the trial's own checkpoint, reported after the fit, is kept and is its latest (Ray's is the trial's own)
    with r.checkpoint.as_directory() as d:
        assert open(os.path.join(d, "own")).read() == "after"
