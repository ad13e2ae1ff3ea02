"""TBXLoggerCallback against Ray 2.60's: what it charts of a Tune result, and the hparams of a trial's end.

Each test reads back the event files with TensorBoard's own EventAccumulator and hparams plugin protos.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from muster.observe.loggers import MLflowLoggerCallback, TBXLoggerCallback

pytest.importorskip("tensorboardX")
event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def _events(folder):
    acc = event_accumulator.EventAccumulator(folder, size_guidance={event_accumulator.SCALARS: 0,
                                                                   event_accumulator.HISTOGRAMS: 0})
    acc.Reload()
    return acc


def _hparams(acc):
    """The trial's hparams: ({name: value} of its session start, [hparam names], [metric tags])."""
    from tensorboard.plugins.hparams import plugin_data_pb2

    try:
        content = acc.PluginTagToContent("hparams")
    except KeyError:
        return None
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
    values = {k: getattr(v, v.WhichOneof("kind")) for k, v in start.hparams.items()}
    return values, [h.name for h in experiment.hparam_infos], [m.name.tag for m in experiment.metric_infos]


def test_numpy_values_are_charted_by_rays_rules(tmp_path):
    # Ray's: int/float and numpy float32/float64/int32/int64 as scalars, a 0-d array as a histogram;
    # float16, uint8, np.bool_ and strings are not charted. A training run's row: any real number.
    # Before, numpy's float32/int64 were dropped from both.
    from muster.tune.trial import Trial

    trial = TBXLoggerCallback().for_trial({}, Trial("t1", "t1", {}, str(tmp_path / "trial"), {}))
    trial.on_run_start(str(tmp_path / "trial"), "trial")
    trial.on_report({"trial_id": "t1", "training_iteration": 1, "f32": np.float32(0.5), "i64": np.int64(7),
                     "f64": np.float64(1.5), "i32": np.int32(3), "b": True, "arr0": np.array(2.5),
                     "f16": np.float16(1.5), "u8": np.uint8(4), "npb": np.bool_(True), "s": "text",
                     "nan": np.float32("nan")})
    trial.on_run_end(None)
    acc = _events(str(tmp_path / "trial"))
    assert set(acc.Tags()["scalars"]) == {f"ray/tune/{k}" for k in ("f32", "i64", "f64", "i32", "b", "done")}
    assert [e.value for e in acc.Scalars("ray/tune/f32")] == [0.5]
    assert [e.value for e in acc.Scalars("ray/tune/b")] == [1.0]
    assert acc.Tags()["histograms"] == ["ray/tune/arr0"]
    run = TBXLoggerCallback()
    run.on_run_start(str(tmp_path / "run"), "run")
    run.on_report({"training_iteration": 1, "_rank": 0, "f32": np.float32(0.5), "i64": np.int64(7), "s": "x"})
    run.on_run_end(None)
    acc = _events(str(tmp_path / "run" / "tensorboard"))
    assert set(acc.Tags()["scalars"]) == {"f32", "i64"} and [e.value for e in acc.Scalars("i64")] == [7.0]


def _arrays(config):
    from muster import tune

    for i in range(2):
        tune.report({"f32": np.float32(0.5 + i), "i64": np.int64(7 + i), "lst": [1.0, 2.0, 3.0 + i],
                     "vec": np.arange(4.0), "img": np.zeros((3, 4, 4)), "empty": [], "s": "str",
                     "score": config["lr"] * i})


def test_a_trials_lists_and_arrays_are_histograms_and_images_as_rays(storage):
    # Ray charts a non-empty list or array as a histogram (a 3-d array as an image); before, they were dropped
    from muster import tune

    grid = tune.Tuner(_arrays, param_space={"lr": 0.5}, run_config=tune.RunConfig(
        storage_path=storage, name="arrays", verbose=0, callbacks=[TBXLoggerCallback()])).fit()
    assert grid.num_errors == 0, grid.errors
    acc = _events(grid[0].path)
    assert sorted(acc.Tags()["histograms"]) == ["ray/tune/lst", "ray/tune/vec"]
    assert [(e.step, e.histogram_value.max) for e in acc.Histograms("ray/tune/lst")] == [(1, 3.0), (2, 4.0)]
    assert acc.Tags()["images"] == ["ray/tune/img"]
    assert {"ray/tune/f32", "ray/tune/i64", "ray/tune/score"} <= set(acc.Tags()["scalars"])
    assert [e.value for e in acc.Scalars("ray/tune/i64")] == [7.0, 8.0]


