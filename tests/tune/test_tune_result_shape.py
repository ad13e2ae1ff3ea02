"""A Tune trial's ``Result`` as Ray Tune 2.60's: its metrics' keys, order and types, its
``metrics_dataframe`` and ``ResultGrid.get_dataframe()`` columns, and the class hierarchy
(``ray.tune.Result`` is the base of ``ray.train.Result``).

The expected values were read off Ray 2.60 running the same experiment (two trials of a function
reporting ``{"loss": ..., "nested": {"a": i}}`` three times, ``param_space={"x": grid_search([1, 2]),
"fixed": 5}``)."""

from __future__ import annotations

import os
import pickle

import pandas as pd

from muster import air, train, tune
from muster.train import ScalingConfig
from muster.train.torch import TorchTrainer

# Ray 2.60's result.metrics of a finished trial, in its order
RAY_METRICS = {
    "loss": int, "nested": dict, "timestamp": int, "checkpoint_dir_name": type(None), "done": bool,
    "training_iteration": int, "trial_id": str, "date": str, "time_this_iter_s": float, "time_total_s": float,
    "pid": int, "hostname": str, "node_ip": str, "config": dict, "time_since_restore": float,
    "iterations_since_restore": int, "experiment_tag": str,
}
# Ray 2.60's result.metrics_dataframe columns (its result.json rows, json_normalize'd)
RAY_FRAME = [
    "loss", "timestamp", "checkpoint_dir_name", "done", "training_iteration", "trial_id", "date",
    "time_this_iter_s", "time_total_s", "pid", "hostname", "node_ip", "time_since_restore",
    "iterations_since_restore", "nested/a", "config/x", "config/fixed",
]


def _three(config):
    for i in range(3):
        tune.report({"loss": config["x"] * (i + 1), "nested": {"a": i}})


class _Seen(tune.Callback):
    def __init__(self):
        self.results = []

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.results.append(dict(result))


def _fit_loop(config):
    train.report({"step": 1})


def _fit(storage, **run):
    return tune.Tuner(
        _three, param_space={"x": tune.grid_search([1, 2]), "fixed": 5},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(storage_path=storage, name="exp", verbose=0, **run),
    ).fit()


def test_trial_metrics_have_rays_keys_order_and_types(storage):
    seen = _Seen()
    grid = _fit(storage, callbacks=[seen])
    assert grid.num_errors == 0, grid.errors
    for r in grid:
        # Ray's keys, in Ray's order, with Ray's types: timestamp is int(time.time())
        assert type(r.metrics["timestamp"]) is int
        assert {k: type(v) for k, v in r.metrics.items()} == RAY_METRICS
        assert list(r.metrics) == list(RAY_METRICS)
        assert r.metrics["done"] is True and r.metrics["config"] == r.config
    # callbacks get Ray's result: an int timestamp, done False, and no experiment_tag (Ray's trial adds it to
    # its last result after the callbacks; Ray's logging_example prints it without)
    assert len(seen.results) == 6
    assert all(type(x["timestamp"]) is int and x["done"] is False for x in seen.results)
    assert [list(x) for x in seen.results] == [[k for k in RAY_METRICS if k != "experiment_tag"]] * 6


def test_metrics_dataframe_and_get_dataframe_have_rays_columns(storage):
    grid = _fit(storage)
    for r in grid:
        df = r.metrics_dataframe  # no experiment_tag, a done column, config/ columns, nested ones last
        assert list(df.columns) == RAY_FRAME
        assert df["timestamp"].dtype == "int64" and df["done"].dtype == bool and not df["done"].any()
        assert list(df["config/x"]) == [r.config["x"]] * 3 and list(df["nested/a"]) == [0, 1, 2]
    # Ray's ExperimentAnalysis.dataframe: each trial's last row, config/ columns, then logdir (muster: path too)
    gdf = grid.get_dataframe()
    assert list(gdf.columns) == RAY_FRAME + ["logdir", "path"]
    assert gdf["timestamp"].dtype == "int64" and not gdf["done"].any()  # Ray: done only where stopped
    assert sorted(gdf["config/x"]) == [1, 2] and sorted(gdf["loss"]) == [3, 6]


