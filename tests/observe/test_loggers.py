"""Logger callbacks on a real run, checked by reading back what they wrote."""

from __future__ import annotations

import csv
import json
import os
import time

import pytest

import muster.train as train
from muster.observe.loggers import CSVLoggerCallback, JsonLoggerCallback, MLflowLoggerCallback, TBXLoggerCallback
from muster.train import RunConfig, ScalingConfig
from muster.train.torch import TorchTrainer


def loop():
    rank = train.get_context().get_world_rank()
    for step in range(3):
        train.report({"loss": 1.0 / (step + 1) + rank, "lr": 0.1, "extra": {"grad_norm": float(step)}})
    train.report({"loss": 0.0 + rank, "lr": 0.1, "extra": {"grad_norm": 3.0}, "late": "yes"})


def _fit(storage, name, callbacks):
    return TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=2),
                        run_config=RunConfig(name=name, storage_path=storage, verbose=0, callbacks=callbacks)).fit()


def test_csv_and_json_keep_every_report_of_every_rank(storage):
    result = _fit(storage, "files", [CSVLoggerCallback(), JsonLoggerCallback()])
    with open(os.path.join(result.path, "progress.csv")) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 8 == len(result.all_reports)
    assert sorted((int(r["_rank"]), int(r["training_iteration"])) for r in rows) == [
        (rank, it) for rank in (0, 1) for it in (1, 2, 3, 4)
    ]
    # a metric that first appears late widens the header; earlier rows have it empty
    assert {r["late"] for r in rows if r["training_iteration"] == "4"} == {"yes"}
    assert {r["late"] for r in rows if r["training_iteration"] != "4"} == {""}
    assert "extra/grad_norm" in rows[0] and "extra" not in rows[0]  # nested metrics flattened, as Ray's CSV
    with open(os.path.join(result.path, "progress.json")) as f:
        lines = [json.loads(line) for line in f]
    assert len(lines) == 8 and {line["_rank"] for line in lines} == {0, 1}
    assert [line["loss"] for line in lines if line["_rank"] == 1] == [2.0, 1.5, pytest.approx(4 / 3), 1.0]


def _own_keys_loop():
    for step in range(1, 3):
        train.report({"loss": 1.0, "training_iteration": 10 * step})


def test_a_functions_own_training_iteration_shows_in_the_files_without_bookkeeping(storage):
    # what the function reported under the controller's keys shows as reported (as its Result shows it);
    # the controller's _own_run_keys never reaches the files
    result = TorchTrainer(_own_keys_loop, run_config=RunConfig(
        name="own", storage_path=storage, verbose=0, callbacks=[CSVLoggerCallback(), JsonLoggerCallback()])).fit()
    assert result.metrics["training_iteration"] == 20
    with open(os.path.join(result.path, "progress.json")) as f:
        lines = [json.loads(line) for line in f]
    with open(os.path.join(result.path, "progress.csv")) as f:
        rows = list(csv.DictReader(f))
    assert [line["training_iteration"] for line in lines] == [10, 20] == [int(r["training_iteration"]) for r in rows]
    assert all("_own_run_keys" not in line and line["_rank"] == 0 and "_attempt" in line for line in lines)
    assert "_own_run_keys" not in rows[0] and "_round" not in rows[0]


def test_tensorboard_scalars_of_rank_zero(storage):
    pytest.importorskip("tensorboardX")
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    result = _fit(storage, "tb", [TBXLoggerCallback()])
    # a training run's go into <run folder>/tensorboard/, beside its checkpoints and result.json
    assert not any(f.startswith("events.out.tfevents.") for f in os.listdir(result.path))
    acc = event_accumulator.EventAccumulator(os.path.join(result.path, "tensorboard"))
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == {"loss", "lr", "extra/grad_norm"}
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [
        (1, 1.0), (2, 0.5), (3, pytest.approx(1 / 3)), (4, 0.0)
    ]
    assert [e.value for e in acc.Scalars("extra/grad_norm")] == [0.0, 1.0, 2.0, 3.0]


def _fails_after_three_reports():
    for step in range(3):
        train.report({"loss": 1.0 / (step + 1)})
    raise RuntimeError("the run fails for good after its reports")


