"""TBXLoggerCallback against Ray 2.60's: what it charts of a Tune result, and the hparams of a trial's end.

Each test reads back the event files with TensorBoard's own EventAccumulator and hparams plugin protos.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from muster.observe.loggers import TBXLoggerCallback

pytest.importorskip("tensorboardX")
event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def _events(folder):
    acc = event_accumulator.EventAccumulator(folder, size_guidance={event_accumulator.SCALARS: 0,
                                                                   event_accumulator.HISTOGRAMS: 0})
    acc.Reload()
    return acc


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


def test_a_paused_trial_keeps_the_events_of_each_of_its_runs(storage):
    # tensorboardX names a file by the second it opens: the run after the pause must not overwrite the first
    from muster import tune

    grid = tune.Tuner(_scored, param_space={"lr": tune.grid_search([0.5])},
                      tune_config=tune.TuneConfig(scheduler=_pause_once_scheduler()),
                      run_config=tune.RunConfig(storage_path=storage, name="paused", verbose=0,
                                                callbacks=[TBXLoggerCallback()])).fit()
    assert grid.num_errors == 0, grid.errors
    files = [os.path.join(grid[0].path, f) for f in os.listdir(grid[0].path) if f.startswith("events.out")]
    assert len(files) == 2  # one per run of the trial: before and after its pause
    scores = sorted((e.step, e.value) for path in files for e in _events(path).Scalars("ray/tune/score"))
    assert scores == [(1, 0.0), (1, 0.0), (2, 0.5)]  # the first run's result, then the rerun's two
