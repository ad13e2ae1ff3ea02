"""A function trainable runs in lockstep with the Tune controller, as in Ray 2.60: ``tune.report``
returns only once the controller acted on the result, so a trial stopped on a result (``stop``
criteria, a stopper, a scheduler's STOP) reports nothing after it, even when the controller lags.

Checked under Ray 2.60 with the same trainable (50 reports, none after the stop): ``result.metrics``,
``metrics_dataframe``, ``result.json``, ``progress.csv``, ``on_trial_result`` and the checkpoints
kept all end at the result the trial was stopped on (``training_iteration`` 3)."""

from __future__ import annotations

import csv
import json
import os
import tempfile
import time

import pytest

from muster import tune
from muster.tune.logger import CSVLoggerCallback
from muster.tune.schedulers import FIFOScheduler, TrialScheduler


def _reports(config):
    for i in range(50):
        open(os.path.join(config["marks"], f"ran_{i + 1}"), "w").close()
        if not config["checkpoints"]:
            tune.report({"step": i})
            continue
        folder = tempfile.mkdtemp()
        with open(os.path.join(folder, "step"), "w") as f:
            f.write(str(i))
        tune.report({"step": i}, checkpoint=tune.Checkpoint.from_directory(folder))


class _Lagging(tune.Callback):
    """Records ``on_trial_result`` and lags on the second result: a trial's process that ran ahead
    of the controller would report many more results before the stop on the third reached it."""

    def __init__(self):
        self.seen = []

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.seen.append((result["training_iteration"], result.get("done")))
        if result["training_iteration"] == 2:
            time.sleep(0.5)


class _StopAt3(tune.Stopper):
    def __call__(self, trial_id, result):
        return result["training_iteration"] >= 3

    def stop_all(self):
        return False


class _StopAt3Scheduler(FIFOScheduler):
    def on_trial_result(self, tune_controller, trial, result):
        return TrialScheduler.STOP if result["training_iteration"] >= 3 else TrialScheduler.CONTINUE


@pytest.mark.parametrize(
    "stop, scheduler, checkpoints",
    [
        ({"training_iteration": 3}, None, True),
        (_StopAt3(), None, False),
        (None, _StopAt3Scheduler(), True),
    ],
    ids=["stop-criteria", "stopper", "scheduler"],
)
def test_a_trial_stopped_on_a_result_reports_nothing_after_it(storage, tmp_path, stop, scheduler, checkpoints):
    marks = tmp_path / "marks"
    marks.mkdir()
    lagging = _Lagging()
    grid = tune.Tuner(
        _reports,
        param_space={"marks": str(marks), "checkpoints": checkpoints},
        tune_config=tune.TuneConfig(scheduler=scheduler),
        run_config=tune.RunConfig(storage_path=storage, verbose=0, stop=stop,
                                  callbacks=[lagging, CSVLoggerCallback()]),
    ).fit()
    assert grid.num_errors == 0, grid.errors
    result = grid[0]
    assert (result.metrics["training_iteration"], result.metrics["done"]) == (3, True)
    assert lagging.seen == [(1, False), (2, False), (3, True)]
    assert list(result.metrics_dataframe["training_iteration"]) == [1, 2, 3]
    with open(os.path.join(result.path, "result.json")) as f:
        assert [json.loads(line)["training_iteration"] for line in f] == [1, 2, 3]
    with open(os.path.join(result.path, "progress.csv")) as f:
        assert [int(row["training_iteration"]) for row in csv.DictReader(f)] == [1, 2, 3]
    assert sorted(os.listdir(marks)) == ["ran_1", "ran_2", "ran_3"]  # the function went no further
    folders = [f for f in os.listdir(result.path) if f.startswith("checkpoint_")]
    assert len(folders) == (3 if checkpoints else 0), folders
    assert len(result.best_checkpoints) == len(folders)
    if checkpoints:  # the trial's checkpoint is the one it reported with the result it was stopped on
        with result.checkpoint.as_directory() as d, open(os.path.join(d, "step")) as f:
            assert f.read() == "2"