def test_a_failed_training_runs_loggers_close_and_keep_its_last_events(storage):
    # a run that fails for good gets on_run_failed (no on_run_end comes): TensorBoard's writer closes, so the
    # events reported just before the failure are on disk at once (muster left it open: up to flush_secs=5 lost)
    pytest.importorskip("tensorboardX")
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    tb = TBXLoggerCallback()
    trainer = TorchTrainer(_fails_after_three_reports, scaling_config=ScalingConfig(num_workers=1),
                           run_config=RunConfig(name="fails", storage_path=storage, verbose=0, callbacks=[tb]))
    with pytest.raises(train.TrainingFailedError):
        trainer.fit()
    acc = event_accumulator.EventAccumulator(os.path.join(storage, "fails", "tensorboard"))
    acc.Reload()
    assert "loss" in acc.Tags()["scalars"], acc.Tags()
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(1, 1.0), (2, 0.5), (3, pytest.approx(1 / 3))]
    assert tb.failed and tb._writer is None  # (a trainer's run uses the callback given, not a copy)


def test_tensorboard_all_ranks(storage, tmp_path):
    pytest.importorskip("tensorboardX")
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    _fit(storage, "tb_all", [TBXLoggerCallback(logdir=str(tmp_path / "tb"), all_ranks=True)])
    acc = event_accumulator.EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert [e.value for e in acc.Scalars("rank1/loss")][-1] == 1.0 and "rank0/loss" in acc.Tags()["scalars"]


def _stepped_trial(config):
    from muster import tune

    for i in range(2):
        tune.report({"score": config["x"] * i, "extra": {"i": i}, "timesteps_total": 100 * (i + 1),
                     "nan": float("nan")})


def test_tensorboard_names_a_trials_scalars_as_rays_tune_logger(storage):
    # Ray 2.60's TBXLoggerCallback: ray/tune/<key>, without config/pid/timestamp/time_total_s/training_iteration
    # or NaN, at step timesteps_total (else training_iteration)
    pytest.importorskip("tensorboardX")
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    from muster import tune

    grid = tune.Tuner(_stepped_trial, param_space={"x": 3, "opt": {"lr": 0.5}},
                      run_config=tune.RunConfig(storage_path=storage, verbose=0, callbacks=[TBXLoggerCallback()])).fit()
    # in the trial's folder itself, as Ray's: `tensorboard --logdir <experiment>` shows one run per trial
    assert any(f.startswith("events.out.tfevents.") for f in os.listdir(grid[0].path))
    assert not os.path.exists(os.path.join(grid[0].path, "tensorboard"))
    acc = event_accumulator.EventAccumulator(grid[0].path)
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == {f"ray/tune/{k}" for k in (
        "score", "extra/i", "timesteps_total", "done", "time_this_iter_s", "time_since_restore",
        "iterations_since_restore")}
    assert [(e.step, e.value) for e in acc.Scalars("ray/tune/score")] == [(100, 0.0), (200, 3.0)]


def _timed_trial(config):
    from muster import tune

    tune.report({"score": 1})
    tune.report({"score": 2, "timestamp": 123})


def _tuned_rows(storage, name):
    """The trial's Result, its progress.json lines and progress.csv rows."""
    from muster import tune

    grid = tune.Tuner(_timed_trial, param_space={"x": tune.grid_search([1])}, run_config=tune.RunConfig(
        storage_path=storage, name=name, verbose=0, callbacks=[CSVLoggerCallback(), JsonLoggerCallback()])).fit()
    with open(os.path.join(grid[0].path, "progress.json")) as f:
        lines = [json.loads(line) for line in f]
    with open(os.path.join(grid[0].path, "progress.csv")) as f:
        return grid[0], lines, list(csv.DictReader(f))


def test_a_trials_timestamp_is_whole_seconds_as_rays(storage):
    # Ray's Trainable stamps a result with int seconds, unless the function reported its own timestamp
    before = int(time.time())
    _, lines, rows = _tuned_rows(storage, "stamped")
    assert type(lines[0]["timestamp"]) is int and before <= lines[0]["timestamp"] <= time.time()
    assert rows[0]["timestamp"] == str(lines[0]["timestamp"]) and lines[1]["timestamp"] == 123


def test_a_trials_logged_results_have_no_experiment_tag_as_rays(storage):
    # Ray's trial adds experiment_tag to its last result after the callbacks logged it: only the Result has it
    result, lines, rows = _tuned_rows(storage, "tagged")
    assert result.metrics["experiment_tag"] == "0_x=1"
    assert all("experiment_tag" not in line for line in lines) and "experiment_tag" not in rows[0]


