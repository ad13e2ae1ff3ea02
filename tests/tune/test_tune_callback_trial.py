"""The ``Trial`` a Tune callback gets, as Ray Tune 2.60's users read it: its name as ``str``/``repr``,
``checkpoint`` (latest committed), ``num_failures``, ``metric_analysis``, ``error_file``,
``get_error()``/``get_pickled_error()``, ``custom_dirname``; and a clear error for Ray-only attributes."""

from __future__ import annotations

import os
import tempfile

import pytest

from muster import tune
from muster.exceptions import UnsupportedRayAPIError
from muster.tune import Checkpoint, TuneError


def _fn(config):
    for i in range(3):
        folder = tempfile.mkdtemp()
        with open(os.path.join(folder, "x"), "w") as f:
            f.write(str(i))
        tune.report({"score": config["x"] * i, "nested": {"a": i}}, checkpoint=Checkpoint.from_directory(folder))
    if config["x"] == 2:
        raise RuntimeError("boom x=2")


class _Recorder(tune.Callback):
    """Hands every trial hook to :meth:`record` as ``(hook, trial, *more)``."""

    def record(self, hook, trial, *more):
        raise NotImplementedError

    def on_trial_start(self, iteration, trials, trial, **info):
        self.record("start", trial)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.record("result", trial, result["training_iteration"])

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        self.record("checkpoint", trial)

    def on_trial_save(self, iteration, trials, trial, **info):
        self.record("save", trial)

    def on_trial_recover(self, iteration, trials, trial, **info):
        self.record("recover", trial)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.record("complete", trial)

    def on_trial_error(self, iteration, trials, trial, **info):
        self.record("error", trial)


def _fit_two_with_a_retry(trainable, name, tmp_path, callback):
    """x=1 and x=2, one at a time, each trial retried once (x=2 is the one that fails)."""
    tune.Tuner(
        trainable, param_space={"x": tune.grid_search([1, 2])},
        tune_config=tune.TuneConfig(max_concurrent_trials=1),
        run_config=tune.RunConfig(name=name, storage_path=str(tmp_path), callbacks=[callback], verbose=0,
                                  failure_config=tune.FailureConfig(max_failures=1)),
    ).fit()


class _Seen(_Recorder):
    def __init__(self):
        self.seen: dict[tuple[str, str], dict] = {}

    def record(self, hook, trial, *more):
        if hook not in ("start", "complete", "error"):
            return
        self.seen[(hook, str(trial.config["x"]))] = {
            "repr": repr(trial), "str": str(trial), "name": trial.trial_name, "status": trial.status,
            "checkpoint": trial.checkpoint, "num_failures": trial.num_failures,
            "analysis": {k: dict(v) for k, v in trial.metric_analysis.items()}, "error_file": trial.error_file,
            "error": trial.get_error(), "pickled": trial.get_pickled_error(), "custom": trial.custom_dirname,
        }


