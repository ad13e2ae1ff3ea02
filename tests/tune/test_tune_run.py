"""``tune.run`` and ``ExperimentAnalysis`` (Ray's older API) over the Tuner: real trials, real storage."""

from __future__ import annotations

import datetime
import os

import pytest

from muster import tune
from muster.exceptions import InvalidArgumentError, InvalidTypeError, MusterError
from muster.tune.analysis import ExperimentAnalysis

# each trial's "score" at iterations 1..4: the best trial depends on the scope
CURVES = {"a": [10.0, 0.0, 0.0, 0.0], "b": [1.0, 1.0, 1.0, 1.0], "c": [0.0, 0.0, 0.0, 3.0]}


def _curve(config):
    for value in CURVES[config["curve"]]:
        tune.report({"score": value, "nested": {"half": value / 2}})


def _by_curve(analysis, trial):
    return trial.config["curve"] if trial else None


def test_tune_run_returns_an_analysis_with_every_accessor(storage):
    analysis = tune.run(_curve, config={"curve": tune.grid_search(["a", "b", "c"])}, metric="score", mode="max",
                        stop={"training_iteration": 4}, storage_path=storage, name="exp", verbose=0)
    assert isinstance(analysis, ExperimentAnalysis)
    assert analysis.experiment_path == os.path.join(storage, "exp")
    ids = {t.config["curve"]: t.trial_id for t in analysis.trials}
    assert sorted(ids) == ["a", "b", "c"] and all(t.status == "TERMINATED" for t in analysis.trials)
    assert analysis.best_config == {"curve": "c"} and analysis.best_trial.trial_id == ids["c"]
    assert analysis.best_result["score"] == 3.0 and analysis.best_result["training_iteration"] == 4
    assert analysis.best_result["config"] == {"curve": "c"}
    assert {k: r["score"] for k, r in analysis.results.items()} == {ids["a"]: 0.0, ids["b"]: 1.0, ids["c"]: 3.0}
    df = analysis.results_df
    assert df.index.name == "trial_id" and df.loc[ids["b"], "score"] == 1.0
    assert df.loc[ids["c"], "config/curve"] == "c" and df.loc[ids["c"], "nested/half"] == 1.5
    assert analysis.best_result_df.index.tolist() == [ids["c"]]
    assert analysis.best_result_df["score"].tolist() == [3.0]
    frames = analysis.trial_dataframes
    assert {k: v["score"].tolist() for k, v in frames.items()} == {ids[c]: CURVES[c] for c in "abc"}
    assert analysis.best_dataframe["score"].tolist() == CURVES["c"]
    assert analysis.best_dataframe["training_iteration"].tolist() == [1, 2, 3, 4]
    last = analysis.dataframe().set_index("config/curve")
    assert last["score"].to_dict() == {"a": 0.0, "b": 1.0, "c": 3.0}
    assert last.loc["a", "logdir"] == next(t.path for t in analysis.trials if t.config["curve"] == "a")
    best_ever = analysis.dataframe(metric="score", mode="max").set_index("config/curve")
    assert best_ever["score"].to_dict() == {"a": 10.0, "b": 1.0, "c": 3.0}
    assert best_ever.loc["a", "training_iteration"] == 1
    assert analysis.get_all_configs() == {ids[c]: {"curve": c} for c in "abc"}
    assert analysis.get_all_configs(prefix=True)[ids["a"]] == {"config/curve": "a"}
    # function trainables that report no checkpoint have none
    assert analysis.best_checkpoint is None and analysis.get_last_checkpoint() is None


