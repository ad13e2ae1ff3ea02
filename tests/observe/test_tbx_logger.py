"""TBXLoggerCallback against Ray 2.60's: what it charts of a Tune result, and the hparams of a trial's end.

Each test reads back the event files with TensorBoard's own EventAccumulator and hparams plugin protos.
"""

from __future__ import annotations

import os

import pytest

from muster.observe.loggers import TBXLoggerCallback

pytest.importorskip("tensorboardX")
event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def _events(path):
    acc = event_accumulator.EventAccumulator(path, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return acc


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