def test_a_trials_result_is_a_tune_result_not_a_train_result(storage):
    grid = _fit(storage)
    assert issubclass(train.Result, tune.Result) and air.Result is tune.Result  # Ray's hierarchy
    assert all(type(r) is tune.Result for r in grid)
    assert not any(isinstance(r, train.Result) for r in grid)
    again = pickle.loads(pickle.dumps(grid[0]))
    assert type(again) is tune.Result and again.metrics == grid[0].metrics
    result = TorchTrainer(_fit_loop, scaling_config=ScalingConfig(num_workers=1),
                          run_config=train.RunConfig(name="run", storage_path=storage)).fit()
    assert type(result) is train.Result and isinstance(result, tune.Result)
    assert result.metrics == {"step": 1} and list(result.metrics_dataframe.columns) == ["step"]
    back = train.Result.from_path(result.path)
    assert type(back) is train.Result and back.metrics == {"step": 1} and back.config is None
    assert type(pickle.loads(pickle.dumps(result))) is train.Result


def test_a_stored_experiment_reads_back_the_same(storage):
    grid = _fit(storage)
    path = os.path.join(storage, "exp")
    restored = tune.Tuner.restore(path, _three).get_results()
    assert all(type(r) is tune.Result for r in restored)
    assert [r.metrics for r in restored] == [r.metrics for r in grid]
    assert list(restored.get_dataframe().columns) == RAY_FRAME + ["logdir", "path"]
    back = tune.Result.from_path(grid[0].path)  # Ray's from_path: the trial's last logged row
    assert type(back) is tune.Result and type(back.metrics["timestamp"]) is int and back.metrics["done"] is False
    pd.testing.assert_frame_equal(back.metrics_dataframe, grid[0].metrics_dataframe)
    assert type(train.Result.from_path(grid[0].path)) is tune.Result  # what the folder holds


def test_the_result_a_trial_was_stopped_on_says_done(storage):
    grid = _fit(storage, stop={"training_iteration": 2})
    for r in grid:
        df = r.metrics_dataframe  # Ray marks the result it stops a trial on before logging it
        assert list(df["training_iteration"][:2]) == [1, 2] and list(df["done"][:2]) == [False, True]
        assert r.metrics["done"] is True and r.metrics["training_iteration"] == 2
    assert grid.get_dataframe()["done"].all()
    low = grid.get_dataframe(filter_metric="loss", filter_mode="min")
    assert not low["done"].any() and list(low["training_iteration"]) == [1, 1]


def _checkpoints_first_and_last(config):
    import tempfile

    for i in range(3):
        with tempfile.TemporaryDirectory() as folder:
            checkpoint = tune.Checkpoint.from_directory(folder) if i != 1 else None
            tune.report({"loss": 1.0 / (i + 1)}, checkpoint=checkpoint)


def test_a_result_with_a_checkpoint_says_should_checkpoint(storage):
    """Ray's function trainable marks each result that carries a checkpoint ``should_checkpoint: True``
    (in ``metrics`` and as a ``metrics_dataframe`` column, empty on the other rows)."""
    result = tune.Tuner(_checkpoints_first_and_last,
                        run_config=tune.RunConfig(storage_path=storage, name="exp", verbose=0)).fit()[0]
    df = result.metrics_dataframe
    assert list(df["should_checkpoint"].notna()) == [True, False, True] and df["should_checkpoint"][0]
    assert list(df["checkpoint_dir_name"].notna()) == [True, False, True]
    assert result.metrics["should_checkpoint"] is True
    columns = list(df.columns)  # where Ray's rows put it
    assert columns.index("should_checkpoint") == columns.index("checkpoint_dir_name") + 1