def _scored(config):
    from muster import tune

    for i in range(2):
        tune.report({"score": config["lr"] * i, "vec": [1.0, 2.0]})
    if config.get("fail"):
        raise RuntimeError("this trial fails after its reports")


def _space(tune, **extra):
    return {"lr": tune.grid_search([0.5]), "opt": {"mom": tune.choice([0.9]), "name": "sgd"}, "const": 3,
            "none": tune.choice([None]), "lst": tune.choice([[1, 2]]),
            "d": tune.grid_search([{"a": 1, "b": {"c": "x"}}]), **extra}


def test_a_trials_searched_values_are_its_hparams_as_rays(storage):
    # Ray writes a trial's evaluated_params (its grids' and domains' values, "a/b"; no constants), str/bool/
    # number kept, a list named without a value, None left out, with the last result's scalars as metrics
    from muster import tune

    grid = tune.Tuner(_scored, param_space=_space(tune), run_config=tune.RunConfig(
        storage_path=storage, name="hp", verbose=0, callbacks=[TBXLoggerCallback()])).fit()
    values, names, metrics = _hparams(_events(grid[0].path))
    assert values == {"lr": 0.5, "opt/mom": 0.9, "d/a": 1.0, "d/b/c": "x"}
    assert sorted(names) == ["d/a", "d/b/c", "lr", "lst", "opt/mom"]
    assert "ray/tune/score" in metrics and "ray/tune/vec" not in metrics and "ray/tune/pid" not in metrics
    with open(os.path.join(storage, "hp", "experiment_state.json")) as f:  # kept for a restored experiment
        (state,) = json.load(f)["trials"]
    assert state["evaluated_params"] == {"lr": 0.5, "opt/mom": 0.9, "none": None, "lst": [1, 2],
                                         "d": {"a": 1, "b": {"c": "x"}}}


def test_a_failed_trials_hparams_and_mlflow_run_end_as_rays(storage, tmp_path):
    # Ray's loggers end a failed trial too: hparams written, files closed, its MLflow run FAILED
    from muster import tune

    tracking = pytest.importorskip("mlflow.tracking")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    grid = tune.Tuner(_scored, param_space={"lr": tune.grid_search([0.5]), "fail": True}, run_config=tune.RunConfig(
        storage_path=storage, name="failing", verbose=0,
        callbacks=[TBXLoggerCallback(), MLflowLoggerCallback(uri, experiment_name="failing")])).fit()
    assert grid.num_errors == 1
    acc = _events(grid[0].path)
    assert [e.value for e in acc.Scalars("ray/tune/score")] == [0.0, 0.5]
    assert _hparams(acc)[0] == {"lr": 0.5}
    client = tracking.MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("failing").experiment_id])
    assert run.info.status == "FAILED"


def test_a_searchers_suggestion_is_the_hparams_without_the_constants(storage):
    # Ray's SearchGenerator: evaluated_params = the flattened suggestion, not the space's constants
    from muster import tune
    from muster.tune.search import Searcher

    class Fixed(Searcher):
        def suggest(self, trial_id):
            return {"lr": 0.5, "opt": {"mom": 0.8}}

        def on_trial_complete(self, trial_id, result=None, error=False):
            pass

    grid = tune.Tuner(_scored, param_space={"const": 3}, tune_config=tune.TuneConfig(search_alg=Fixed()),
                      run_config=tune.RunConfig(storage_path=storage, name="searched", verbose=0,
                                                callbacks=[TBXLoggerCallback()])).fit()
    assert _hparams(_events(grid[0].path))[0] == {"lr": 0.5, "opt/mom": 0.8}


def test_a_trial_without_searched_values_has_no_hparams(storage):
    # Ray writes hparams only where the search chose values
    from muster import tune

    grid = tune.Tuner(_scored, param_space={"lr": 0.5}, run_config=tune.RunConfig(
        storage_path=storage, name="plain", verbose=0, callbacks=[TBXLoggerCallback()])).fit()
    acc = _events(grid[0].path)
    assert acc.Tags()["scalars"] and _hparams(acc) is None