def test_trial_in_callbacks_reads_as_rays(tmp_path):
    seen = _Seen()
    _fit_two_with_a_retry(_fn, "cb_trial", tmp_path, seen)
    start, done, error = seen.seen[("start", "1")], seen.seen[("complete", "1")], seen.seen[("error", "2")]
    assert start["repr"] == start["str"] == start["name"]  # Ray: repr(trial) is its name too
    assert start["checkpoint"] is None and start["num_failures"] == 0 and start["analysis"] == {}
    assert start["error_file"] is None and start["error"] is None and start["custom"] is None
    # Ray's on_trial_start sees the trial PENDING (RUNNING after it), on_trial_complete still RUNNING
    # (TERMINATED after it), on_trial_error ERROR
    assert start["status"] == "PENDING" and done["status"] == "RUNNING" and error["status"] == "ERROR"
    assert done["checkpoint"] is not None
    with done["checkpoint"].as_directory() as folder:
        assert open(os.path.join(folder, "x")).read() == "2"
    # Ray's values for these scores: 0, 1, 2 (x=1); 0, 2, 4 then a retry's 0, 2, 4 (x=2)
    assert done["analysis"]["score"] == {"max": 2, "min": 0, "avg": 1.0, "last": 2, "last-5-avg": 1.0,
                                         "last-10-avg": 1.0}
    assert done["analysis"]["nested/a"]["last"] == 2 and "trial_id" not in done["analysis"]
    assert error["num_failures"] == 2  # the retry under max_failures=1, then the final failure, as Ray counts
    assert error["analysis"]["score"] == {"max": 4, "min": 0, "avg": 2.0, "last": 4, "last-5-avg": 2.4,
                                          "last-10-avg": 2.0}
    assert error["error_file"].endswith("/error.txt") and "boom x=2" in open(error["error_file"]).read()
    assert isinstance(error["error"], TuneError) and "boom x=2" in str(error["error"])
    assert "boom x=2" in str(error["pickled"])
    assert isinstance(error["pickled"], RuntimeError)  # what the trainable raised, as Ray's RayTaskError(...) is


def test_trial_custom_dirname_and_ray_only_attributes(tmp_path):
    kept = []

    class _Keep(tune.Callback):
        def on_trial_complete(self, iteration, trials, trial, **info):
            kept.append(trial)

    tune.Tuner(
        lambda config: tune.report({"score": 1.0}),
        tune_config=tune.TuneConfig(trial_dirname_creator=lambda t: f"my_{t.trial_id}"),
        run_config=tune.RunConfig(name="cb_dirname", storage_path=str(tmp_path), callbacks=[_Keep()], verbose=0),
    ).fit()
    (trial,) = kept
    assert trial.custom_dirname == f"my_{trial.trial_id}" == trial.dirname
    with pytest.raises(UnsupportedRayAPIError, match=r"placement_group_factory.*trial\.resources"):
        trial.placement_group_factory
    with pytest.raises(UnsupportedRayAPIError, match=r"storage.*trial\.path"):
        trial.storage


class _Order(_Recorder):
    def __init__(self):
        self.calls: list[tuple] = []

    def record(self, hook, trial, *more):
        failures = open(trial.error_file).read().count("Failure # ") if trial.error_file else 0
        self.calls.append((hook, trial.config["x"], trial.status, trial.num_failures, failures, *more))


def _fails_each_attempt(config):
    tune.report({"score": 1}, checkpoint=Checkpoint.from_directory(tempfile.mkdtemp()))
    if config["x"] == 2:
        raise RuntimeError("boom")


def test_a_retried_trial_starts_again_and_each_failure_is_in_error_txt_as_ray(tmp_path):
    order = _Order()
    _fit_two_with_a_retry(_fails_each_attempt, "cb_retry", tmp_path, order)
    # Ray 2.60's sequence: a result, then on_checkpoint and on_trial_save; a retried failure is kept in
    # error.txt ("Failure # 1") before on_trial_recover, then on_trial_start again (PENDING in both)
    good = [("start", 1, "PENDING", 0, 0), ("result", 1, "RUNNING", 0, 0, 1), ("checkpoint", 1, "RUNNING", 0, 0),
            ("save", 1, "RUNNING", 0, 0), ("complete", 1, "RUNNING", 0, 0)]
    bad = [("start", 2, "PENDING", 0, 0), ("result", 2, "RUNNING", 0, 0, 1), ("checkpoint", 2, "RUNNING", 0, 0),
           ("save", 2, "RUNNING", 0, 0), ("recover", 2, "PENDING", 1, 1), ("start", 2, "PENDING", 1, 1),
           ("result", 2, "RUNNING", 1, 1, 2), ("checkpoint", 2, "RUNNING", 1, 1), ("save", 2, "RUNNING", 1, 1),
           ("error", 2, "ERROR", 2, 2)]
    assert order.calls == good + bad, order.calls
