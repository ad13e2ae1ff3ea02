"""Ray's ready-made stoppers: each decision on its own, and a plateau stopper ending real trials."""

from __future__ import annotations

import csv
import datetime
import json
import os
import time

import pytest

from muster import tune
from muster.exceptions import InvalidArgumentError
from muster.tune.stopper import (
    CombinedStopper,
    ExperimentPlateauStopper,
    FunctionStopper,
    MaximumIterationStopper,
    NoopStopper,
    TimeoutStopper,
    TrialPlateauStopper,
)


def _feed(stopper, trial_id, values, metric="loss"):
    return [stopper(trial_id, {metric: v}) for v in values]


def test_trial_plateau_stopper_waits_for_its_window_and_grace_period_then_stops_a_flat_trial():
    stopper = TrialPlateauStopper("loss", std=0.001, num_results=3, grace_period=4)
    assert _feed(stopper, "a", [1.0, 1.0, 1.0, 1.0]) == [False, False, False, True]  # grace period: 4 results
    assert _feed(stopper, "b", [1.0, 0.5, 0.2, 0.19, 0.19, 0.19]) == [False] * 5 + [True]  # its own window
    assert not stopper("c", {"other": 1.0})  # a result without the metric counts for nothing
    # with a threshold, a flat trial stops only once it is better than it
    gated = TrialPlateauStopper("loss", num_results=2, grace_period=0, metric_threshold=0.5, mode="min")
    assert _feed(gated, "a", [0.9, 0.9, 0.4, 0.4]) == [False, False, False, True]
    with pytest.raises(InvalidArgumentError, match="mode=None; use 'min' or 'max'"):
        TrialPlateauStopper("loss", metric_threshold=0.5)


def test_experiment_plateau_stopper_stops_everything_once_the_best_values_agree():
    stopper = ExperimentPlateauStopper("acc", std=0.01, top=3, mode="max", patience=1)
    decisions = [stopper(f"t{i}", {"acc": v}) for i, v in enumerate([0.1, 0.9, 0.5, 0.9, 0.2, 0.9, 0.3])]
    # the top 3 are 0.9 three times from the sixth result on; patience 1: that result already stops
    assert decisions == [False] * 5 + [True, True] and stopper.stop_all()
    with pytest.raises(InvalidArgumentError, match="top=1 must be >= 2"):
        ExperimentPlateauStopper("acc", top=1)


def test_combined_function_timeout_noop_and_max_iteration_stoppers():
    combined = CombinedStopper(MaximumIterationStopper(3), FunctionStopper(lambda tid, r: r["loss"] < 0.1))
    assert not combined("a", {"training_iteration": 1, "loss": 1.0})
    assert combined("a", {"training_iteration": 3, "loss": 1.0})
    assert combined("b", {"training_iteration": 1, "loss": 0.0})
    assert not NoopStopper()("a", {"loss": 0.0}) and not NoopStopper().stop_all()
    timeout = TimeoutStopper(datetime.timedelta(seconds=0.2))
    assert not timeout.stop_all() and not CombinedStopper(timeout).stop_all()
    time.sleep(0.25)
    assert timeout.stop_all() and CombinedStopper(NoopStopper(), timeout).stop_all()
    with pytest.raises(InvalidArgumentError, match="TimeoutStopper\\(timeout=0\\)"):
        TimeoutStopper(0)
    with pytest.raises(InvalidArgumentError, match="every argument must be a muster.tune.Stopper"):
        CombinedStopper({"loss": 0.1})


def _flattens(config):
    for i in range(1, 31):
        tune.report({"loss": max(config["floor"], 1.0 - 0.2 * i)})


def test_a_trial_plateau_stopper_ends_flat_trials_in_a_real_experiment(storage):
    grid = tune.Tuner(
        _flattens, param_space={"floor": tune.grid_search([0.5, 0.0])},
        run_config=tune.RunConfig(storage_path=storage, verbose=0,
                                  stop=TrialPlateauStopper("loss", std=0.001, num_results=3, grace_period=3)),
    ).fit()
    iters = {r.config["floor"]: r.metrics["training_iteration"] for r in grid}
    # floor 0.5: flat at 0.5 from iteration 3 on, so stopped at the third flat value (iteration 5);
    # floor 0.0: flat at 0.0 from iteration 5 on, stopped at iteration 7
    assert iters == {0.5: 5, 0.0: 7}, iters


def test_rays_tune_import_paths_resolve_or_name_the_equivalent():
    import importlib

    from muster.exceptions import UnsupportedRayAPIError, UnsupportedRayImportError
    from muster.tune.search.basic_variant import BasicVariantGenerator  # the path Ray's docs use

    assert BasicVariantGenerator is tune.search.BasicVariantGenerator
    assert tune.stopper.TrialPlateauStopper is TrialPlateauStopper
    with pytest.raises(UnsupportedRayImportError, match=r"muster.tune.search.hyperopt .*OptunaSearch"):
        importlib.import_module("muster.tune.search.hyperopt")
    with pytest.raises(UnsupportedRayImportError, match=r"schedulers.HyperBandForBOHB .*HyperBandScheduler"):
        from muster.tune.schedulers import HyperBandForBOHB  # noqa: F401
    # the module paths Ray's examples import (bohb_example, tune-xgboost, tune-wandb, train's xgboost example)
    for module, fix in [("muster.tune.schedulers.hb_bohb", "HyperBandScheduler"),
                        ("muster.tune.integration.xgboost", "muster.tune.report"),
                        ("muster.air.integrations.wandb", "MLflowLoggerCallback"),
                        ("muster.train.lightgbm", "TorchTrainer")]:
        with pytest.raises(UnsupportedRayImportError, match=rf"{module} .*{fix}"):
            importlib.import_module(module)
    from muster.tune.analysis import ExperimentAnalysis  # the path Ray's docs use

    assert tune.ExperimentAnalysis is ExperimentAnalysis
    with pytest.raises(UnsupportedRayAPIError, match=r"register_trainable .*Tuner"):
        tune.register_trainable  # noqa: B018
    from muster.tune.execution.placement_groups import PlacementGroupFactory

    assert PlacementGroupFactory is tune.PlacementGroupFactory
    with pytest.raises(UnsupportedRayImportError, match=r"register_mock_trainable .*Tuner"):
        from muster.tune.utils.mock_trainable import register_mock_trainable  # noqa: F401


