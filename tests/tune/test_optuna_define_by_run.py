"""OptunaSearch with a define-by-run space, with several objectives and with points evaluated elsewhere; a failed
trial's cause on the console."""

from __future__ import annotations

import pytest

from muster import tune

optuna = pytest.importorskip("optuna")  # the `tune` extra


def _objective(config):
    for i in range(3):
        tune.report({"loss": (config["x"] - 0.3) ** 2 + config["net"]["w"] / 100, "size": config["net"]["w"],
                     "tag": config["tag"]})


def _define_by_run(trial):
    trial.suggest_float("x", -1.0, 1.0)
    trial.suggest_int("net/w", 1, 8)  # "/" nests: config["net"]["w"]
    return {"tag": "const"}


def test_define_by_run_space_samples_every_trial(storage):
    from muster.tune.search import OptunaSearch

    searcher = OptunaSearch(space=_define_by_run, metric="loss", mode="min", seed=1)
    grid = tune.Tuner(
        _objective,
        tune_config=tune.TuneConfig(num_samples=4, search_alg=searcher, max_concurrent_trials=2),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert len(grid) == 4 and grid.num_errors == 0, grid.errors
    for r in grid:
        assert -1 <= r.config["x"] <= 1 and 1 <= r.config["net"]["w"] <= 8 and r.config["tag"] == "const"
    assert len({r.config["x"] for r in grid}) == 4
    assert sum(t.state.name == "COMPLETE" for t in searcher._study.trials) == 4


def test_multi_objective_study(storage):
    from muster.tune.search import OptunaSearch

    searcher = OptunaSearch(space=_define_by_run, metric=["loss", "size"], mode=["min", "min"], seed=2)
    grid = tune.Tuner(
        _objective,
        tune_config=tune.TuneConfig(num_samples=3, search_alg=searcher, max_concurrent_trials=2),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert grid.num_errors == 0
    done = [t for t in searcher._study.trials if t.state.name == "COMPLETE"]
    assert len(done) == 3 and all(len(t.values) == 2 for t in done)
    assert searcher._study.best_trials  # the Pareto front
    with pytest.raises(ValueError, match="same length"):
        OptunaSearch(metric=["loss", "size"], mode=["min"])


def _needs_missing_key(config):
    tune.report({"loss": config["missing_key"]})


def test_failed_trial_shows_its_root_cause_on_the_console(storage, capsys):
    grid = tune.Tuner(
        _needs_missing_key,
        param_space={"x": 1},
        tune_config=tune.TuneConfig(num_samples=1),
        run_config=tune.RunConfig(storage_path=storage, verbose=1),
    ).fit()
    assert grid.num_errors == 1
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if " ERROR: " in ln)
    assert "KeyError" in line and "missing_key" in line, out
    assert "config[\"missing_key\"]" in out or "_needs_missing_key" in out, out  # a traceback line


def test_evaluated_rewards_are_told_to_the_study_not_run(storage):
    from muster.tune.search import OptunaSearch

    objects = [("a",), ("b",)]  # a choice of Python objects: Optuna records their indexes
    points = [{"x": 0.3, "net": {"w": 1}, "obj": ("a",)}, {"x": -1.0, "net": {"w": 8}, "obj": ("b",)}]
    searcher = OptunaSearch(points_to_evaluate=points, evaluated_rewards=[0.01, 1.77], seed=0)
    grid = tune.Tuner(
        _objective,
        param_space={"x": tune.uniform(-1.0, 1.0), "net": {"w": tune.randint(1, 9)}, "obj": tune.choice(objects),
                     "tag": "t"},
        tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=3, search_alg=searcher),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert len(grid) == 3 and grid.num_errors == 0
    assert all(r.config["x"] not in (0.3, -1.0) for r in grid)  # the evaluated points did not run
    told = searcher._study.trials[:2]
    assert [t.values for t in told] == [[0.01], [1.77]] and [t.state.name for t in told] == ["COMPLETE"] * 2
    assert [t.params for t in told] == [{"x": 0.3, "net/w": 1, "obj": 0}, {"x": -1.0, "net/w": 8, "obj": 1}]
    assert len(searcher._study.trials) == 5


def test_add_evaluated_point_and_its_bad_input():
    from muster.exceptions import InvalidArgumentError
    from muster.tune.search import OptunaSearch

    space = {"x": tune.uniform(-1.0, 1.0), "n": tune.qrandint(0, 10, 2)}
    searcher = OptunaSearch(space=space, metric="loss", mode="min")
    searcher.add_evaluated_point({"x": 0.5, "n": 4}, 0.25, intermediate_values=[1.0, 0.5])
    searcher.add_evaluated_point({"x": 0.1, "n": 2}, 0.0, error=True)
    trials = searcher._study.trials
    assert [(t.state.name, t.params) for t in trials] == [("COMPLETE", {"x": 0.5, "n": 4}),
                                                          ("FAIL", {"x": 0.1, "n": 2})]
    assert trials[0].intermediate_values == {0: 1.0, 1: 0.5}
    with pytest.raises(InvalidArgumentError, match="lack 'n'"):
        searcher.add_evaluated_point({"x": 0.5}, 0.1)
    with pytest.raises(InvalidArgumentError, match="1 reward"):
        OptunaSearch(points_to_evaluate=[{"x": 1}, {"x": 2}], evaluated_rewards=[0.1])
    with pytest.raises(InvalidArgumentError, match="define-by-run"):
        OptunaSearch(space=_define_by_run, points_to_evaluate=[{"x": 1}], evaluated_rewards=[0.1])


def _loss_of_x(config):
    tune.report({"loss": config["x"] ** 2})


def test_a_study_in_storage_keeps_the_trials_and_a_second_run_adds_to_it(storage, tmp_path):
    """Ray's OptunaSearch(study_name=, storage=): the study lives in that storage (muster refused both)."""
    from muster.tune.search import OptunaSearch

    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    space = {"x": tune.uniform(-1, 1)}
    for runs, where in ((1, url), (2, optuna.storages.RDBStorage(url))):
        searcher = OptunaSearch(space, metric="loss", mode="min", seed=runs, study_name="kept", storage=where)
        grid = tune.Tuner(_loss_of_x, tune_config=tune.TuneConfig(num_samples=3, search_alg=searcher),
                          run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
        assert grid.num_errors == 0, grid.errors
        study = optuna.load_study(study_name="kept", storage=url)
        assert sum(t.state.name == "COMPLETE" for t in study.trials) == 3 * runs
    with pytest.raises(TypeError, match="storage=42.*RDBStorage"):
        OptunaSearch(space, metric="loss", mode="min", storage=42)


def test_quantized_log_domains_keep_their_log_scale_as_in_rays_optuna_search(caplog):
    """qloguniform was drawn linearly (its step kept, its log scale dropped: most draws above 0.1 of 1e-3..1);
    Ray keeps the log scale and drops the step, saying so. qlograndint with q > 1 is refused, as Optuna does."""
    from muster.exceptions import InvalidArgumentError
    from muster.tune.search import OptunaSearch

    searcher = OptunaSearch(space={"y": tune.qloguniform(1e-3, 1.0, 1e-3)}, metric="loss", mode="min", seed=1)
    with caplog.at_level("WARNING", logger="muster.tune"):
        ys = [searcher.suggest(f"t{i}")["y"] for i in range(40)]
    assert sum(y < 0.1 for y in ys) > len(ys) / 2, ys  # two of the three decades are below 0.1
    assert "without its q=0.001" in caplog.text
    with pytest.raises(InvalidArgumentError, match=r"log scale with q=4.*tune.lograndint"):
        OptunaSearch(space={"c": tune.qlograndint(1, 64, 4)}, metric="loss", mode="min").suggest("t0")