def _pause_once_scheduler():
    from muster.tune.schedulers import FIFOScheduler

    class PauseOnce(FIFOScheduler):
        """Pauses each trial once, at its first result; it then resumes (from the start: no checkpoint)."""

        paused: set = set()

        def on_trial_result(self, controller, trial, result):
            if trial.trial_id in self.paused:
                return self.CONTINUE
            self.paused.add(trial.trial_id)
            return self.PAUSE

    return PauseOnce()


def test_a_paused_trial_writes_its_hparams_once_at_its_end(storage):
    # Ray writes hparams when the trial ends, not when a scheduler pauses it
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    from muster import tune

    grid = tune.Tuner(_scored, param_space={"lr": tune.grid_search([0.5])},
                      tune_config=tune.TuneConfig(scheduler=_pause_once_scheduler()),
                      run_config=tune.RunConfig(storage_path=storage, name="paused", verbose=0,
                                                callbacks=[TBXLoggerCallback()])).fit()
    assert grid.num_errors == 0, grid.errors
    files = [os.path.join(grid[0].path, f) for f in os.listdir(grid[0].path) if f.startswith("events.out")]
    assert len(files) == 2  # one per run of the trial: before and after its pause
    starts = [value.tag for path in files for event in EventFileLoader(path).Load()
              for value in event.summary.value if value.tag == "_hparams_/session_start_info"]
    assert starts == ["_hparams_/session_start_info"]


def _never_resuming_scheduler():
    from muster.tune.schedulers import FIFOScheduler

    class PauseForGood(FIFOScheduler):
        """Pauses each trial at its first result and never picks a paused one again."""

        def on_trial_result(self, controller, trial, result):
            return self.PAUSE

        def choose_trial_to_run(self, controller, trials):
            return next((t for t in trials if t.status != "PAUSED"), None)

    return PauseForGood()


def test_a_paused_trial_ended_without_running_again_writes_its_hparams(storage):
    # Ray keeps a paused trial's writer open and writes the hparams when the trial completes; muster closed
    # it at the pause as a trial still to resume, so a trial then ended TERMINATED never got its hparams
    from muster import tune

    grid = tune.Tuner(_scored, param_space={"lr": tune.grid_search([0.5])},
                      tune_config=tune.TuneConfig(scheduler=_never_resuming_scheduler()),
                      run_config=tune.RunConfig(storage_path=storage, name="stalled", verbose=0,
                                                callbacks=[TBXLoggerCallback()])).fit()
    assert grid.num_errors == 0, grid.errors
    with open(os.path.join(storage, "stalled", "experiment_state.json")) as f:
        (state,) = json.load(f)["trials"]
    assert state["status"] == "TERMINATED"
    values, _, metrics = _hparams(_events(grid[0].path))
    assert values == {"lr": 0.5} and "ray/tune/score" in metrics


def _long_scored(config):
    import time

    from muster import tune

    for i in range(1, 600):  # (stopped long before its end)
        tune.report({"score": float(i)})
        time.sleep(0.05)


def test_trials_ended_by_the_experiments_stop_write_no_hparams_as_rays(storage):
    # Ray 2.60, the same experiment under ray.init(num_cpus=2): a stopper's stop_all() ends both running
    # trials without log_trial_end, so their event files have their scalars and no hparams
    from muster import tune

    class StopAllAtThree(tune.Stopper):
        # (once both trials reported: a trial started late on a loaded machine may have none at x=1's third)
        def __init__(self):
            self.iterations = {}

        def __call__(self, trial_id, result):
            self.iterations[result["config"]["x"]] = result["training_iteration"]
            return False

        def stop_all(self):
            return self.iterations.get(1, 0) >= 3 and 0 in self.iterations

    grid = tune.Tuner(_long_scored, param_space={"x": tune.grid_search([0, 1])}, run_config=tune.RunConfig(
        storage_path=storage, name="stopped_all", verbose=0, stop=StopAllAtThree(),
        callbacks=[TBXLoggerCallback()])).fit()
    assert grid.num_errors == 0 and len(grid) == 2
    for r in grid:
        acc = _events(r.path)
        assert _hparams(acc) is None, r.config
        assert [e.value for e in acc.Scalars("ray/tune/score")][:1] == [1.0]