def test_mlflow_run_with_metrics_and_params(storage, tmp_path):
    tracking = pytest.importorskip("mlflow.tracking")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    callback = MLflowLoggerCallback(uri, experiment_name="muster-test", tags={"team": "infra"},
                                    params={"lr": 0.1, "layers": 2})
    result = _fit(storage, "mlf", [callback])
    client = tracking.MlflowClient(tracking_uri=uri)
    run = client.get_run(callback.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "mlf"
    assert run.data.params == {"lr": "0.1", "layers": "2"}
    assert run.data.tags["team"] == "infra" and run.data.tags["muster.run_path"] == result.path
    history = client.get_metric_history(callback.run_id, "loss")
    assert sorted((m.step, m.value) for m in history) == [(1, 1.0), (2, 0.5), (3, pytest.approx(1 / 3)), (4, 0.0)]


def test_mlflow_rays_options_artifacts_late_params_registry_and_token(storage, tmp_path):
    # Ray's MLflowLoggerCallback(save_artifact=True, log_params_on_trial_end=True, ...), as its mlflow example passes
    tracking = pytest.importorskip("mlflow.tracking")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.MlflowClient(tracking_uri=uri)
    client.create_experiment("arts", artifact_location=str(tmp_path / "artifacts"))  # not ./mlruns in the cwd
    callback = MLflowLoggerCallback(uri, registry_uri=uri, experiment_name="arts", tracking_token="tok",
                                    save_artifact=True, log_params_on_trial_end=True, params={"lr": 0.1})
    result = _fit(storage, "arts", [callback])
    run = client.get_run(callback.run_id)
    assert run.info.status == "FINISHED" and run.data.params == {"lr": "0.1"}
    uploaded = {a.path for a in client.list_artifacts(callback.run_id)}
    assert uploaded and uploaded <= set(os.listdir(result.path)) and "result.json" in uploaded, uploaded
    assert os.environ["MLFLOW_TRACKING_TOKEN"] == "tok"


def _trial(config):
    from muster import tune

    for i in range(2):
        tune.report({"score": config["x"] * i, "extra": {"i": i}})


def test_loggers_in_a_tuner_write_each_trials_own_files_and_mlflow_run(storage, tmp_path):
    """Ray's Tune guides pass the loggers (by Ray's import paths) in tune.RunConfig(callbacks=);
    each trial gets its files in its folder and its own MLflow run with its config as params.
    Before, a Tuner over a function skipped them silently."""
    tracking = pytest.importorskip("mlflow.tracking")
    from muster import tune
    from muster.air.integrations.mlflow import MLflowLoggerCallback as AirMLflow
    from muster.tune.logger import CSVLoggerCallback as TuneCSV

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    grid = tune.Tuner(_trial, param_space={"x": tune.grid_search([1, 2])},
                      run_config=tune.RunConfig(storage_path=storage, name="logged", verbose=0,
                                                callbacks=[TuneCSV(), AirMLflow(uri, experiment_name="tuned")])).fit()
    for r in grid:
        with open(os.path.join(r.path, "progress.csv")) as f:
            rows = list(csv.DictReader(f))
        assert [float(row["score"]) for row in rows] == [0.0, float(r.config["x"])] and "extra/i" in rows[0]
    assert "extra/i" in grid.get_dataframe().columns and "extra/i" in grid[0].metrics_dataframe.columns
    client = tracking.MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("tuned").experiment_id])
    assert sorted(run.data.params["x"] for run in runs) == ["1", "2"]  # one run per trial, its config
    assert all(run.info.status == "FINISHED" for run in runs)


def test_concurrent_trials_share_the_mlflow_experiment_they_make(storage, tmp_path, monkeypatch):
    # each trial's copy looks the experiment up when its run starts: two used to both create it, one failing
    # (likeliest on MLflow's file store, which Ray's mlflow example uses)
    tracking = pytest.importorskip("mlflow.tracking")
    from muster import tune

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = str(tmp_path / "mlruns")
    grid = tune.Tuner(_trial, param_space={"x": tune.grid_search([1, 2, 3, 4, 5, 6])},
                      run_config=tune.RunConfig(storage_path=storage, verbose=0,
                                                callbacks=[MLflowLoggerCallback(uri, experiment_name="shared")])).fit()
    assert grid.num_errors == 0, grid.errors
    client = tracking.MlflowClient(tracking_uri=uri)
    assert len(client.search_runs([client.get_experiment_by_name("shared").experiment_id])) == 6


def test_remote_run_folder_needs_a_logdir():
    with pytest.raises(ValueError, match=r"logdir='/a/local/folder'"):
        CSVLoggerCallback().on_run_start("s3://bucket/runs/x", "x")


