"""TuneConfig(trial_name_creator=, trial_dirname_creator=): Ray's hooks naming each trial and its folder."""

from __future__ import annotations

import os

import pytest

from muster import tune
from muster.exceptions import InvalidArgumentError, InvalidTypeError


def reports_its_names(config):
    ctx = tune.get_context()
    tune.report({"name": ctx.get_trial_name(), "dir": os.path.basename(ctx.get_trial_dir().rstrip("/"))})


class _SeesTrials(tune.Callback):
    def __init__(self):
        self.started = []

    def on_trial_start(self, iteration, trials, trial, **info):
        self.started.append((str(trial), trial.trainable_name))


def test_creators_name_each_trial_and_its_folder(storage):
    seen = _SeesTrials()
    grid = tune.Tuner(
        reports_its_names,
        param_space={"x": tune.grid_search([1, 2])},
        tune_config=tune.TuneConfig(trial_name_creator=lambda t: f"x={t.config['x']}",
                                    trial_dirname_creator=lambda t: f"{t} {t.trial_id}"),
        run_config=tune.RunConfig(name="named", storage_path=storage, verbose=0, callbacks=[seen]),
    ).fit()
    assert grid.num_errors == 0
    assert sorted(seen.started) == [("x=1", "reports_its_names"), ("x=2", "reports_its_names")]
    for result in grid:
        name = f"x={result.config['x']}"
        trial_id = result.metrics["trial_id"]
        assert result.metrics["name"] == name  # what the trial itself is told
        assert os.path.basename(result.path) == result.metrics["dir"] == f"{name}_{trial_id}"  # " " made "_"
        assert os.path.isdir(os.path.join(storage, "named", f"{name}_{trial_id}"))


@pytest.mark.parametrize("creator, error, match", [
    (lambda t: "same", InvalidArgumentError, "for two trials"),
    (lambda t: f"a/{t.trial_id}", InvalidArgumentError, "must not contain '/'"),
    (lambda t: None, InvalidTypeError, "returned None"),
])
def test_a_dirname_creator_must_give_each_trial_its_own_folder(storage, creator, error, match):
    tuner = tune.Tuner(reports_its_names, param_space={"x": tune.grid_search([1, 2])},
                       tune_config=tune.TuneConfig(trial_dirname_creator=creator, max_concurrent_trials=1),
                       run_config=tune.RunConfig(storage_path=storage, verbose=0))
    with pytest.raises(error, match=match):
        tuner.fit()
