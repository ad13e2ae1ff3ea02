"""What Ray Tune 2.60's user guides show of a trial, as muster shows it: the files a trial folder holds
(Ray's default loggers add ``progress.csv`` and, with tensorboardX installed, TensorBoard events; each
``result.json`` row says ``done``), a best checkpoint's metrics ("Analyzing Tune Experiment Results"),
and a bad search space ("Working with Tune Search Spaces").

The expected values were read off Ray 2.60 running the same experiment (two trials of a function
reporting ``{"loss": ..., "nested": {"a": i}}`` three times)."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import sys
import tempfile

import pytest

from muster import tune

# Ray 2.60's progress.csv header for that experiment: the result's keys in its order, without config,
# nested dicts flattened after the others
RAY_CSV = [
    "loss", "timestamp", "checkpoint_dir_name", "done", "training_iteration", "trial_id", "date",
    "time_this_iter_s", "time_total_s", "pid", "hostname", "node_ip", "time_since_restore",
    "iterations_since_restore", "nested/a",
]
# the keys Tune adds to a result.json row, in Ray's order (muster's rows also hold the controller's)
RAY_JSON_TUNE_KEYS = [
    "done", "trial_id", "date", "time_this_iter_s", "time_total_s", "pid", "hostname", "node_ip", "config",
    "time_since_restore", "iterations_since_restore",
]


def _three(config):
    for i in range(3):
        tune.report({"loss": config["x"] * (i + 1), "nested": {"a": i}})


def _fit(storage, trainable=_three, **run):
    return tune.Tuner(
        trainable, param_space={"x": tune.grid_search([1, 2])},
        run_config=tune.RunConfig(storage_path=storage, name="exp", verbose=0, **run),
    ).fit()


def test_trial_folder_has_rays_default_logger_files(storage):
    grid = _fit(storage, stop={"training_iteration": 2})
    for result in grid:
        files = os.listdir(result.path)
        with open(os.path.join(result.path, "progress.csv"), newline="") as f:
            rows = list(csv.DictReader(f))
        assert list(rows[0]) == RAY_CSV
        # as Ray's loggers log it: the result the stopper stopped the trial on says done
        assert [r["done"] for r in rows] == ["False", "True"]
        assert [r["nested/a"] for r in rows] == ["0", "1"]
        assert any(f.startswith("events.out.tfevents.") for f in files) == bool(  # the suite's driver has torch
            importlib.util.find_spec("tensorboardX") and "torch" in sys.modules)
        with open(os.path.join(result.path, "result.json")) as f:
            lines = [json.loads(line) for line in f]
        assert [line["done"] for line in lines] == [False, True]  # Ray's result.json too (its JsonLoggerCallback)
        tune_keys = [k for k in lines[0] if k in RAY_JSON_TUNE_KEYS]
        assert tune_keys == RAY_JSON_TUNE_KEYS
        assert list(lines[0])[:2] == ["loss", "nested"]  # the reported metrics first, as Ray's


def test_auto_loggers_off_under_rays_env_var_and_not_doubled(storage, monkeypatch):
    from muster.tune.logger import CSVLoggerCallback

    monkeypatch.setenv("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    grid = _fit(storage)
    files = os.listdir(grid[0].path)
    assert "progress.csv" not in files and not any(f.startswith("events.out") for f in files)
    assert "result.json" in files
    monkeypatch.delenv("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS")
    logdir = os.path.join(storage, "csv")  # the user's own CSV logger replaces the default one
    grid = tune.Tuner(_three, run_config=tune.RunConfig(
        storage_path=storage, name="own", verbose=0, callbacks=[CSVLoggerCallback(logdir=logdir)]),
        param_space={"x": 1}).fit()
    assert "progress.csv" not in os.listdir(grid[0].path)
    (own,) = os.listdir(logdir)
    with open(os.path.join(logdir, own, "progress.csv")) as f:
        assert len(f.read().splitlines()) == 4


def _checkpointing(config):
    for i in range(2):
        folder = tempfile.mkdtemp()
        with open(os.path.join(folder, "model.txt"), "w") as f:
            f.write(str(i))
        tune.report({"acc": i}, checkpoint=tune.Checkpoint.from_directory(folder))


def test_best_checkpoints_metrics_as_rays(storage):
    grid = tune.Tuner(_checkpointing, param_space={"x": tune.grid_search([1])},
                      run_config=tune.RunConfig(storage_path=storage, name="ck", verbose=0)).fit()
    for checkpoint, metrics in grid[0].best_checkpoints:
        # Ray's: the result as logged, naming its checkpoint's folder; no experiment_tag
        assert metrics["checkpoint_dir_name"] == os.path.basename(checkpoint.path)
        assert "experiment_tag" not in metrics and metrics["done"] is False
        assert list(metrics)[:4] == ["acc", "timestamp", "checkpoint_dir_name", "should_checkpoint"]
    restored = tune.Tuner.restore(os.path.join(storage, "ck"), trainable=_checkpointing).get_results()
    assert restored[0].best_checkpoints[0][1]["checkpoint_dir_name"] == grid[0].best_checkpoints[0][1][
        "checkpoint_dir_name"]


def _scored(config):
    for i, loss in enumerate([3.0, 1.0, 2.0, 5.0, 4.0]):
        tune.report({"eval": {"loss": loss}, "i": i}, checkpoint=tune.Checkpoint.from_directory(tempfile.mkdtemp()))


@pytest.mark.parametrize("keep, order, best", [(2, "min", [1, 2]), (1, "max", [3])])
def test_best_checkpoints_are_the_num_to_keep_best(storage, keep, order, best):
    """As Ray 2.60 ranking by a flat "loss": the ``num_to_keep`` best; the latest, kept beside them (and
    ``result.checkpoint``), is not one unless it ranks (muster listed every kept one, newest first, as the
    trial's folder did not say what ranks them). muster lists the best first (docs/porting.md: Ray's list
    ends with it). A nested ``"eval/loss"`` ranks by the nested value; Ray 2.60 keeps only the latest for it
    (its ``score_attr in metrics`` test reads the unflattened result though the score it then takes is
    flattened)."""
    checkpointing = tune.CheckpointConfig(num_to_keep=keep, checkpoint_score_attribute="eval/loss",
                                          checkpoint_score_order=order)
    result = tune.Tuner(_scored, run_config=tune.RunConfig(storage_path=storage, verbose=0,
                                                           checkpoint_config=checkpointing)).fit()[0]
    assert [metrics["i"] for _, metrics in result.best_checkpoints] == best
    kept = [f for f in os.listdir(result.path) if f.startswith("checkpoint_")]
    assert len(kept) == len(best) + 1 and result.metrics["i"] == 4  # the latest is kept too
    assert os.path.basename(result.checkpoint.path) in kept


def test_randn_with_a_list_names_the_fix():
    # the search-space guide's tune.randn([0, 1, 2]): Ray's fit() fails with a ValueError
    with pytest.raises(ValueError, match=r"mean=\[0, 1, 2\].*tune.choice\(\[0, 1, 2\]\)"):
        tune.randn([0, 1, 2])
