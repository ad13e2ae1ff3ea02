"""``tune.Experiment`` and ``tune.run_experiments`` (Ray's older API) over ``tune.run``: real trials, real storage."""

from __future__ import annotations

import os
import warnings

import pytest

from muster import tune
from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.tune.experiment import Experiment


def _linear(config):
    for step in range(1, 4):
        tune.report({"score": config["slope"] * step})


def _constant(config):
    tune.report({"score": config["value"]})
    if config["value"] < 0:
        raise RuntimeError("negative value")


def test_run_experiments_runs_each_experiment_and_returns_all_trials(storage):
    first = Experiment("lines", _linear, config={"slope": tune.grid_search([1.0, 2.0])},
                       stop={"training_iteration": 2}, storage_path=storage)
    spec = {"consts": {"run": _constant, "config": {"value": 7.0}, "storage_path": storage,
                       "checkpoint_config": {"num_to_keep": 1}}}
    with pytest.warns(UserWarning, match="one after another"):
        trials = tune.run_experiments([first, spec], verbose=0)
    assert [t.config for t in trials] == [{"slope": 1.0}, {"slope": 2.0}, {"value": 7.0}]
    assert [t.status for t in trials] == ["TERMINATED"] * 3
    # each experiment's own stop: the lines stopped after 2 of their 3 steps
    assert [(t.last_result["score"], t.last_result["training_iteration"]) for t in trials] == [
        (2.0, 2), (4.0, 2), (7.0, 1)]
    assert len({t.trial_id for t in trials}) == 3
    assert os.path.isdir(os.path.join(storage, "lines")) and os.path.isdir(os.path.join(storage, "consts"))
    assert first.path == os.path.join(storage, "lines")
    assert all(t.path.startswith(first.path) for t in trials[:2]) and trials[2].path.startswith(
        os.path.join(storage, "consts"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # concurrent=False: no warning
        again = tune.run_experiments(Experiment("solo", _constant, config={"value": 1.0}, storage_path=storage),
                                     concurrent=False, verbose=0)
    assert [t.last_result["score"] for t in again] == [1.0]


def test_failed_trial_raises_unless_told_not_to(storage):
    spec = {"bad": {"run": _constant, "config": {"value": tune.grid_search([1.0, -1.0])}, "storage_path": storage}}
    with pytest.raises(tune.TuneError, match=r"Trials did not complete: .*\(ERROR\)"):
        tune.run_experiments(spec, verbose=0)
    trials = tune.run_experiments(spec, verbose=0, raise_on_failed_trial=False)
    assert sorted(t.status for t in trials) == ["ERROR", "TERMINATED"]


def test_tune_run_takes_an_experiment_with_the_runs_own_keywords(storage):
    exp = Experiment("best", _linear, config={"slope": tune.grid_search([1.0, 3.0, 2.0])},
                     stop={"training_iteration": 3}, storage_path=storage)
    analysis = tune.run(exp, metric="score", mode="max", verbose=0, scheduler="fifo")
    assert analysis.experiment_path == os.path.join(storage, "best")
    assert analysis.best_config == {"slope": 3.0} and analysis.best_result["score"] == 9.0
    with pytest.raises(InvalidArgumentError, match=r"config=\.\.\., num_samples=\.\.\..*tune.Experiment"):
        tune.run(exp, config={"slope": 1.0}, num_samples=2)
    with pytest.raises(InvalidTypeError, match="run_experiments"):
        tune.run([exp, exp])


def test_experiment_refuses_what_muster_cannot_run_naming_the_fix(tmp_path):
    with pytest.raises(InvalidTypeError, match="register_trainable"):
        Experiment("x", "PPO")
    with pytest.raises(InvalidTypeError, match="dict search space"):
        Experiment("x", _linear, config=[1, 2])
    with pytest.raises(InvalidArgumentError, match="checkpoint_frequency.*function trainable"):
        Experiment("x", _linear, checkpoint_config={"checkpoint_frequency": 2})
    with pytest.raises(InvalidArgumentError, match="Stopper objects only"):
        Experiment("x", _linear, stop=[{"training_iteration": 2}])
    with pytest.raises(InvalidArgumentError, match="restore="):
        Experiment("x", _linear, restore="/a/checkpoint")
    with pytest.raises(InvalidArgumentError, match="local_dir"):
        Experiment("x", _linear, local_dir=str(tmp_path))
    with pytest.raises(InvalidArgumentError, match="names no trainable"):
        tune.run_experiments({"x": {"config": {}}})
    with pytest.raises(InvalidArgumentError, match=r"unknown keys \['metric'\]"):
        tune.run_experiments({"x": {"run": _linear, "metric": "score"}})
    with pytest.raises(InvalidTypeError, match="pass a tune.Experiment"):
        tune.run_experiments(42)
    # Ray's RLlib form: "env" goes into the config; no name: the trainable's name and the time
    exp = Experiment.from_json("rl", {"run": _linear, "env": "CartPole-v1", "stop": [tune.MaximumIterationStopper(2)]})
    assert exp.spec["config"] == {"env": "CartPole-v1"} and exp.run_identifier == "linear"
    assert isinstance(exp.stopper, tune.Stopper) and exp.public_spec["num_samples"] == 1
    assert Experiment(None, _linear).name.startswith("linear_")
    assert type(Experiment("x", _linear).checkpoint_config) is tune.CheckpointConfig  # Ray's default, not None