def test_scope_default_metric_and_reading_the_experiment_back(storage):
    tune.run(_curve, config={"curve": tune.grid_search(["a", "b", "c"])}, storage_path=storage, name="exp",
             resources_per_trial={"cpu": 2}, verbose=0)
    analysis = ExperimentAnalysis(os.path.join(storage, "exp"))  # no metric, no mode: Ray refuses the defaults
    assert [t.resources.get("CPU") for t in analysis.trials] == [2.0] * 3  # tune.with_resources
    for prop in ("best_trial", "best_config", "best_checkpoint", "best_result", "best_dataframe"):
        with pytest.raises(InvalidArgumentError, match=r"metric=None, mode=None"):
            getattr(analysis, prop)
    with pytest.raises(InvalidArgumentError, match="no metric"):
        analysis.get_best_trial()
    with pytest.raises(InvalidArgumentError, match="mode=None"):
        analysis.get_best_trial("score")
    with pytest.raises(InvalidArgumentError, match="scope='best'"):
        analysis.get_best_trial("score", "max", scope="best")
    expected = {
        ("max", "last"): "c", ("max", "avg"): "a", ("max", "last-5-avg"): "a", ("max", "last-10-avg"): "a",
        ("max", "all"): "a", ("min", "last"): "a", ("min", "avg"): "c", ("min", "all"): "a",
    }
    for (mode, scope), curve in expected.items():
        assert _by_curve(analysis, analysis.get_best_trial("score", mode, scope)) == curve, (mode, scope)
        assert analysis.get_best_config("score", mode, scope) == {"curve": curve}
    assert analysis.get_best_trial("nested/half", "max").config == {"curve": "c"}
    assert analysis.get_best_trial("no_such_metric", "max") is None
    restored = tune.Tuner.restore(analysis.experiment_path, _curve)
    # tune.run's settings are Tune's classes, as a Tuner's (they were muster.train's, Ray Train V2's)
    assert type(restored.run_config) is tune.RunConfig
    assert type(restored.run_config.failure_config) is tune.FailureConfig
    assert type(restored.run_config.checkpoint_config) is tune.CheckpointConfig
    grid = restored.get_results()  # the same ranking (flattened names too)
    assert grid.get_best_result("nested/half", "max").config == {"curve": "c"}
    assert analysis.get_best_config("no_such_metric", "max") is None
    # the state file's path works too, and defaults given here are used
    again = ExperimentAnalysis(os.path.join(storage, "exp", "experiment_state.json"), default_metric="score",
                               default_mode="min")
    assert again.best_config == {"curve": "a"} and again.best_result["score"] == 0.0
    with pytest.raises(InvalidArgumentError, match="no experiment_state.json"):
        ExperimentAnalysis(storage)


def _flaky(config):
    tune.report({"score": float(config["x"])})
    if config["x"] == 2:
        raise RuntimeError("trial two breaks")


def test_failed_trial_raises_tune_error_unless_told_not_to(storage):
    space = {"x": tune.grid_search([1, 2])}
    with pytest.raises(tune.TuneError, match=r"Trials did not complete: .*\(ERROR\)") as info:
        tune.run(_flaky, config=space, storage_path=storage, name="raise", verbose=0)
    assert isinstance(info.value, MusterError) and "trial two breaks" in str(info.value.__cause__)
    analysis = tune.run(_flaky, config=space, metric="score", mode="max", storage_path=storage, name="keep",
                        verbose=0, raise_on_failed_trial=False, scheduler="fifo", search_alg="random",
                        time_budget_s=datetime.timedelta(minutes=5))  # Ray's names and a timedelta
    assert sorted(t.status for t in analysis.trials) == ["ERROR", "TERMINATED"]
    assert analysis.best_config == {"x": 2}  # it reported before failing, as in Ray
    assert sorted(r["score"] for r in analysis.results.values()) == [1.0, 2.0]


class _Steps(tune.Trainable):
    SCORES = [1.0, 5.0, 2.0, 3.0, 4.0]

    def setup(self, config):
        self.scale = config["scale"]

    def step(self):
        return {"score": self.SCORES[self.iteration] * self.scale}

    def save_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "it.txt"), "w") as f:
            f.write(str(self.iteration))

    def load_checkpoint(self, checkpoint):
        pass


def _iteration(checkpoint):
    with open(os.path.join(checkpoint.path, "it.txt")) as f:
        return int(f.read())


