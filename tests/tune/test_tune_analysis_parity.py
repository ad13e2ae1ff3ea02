"""What a ported script reads off an experiment's analysis as Ray Tune 2.60 gives it.

The expected values were read off Ray 2.60 (``ray.init(address="local", num_cpus=2)``) running the same
experiment: two trials of a function reporting ``{"m": {"deep": {"c": 1}, "d": 2}, "score": x, "e": {}}``
once, ``config={"x": grid_search([1, 2]), "opt": {"inner": {"lr": 0.1}, "wd": 0.0}}``."""

from __future__ import annotations

import fsspec

from muster import tune

# Ray 2.60's ExperimentAnalysis.results_df and best_result_df columns: its flatten_dict keeps the other keys
# in place and puts each level of nesting after them (an empty dict leaves no column)
RAY_RESULTS_DF = [
    "score", "timestamp", "checkpoint_dir_name", "done", "training_iteration", "date", "time_this_iter_s",
    "time_total_s", "pid", "hostname", "node_ip", "time_since_restore", "iterations_since_restore",
    "experiment_tag", "m/d", "config/x", "m/deep/c", "config/opt/wd", "config/opt/inner/lr",
]
RAY_CONFIG_KEYS = ["config/x", "config/opt/wd", "config/opt/inner/lr"]


def _nested(config):
    tune.report({"m": {"deep": {"c": 1}, "d": 2}, "score": config["x"], "e": {}})


def test_results_df_columns_come_in_rays_order(storage):
    analysis = tune.run(_nested, config={"x": tune.grid_search([1, 2]), "opt": {"inner": {"lr": 0.1}, "wd": 0.0}},
                        metric="score", mode="max", storage_path=storage, name="exp", verbose=0)
    assert list(analysis.results_df.columns) == RAY_RESULTS_DF
    assert analysis.results_df.index.name == "trial_id"
    assert list(analysis.best_result_df.columns) == RAY_RESULTS_DF
    assert analysis.best_result_df["config/x"].tolist() == [2]
    assert [list(c) for c in analysis.get_all_configs(prefix=True).values()] == [RAY_CONFIG_KEYS] * 2


def test_a_result_grid_names_its_filesystem_as_rays(storage):
    grid = tune.Tuner(_nested, param_space={"x": 1, "opt": {}},
                      run_config=tune.RunConfig(storage_path=storage, name="exp", verbose=0)).fit()
    assert isinstance(grid.filesystem, fsspec.AbstractFileSystem)  # Ray's is pyarrow's: see docs/porting.md
    assert grid.filesystem.exists(grid.experiment_path)
    restored = tune.Tuner.restore(grid.experiment_path, trainable=_nested).get_results()
    assert restored.filesystem.exists(restored[0].path)
