"""What a Tune result holds: any value a trainable reports, and the fields Tune fills in, as in Ray."""

from __future__ import annotations

import datetime
import json
import os

import numpy as np

from muster import train, tune
from muster.train import ScalingConfig
from muster.train.torch import TorchTrainer


class Label:
    """An object of the user's own, reported as a metric."""

    def __init__(self, text):
        self.text = text

    def __str__(self):
        return f"Label({self.text})"


def _odd_values(config):
    for i in range(2):
        tune.report({"loss": 1.0 - i, "arr": np.arange(3) * config["k"], "when": datetime.datetime(2024, 5, 6, 7, 8),
                     "tags": {"a"}, "label": Label("x"), "f32": np.float32(0.5)})


class _Seen(tune.Stopper):
    """Records the types of what it is shown (it runs in the driver)."""

    def __init__(self):
        self.types = []

    def __call__(self, trial_id, result):
        self.types.append((type(result["arr"]), type(result["tags"]), type(result["label"])))
        return False

    def stop_all(self):
        return False


def test_function_trainable_keeps_values_that_are_not_plain(storage):
    seen = _Seen()
    grid = tune.Tuner(
        _odd_values, param_space={"k": tune.grid_search([1, 2])},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(name="odd", storage_path=storage, stop=seen),
    ).fit()
    assert grid.num_errors == 0, grid.errors
    for r in grid:
        m = r.metrics
        assert isinstance(m["arr"], np.ndarray) and m["arr"].tolist() == [0, r.config["k"], 2 * r.config["k"]]
        assert m["when"] == datetime.datetime(2024, 5, 6, 7, 8) and m["tags"] == {"a"}
        assert isinstance(m["label"], Label) and m["label"].text == "x"
        assert m["f32"] == 0.5
        # the logs on disk hold what JSON can: arrays as lists, dates as ISO text, sets as lists, others as str()
        df = r.metrics_dataframe
        assert list(df["arr"].iloc[-1]) == m["arr"].tolist() and df["when"].iloc[-1] == "2024-05-06T07:08:00"
        assert df["tags"].iloc[-1] == ["a"] and df["label"].iloc[-1] == "Label(x)"
        with open(os.path.join(r.path, "result.json")) as f:
            assert json.loads(f.readline())["arr"] == m["arr"].tolist()
    assert seen.types and set(seen.types) == {(np.ndarray, set, Label)}  # stoppers get them as reported
    assert grid.get_best_result().metrics["loss"] == 0.0


def _train_loop(config):
    train.report({"loss": 0.5, "arr": np.ones(2), "tags": {"b"}, "label": Label("y")})


def test_train_report_in_a_trainer_keeps_them_too(storage):
    trainer = TorchTrainer(_train_loop, scaling_config=ScalingConfig(num_workers=1))
    grid = tune.Tuner(trainer, run_config=tune.RunConfig(name="odd_trainer", storage_path=storage)).fit()
    assert grid.num_errors == 0, grid.errors
    m = grid[0].metrics
    assert isinstance(m["arr"], np.ndarray) and m["tags"] == {"b"} and m["label"].text == "y"
    alone = TorchTrainer(_train_loop, scaling_config=ScalingConfig(num_workers=1),
                         run_config=train.RunConfig(name="alone", storage_path=storage)).fit()
    assert isinstance(alone.metrics["arr"], np.ndarray) and alone.metrics["tags"] == {"b"}


def _with_pid(config):
    for _ in range(2):
        tune.report({"loss": config["lr"], "my_pid": os.getpid()})


class _Fields(tune.Stopper):
    def __init__(self):
        self.seen = []

    def __call__(self, trial_id, result):
        # Ray's trial adds experiment_tag to its last result after the stopper ran (checked under Ray 2.60)
        self.seen.append(("experiment_tag" in result, result["pid"], result["my_pid"], result["config"]["lr"]))
        return False

    def stop_all(self):
        return False


def test_results_have_rays_auto_filled_fields(storage):
    fields = _Fields()
    grid = tune.Tuner(
        _with_pid, param_space={"lr": tune.grid_search([0.01, 0.1]), "fixed": {"depth": 3}},
        run_config=tune.RunConfig(name="fields", storage_path=storage, stop=fields),
    ).fit()
    assert grid.num_errors == 0, grid.errors
    auto = {"trial_id", "date", "timestamp", "time_this_iter_s", "time_total_s", "pid", "hostname", "node_ip",
            "config", "time_since_restore", "iterations_since_restore", "experiment_tag", "done",
            "training_iteration"}
    by_lr = {r.config["lr"]: r.metrics for r in grid}
    for m in by_lr.values():
        assert auto <= set(m), auto - set(m)
        assert m["pid"] == m["my_pid"] != os.getpid()  # the trial's process, not the driver
    # Ray's tag: the trial's index, then the searched values (floats to 4 places), constants left out
    assert by_lr[0.01]["experiment_tag"] == "0_lr=0.0100" and by_lr[0.1]["experiment_tag"] == "1_lr=0.1000"
    # schedulers, searchers and stoppers see them in every result, config included (the tag not yet)
    assert sorted(set(fields.seen)) == sorted({(False, m["pid"], m["pid"], lr) for lr, m in by_lr.items()})
    df = grid[0].metrics_dataframe  # Ray's rows, read from its result.json: its trial adds the tag after
    assert "experiment_tag" not in df.columns and list(df["config/lr"]) == [grid[0].config["lr"]] * 2