def test_rays_mock_trainable_runs_as_in_rays_hyperband_example(tmp_path):
    import math

    from muster.tune.utils.mock_trainable import MOCK_ERROR_KEY, MyTrainableClass

    grid = tune.Tuner(
        MyTrainableClass, param_space={"width": 2, "height": tune.grid_search([3, 5]), MOCK_ERROR_KEY: True},
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0, stop={"training_iteration": 3},
                                  failure_config=tune.FailureConfig(max_failures=1),
                                  checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=1)),
    ).fit()
    # mock_error: each fails once after its first step, then goes on from its restored checkpoint
    assert grid.num_errors == 0
    for r in grid:
        assert r.metrics["training_iteration"] == 3
        assert r.metrics["episode_reward_mean"] == pytest.approx(math.tanh(3 / 2) * r.config["height"])


def _nested_report(config):
    for i in range(1, 11):
        tune.report({"eval": {"step": i}})


def test_a_dict_stop_key_a_slash_b_reaches_a_nested_metric_as_in_ray(storage):
    """Ray's dict criteria look into nested results: ``{"eval/step": 3}`` stops a trial reporting
    ``{"eval": {"step": ...}}`` at its third result. Muster looked only at top-level keys, so the trial
    silently ran to its end."""
    grid = tune.Tuner(
        _nested_report,
        run_config=tune.RunConfig(storage_path=storage, verbose=0, stop={"eval/step": 3}),
    ).fit()
    assert grid[0].metrics["training_iteration"] == 3


def _counts(config):
    for i in range(1000):
        tune.report({"score": i})
        time.sleep(0.05)


def _recorded(result):
    """(training_iteration, done) of each row of the trial's result.json, progress.csv and metrics_dataframe."""
    with open(os.path.join(result.path, "result.json")) as f:
        rows = [json.loads(line) for line in f]
    with open(os.path.join(result.path, "progress.csv")) as f:
        csv_rows = list(csv.DictReader(f))
    frame = result.metrics_dataframe
    return ([(r["training_iteration"], r["done"]) for r in rows],
            [(int(r["training_iteration"]), r["done"] == "True") for r in csv_rows],
            list(zip(frame["training_iteration"].tolist(), frame["done"].tolist())))


@pytest.mark.parametrize("stop", [{"training_iteration": 3}, MaximumIterationStopper(3)], ids=["dict", "max_iter"])
def test_the_result_a_stopper_stops_a_trial_on_says_done_in_result_json_as_in_ray(storage, stop):
    """Ray 2.60 writes the result its stopper stopped a trial on with ``done: true`` in result.json, progress.csv
    and metrics_dataframe, and ``Result.metrics["done"]`` is True. Muster's result.json row said false (recorded
    by the trial's run before the decision)."""
    grid = tune.Tuner(_counts, param_space={"x": tune.grid_search([1, 2])},
                      run_config=tune.RunConfig(storage_path=storage, verbose=0, stop=stop)).fit()
    for result in grid:
        expected = [(1, False), (2, False), (3, True)]
        assert _recorded(result) == (expected, expected, expected), result.path
        assert result.metrics["done"] is True


class _StopAllAtThird(tune.stopper.Stopper):
    """Stops the experiment once both trials reported and one reached its third result; holds the controller
    a moment first, so that the other trial (reporting every 0.05 s) reports once more before it is stopped."""

    def __init__(self):
        self.iterations: dict[str, int] = {}
        self.stopping = False

    def __call__(self, trial_id, result):
        self.iterations[trial_id] = result["training_iteration"]
        return False

    def stop_all(self):
        if not self.stopping and len(self.iterations) == 2 and max(self.iterations.values()) >= 3:
            self.stopping = True
            time.sleep(0.5)
        return self.stopping


def test_a_result_reported_after_stop_all_is_not_kept_as_in_ray(storage):
    """Ray 2.60 drops what a trial reported after its stopper's ``stop_all()`` (with the trial's pending results):
    each trial's result.json, progress.csv and metrics_dataframe hold the same rows, the last one its
    ``Result.metrics``, none done. Muster's result.json (so its metrics_dataframe) kept the late result."""
    grid = tune.Tuner(_counts, param_space={"x": tune.grid_search([1, 2])},
                      run_config=tune.RunConfig(storage_path=storage, verbose=0, stop=_StopAllAtThird())).fit()
    for result in grid:
        rows, csv_rows, frame = _recorded(result)
        assert rows == csv_rows == frame, result.path
        assert rows[-1] == (result.metrics["training_iteration"], False)
        assert result.metrics["done"] is False