def test_mlflow_records_every_numeric_result_value_as_rays_does(storage, tmp_path, monkeypatch):
    # Ray 2.60's MLflowLoggerCallback logs each value of a trial's result that float() takes, Tune's own included
    tracking = pytest.importorskip("mlflow.tracking")
    from muster import tune

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = str(tmp_path / "mlruns")  # MLflow's local file store
    grid = tune.Tuner(_trial, param_space={"x": 3, "opt": {"lr": 0.5}},
                      run_config=tune.RunConfig(storage_path=storage, verbose=0, name="numbers",
                                                callbacks=[MLflowLoggerCallback(uri, experiment_name="all")])).fit()
    assert grid.num_errors == 0, grid.errors
    client = tracking.MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("all").experiment_id])
    assert run.data.params == {"x": "3", "opt/lr": "0.5"}
    logged = run.data.metrics
    for key in ("score", "extra/i", "training_iteration", "timestamp", "time_total_s", "time_this_iter_s",
                "time_since_restore", "iterations_since_restore", "pid", "done", "config/x", "config/opt/lr"):
        assert key in logged, (key, sorted(logged))
    assert logged["config/x"] == 3.0 and logged["pid"] == grid[0].metrics["pid"] and logged["done"] == 0.0
    assert not {k for k in logged if k.startswith("_")}  # muster's bookkeeping is no part of Ray's result
    history = client.get_metric_history(run.info.run_id, "training_iteration")
    assert sorted((m.step, m.value) for m in history) == [(1, 1.0), (2, 2.0)]


def _scored_trial(config):
    from muster import tune

    for i in range(1, 4):
        tune.report({"score": config["x"] * i})


def test_a_logdir_in_a_tuner_keeps_each_trials_files_apart(storage, tmp_path):
    # Ray 2.60's TBX/CSV/Json loggers take no logdir (each trial writes into its own folder); muster's
    # logdir= holds one folder per trial, named as the trial's in the experiment, never one for all
    pytest.importorskip("tensorboardX")
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    from muster import tune

    where = {kind: str(tmp_path / kind) for kind in ("tb", "csv", "json")}
    grid = tune.Tuner(_scored_trial, param_space={"x": tune.grid_search([1, 10])}, run_config=tune.RunConfig(
        storage_path=storage, name="own_logdir", verbose=0, callbacks=[
            TBXLoggerCallback(logdir=where["tb"]), CSVLoggerCallback(logdir=where["csv"]),
            JsonLoggerCallback(logdir=where["json"])])).fit()
    assert grid.num_errors == 0 and len(grid) == 2
    names = sorted(os.path.basename(r.path) for r in grid)
    for kind in where:
        assert sorted(os.listdir(where[kind])) == names, kind
    for r in grid:
        x, name = r.config["x"], os.path.basename(r.path)
        acc = event_accumulator.EventAccumulator(os.path.join(where["tb"], name))
        acc.Reload()
        assert [(e.step, e.value) for e in acc.Scalars("ray/tune/score")] == [(1, x), (2, 2 * x), (3, 3 * x)]
        with open(os.path.join(where["csv"], name, "progress.csv")) as f:
            rows = list(csv.DictReader(f))
        assert [(row["trial_id"], float(row["score"])) for row in rows] == [(r.metrics["trial_id"], x * i)
                                                                           for i in (1, 2, 3)]
        with open(os.path.join(where["json"], name, "progress.json")) as f:
            assert [json.loads(line)["score"] for line in f] == [x, 2 * x, 3 * x]
    # as Ray's, none takes a positional argument
    for logger in (TBXLoggerCallback, CSVLoggerCallback, JsonLoggerCallback):
        with pytest.raises(TypeError, match="positional"):
            logger(where["tb"])


def test_csv_of_a_resumed_run_keeps_its_earlier_rows_and_loggers_pickle(tmp_path):
    """A trial resumed by Tuner.restore logs into the progress.csv it had: the earlier rows stay (Ray appends;
    muster's rewrote the file from the rows of the resumed part only). The loggers pickle with the Tuner's
    RunConfig, so a restored experiment has them (their lock is made anew)."""
    import cloudpickle

    first = CSVLoggerCallback()
    first.on_run_start(str(tmp_path), "run")
    first.on_report({"training_iteration": 1, "loss": 0.5})
    first.on_run_end(None)
    resumed = cloudpickle.loads(cloudpickle.dumps(CSVLoggerCallback()))
    resumed.on_run_start(str(tmp_path), "run")
    resumed.on_report({"training_iteration": 2, "loss": 0.25, "acc": 0.9})  # a new column: the file is rewritten
    resumed.on_run_end(None)
    with open(tmp_path / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["training_iteration"], r["loss"], r["acc"]) for r in rows] == [("1", "0.5", ""), ("2", "0.25", "0.9")]