def test_class_trainable_checkpoints_by_rays_deprecated_keywords(storage):
    with pytest.warns(DeprecationWarning) as warned:
        analysis = tune.run(_Steps, config={"scale": tune.grid_search([1.0, 2.0])}, metric="score", mode="max",
                            stop={"training_iteration": 5}, checkpoint_freq=2, checkpoint_at_end=True,
                            storage_path=storage, name="cls", verbose=0)
    named = sorted(str(w.message).split("(")[1].split("=")[0] for w in warned)
    assert named == ["checkpoint_at_end", "checkpoint_freq"]
    assert all(w.filename == __file__ for w in warned)  # they point at the caller's line
    assert analysis.best_config == {"scale": 2.0} and analysis.best_result["score"] == 8.0
    # saved after iterations 2 and 4 (every 2) and 5 (at the end); iteration 2 scored best
    assert _iteration(analysis.best_checkpoint) == 2
    best = analysis.best_trial
    assert _iteration(analysis.get_best_checkpoint(best, "score", "min")) == 4
    assert _iteration(analysis.get_last_checkpoint(best)) == 5
    assert _iteration(analysis.get_last_checkpoint()) == 5
    back = ExperimentAnalysis(analysis.experiment_path)
    assert _iteration(back.get_best_checkpoint(best.path, "score", "max")) == 2
    with pytest.raises(InvalidArgumentError, match="is not a trial of"):
        back.get_best_checkpoint("/no/such/trial", "score", "max")
    # resume=True continues the finished experiment: the same trials, none run again
    resumed = tune.run(_Steps, config={"scale": tune.grid_search([1.0, 2.0])}, metric="score", mode="max",
                       storage_path=storage, name="cls", resume=True, verbose=0)
    assert sorted(t.trial_id for t in resumed.trials) == sorted(t.trial_id for t in analysis.trials)
    assert _iteration(resumed.best_checkpoint) == 2


def test_keywords_muster_cannot_honour_name_the_fix(storage):
    with pytest.raises(InvalidTypeError, match="register_trainable"):
        tune.run("PPO")
    with pytest.raises(InvalidArgumentError, match="fail_fast needs max_failures=0"):
        tune.run(_curve, fail_fast=True, max_failures=2)
    with pytest.raises(InvalidArgumentError, match="restore=.*resume=True"):
        tune.run(_curve, restore="/some/checkpoint")
    with pytest.raises(InvalidArgumentError, match="needs the experiment's name"):
        tune.run(_curve, resume="AUTO", storage_path=storage)
    with pytest.raises(InvalidArgumentError, match="'LOCAL'"):
        tune.run(_curve, resume="LOCAL", name="x", storage_path=storage)
    with pytest.raises(InvalidArgumentError, match="no_such_scheduler"):  # a name goes to create_scheduler
        tune.run(_curve, scheduler="no_such_scheduler")
    with pytest.raises(InvalidArgumentError, match="no_such_search"):
        tune.run(_curve, search_alg="no_such_search")
    with pytest.raises(InvalidArgumentError, match="local_dir"):
        tune.run(_curve, local_dir=storage)


def test_ctrl_c_ends_tune_run_which_returns_without_raising_for_failed_trials(storage, tmp_path):
    """Ray's tune.run: after Ctrl-C the run returns its analysis; raise_on_failed_trial applies only to a
    run that was not interrupted (an ERROR trial then does not raise either)."""
    import pathlib
    import signal
    import subprocess
    import sys
    import time

    here = pathlib.Path(__file__).parent
    progress = tmp_path / "progress"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(here), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, str(here / "_interrupted_tune_run.py"), storage, str(progress)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        deadline = time.monotonic() + 90
        while (not progress.exists() or len(progress.read_text().split()) < 2) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert '\nRETURNED {"-1": "ERROR", "1": "RUNNING"} ' in out, out  # the running trial can be resumed
    assert "Trials did not complete" in out and "resume=True" in out and "KeyboardInterrupt" not in out, out
    resumed = os.path.join(storage, "exp")
    assert out.strip().endswith(resumed), out