def _trainer_pid(config):
    train.report({"my_pid": os.getpid(), "rank": train.get_context().get_world_rank()})


def test_trainer_trial_results_have_them_too(storage):
    trainer = TorchTrainer(_trainer_pid, scaling_config=ScalingConfig(num_workers=2))
    grid = tune.Tuner(
        trainer, param_space={"train_loop_config": {"lr": tune.grid_search([0.5])}},
        run_config=tune.RunConfig(name="trainer_fields", storage_path=storage),
    ).fit()
    m = grid[0].metrics
    assert m["rank"] == 0 and m["pid"] == m["my_pid"] != os.getpid()
    assert m["experiment_tag"] == "0_lr=0.5000"


def test_experiment_tags_as_rays_search_algorithms_make_them():
    from muster.tune.search import BasicVariantGenerator, Searcher
    from muster.tune.search.searcher import SearchGenerator

    config = {"lr": 0.01, "opt": {"m": 0.9}, "name": "a b/c"}
    # a Searcher's trials: counted from 1, every value of the config (Ray's SearchGenerator)
    assert SearchGenerator(Searcher()).experiment_tag(0, config) == "1_lr=0.0100,name=a_b_c,m=0.9000"
    basic = BasicVariantGenerator()
    basic.setup({"lr": tune.uniform(0, 1), "opt": {"m": tune.grid_search([0.9])}, "name": "a b/c"}, 1)
    assert basic.experiment_tag(4, config) == "4_lr=0.0100,m=0.9000"  # only what was searched
    basic.setup({"name": "fixed"}, 1)
    assert basic.experiment_tag(0, {"name": "fixed"}) == "0"



def _reports_nested(config):
    train.report({"loss": 0.5, "opt": {"lr": 0.1}})


def _fits_a_trainer(config):
    inner = TorchTrainer(_reports_nested, scaling_config=ScalingConfig(num_workers=1)).fit()
    with open(config["out"], "w") as f:
        json.dump({"keys": sorted(inner.metrics), "columns": sorted(inner.metrics_dataframe.columns)}, f)


def test_a_trainers_result_has_what_was_reported_and_its_trials_has_tunes_keys(storage, tmp_path):
    """Ray Train V2's Result holds only the reported metrics, even in a Tune trial; the trial's
    own result (Ray Tune's) holds Tune's keys, and its frame has nested metrics as a/b columns."""
    out = tmp_path / "inner.json"
    grid = tune.Tuner(_fits_a_trainer, param_space={"out": str(out)},
                      run_config=tune.RunConfig(name="inner", storage_path=storage)).fit()
    assert grid.num_errors == 0, grid.errors
    assert json.loads(out.read_text()) == {"keys": ["loss", "opt"], "columns": ["loss", "opt"]}
    m = grid[0].metrics
    assert m["opt"] == {"lr": 0.1}
    assert {"training_iteration", "timestamp", "trial_id", "time_total_s", "checkpoint_dir_name"} <= set(m)
    assert {"training_iteration", "timestamp", "trial_id", "opt/lr"} <= set(grid[0].metrics_dataframe.columns)


def _two_reports(config):
    tune.report({"loss": 1.0})
    tune.report({"loss": 0.5})


def test_a_single_trials_grid_gives_it_as_best_without_a_metric_and_checks_filter_mode(storage):
    """Ray's ``get_best_result()`` on a one-trial grid returns that trial even with no metric or mode
    anywhere (a common end of a doc sample); muster raised. ``get_dataframe(filter_mode="best")`` was
    accepted silently (Ray raises); it now names the bad value."""
    import pytest

    from muster.exceptions import InvalidArgumentError

    grid = tune.Tuner(_two_reports, run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    assert grid.get_best_result() is grid[0] and grid.get_best_result(metric="loss") is grid[0]
    assert grid.get_best_result("loss", "max", scope="all").metrics["loss"] == 0.5
    with pytest.raises(InvalidArgumentError, match=r"get_best_result\(scope='best'\)"):
        grid.get_best_result(scope="best")
    with pytest.raises(InvalidArgumentError, match=r"get_dataframe\(filter_mode='best'\): use 'min' or 'max'"):
        grid.get_dataframe(filter_metric="loss", filter_mode="best")
    assert grid.get_dataframe(filter_metric="loss", filter_mode="max")["loss"].tolist() == [1.0]
