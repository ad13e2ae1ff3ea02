"""A trial runs in its own folder, as Ray's do (Ray's Tune output guide writes artifacts to relative paths)."""

from __future__ import annotations

import os

import pytest

from muster import tune
from muster.tune.session import _in_trial_folder


def writes_an_artifact(config):
    with open("./artifact.txt", "w") as f:  # a relative path, as Ray's guide writes
        f.write(str(config["x"]))
    tune.report({"cwd": os.getcwd(), "orig": os.environ.get("TUNE_ORIG_WORKING_DIR")})


class WritesFromAClass(tune.Trainable):
    def step(self):
        with open(f"./artifact_{self.iteration}.txt", "w") as f:
            f.write(str(self.config["x"]))
        return {"cwd": os.getcwd(), "done": True}


def test_each_trial_writes_relative_paths_into_its_own_folder(storage, tmp_path, monkeypatch):
    """Before, every trial kept the driver's working folder, so the trials' artifacts overwrote each
    other there."""
    monkeypatch.chdir(tmp_path)
    for trainable in (writes_an_artifact, WritesFromAClass):
        grid = tune.Tuner(trainable, param_space={"x": tune.grid_search([1, 2])},
                          run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
        assert grid.num_errors == 0
        for result in grid:
            assert os.path.realpath(result.metrics["cwd"]) == os.path.realpath(result.path)
            name = "artifact.txt" if trainable is writes_an_artifact else "artifact_0.txt"
            with open(os.path.join(result.path, name)) as f:
                assert f.read() == str(result.config["x"])
        assert os.getcwd() == str(tmp_path) and not [n for n in os.listdir(tmp_path) if n.startswith("artifact")]
    assert os.path.realpath(grid[0].metrics["cwd"]) != os.path.realpath(str(tmp_path))


def test_the_trial_folder_is_left_after_the_trial_and_can_be_turned_off(tmp_path, monkeypatch):
    trial = tmp_path / "exp" / "trial_0"
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TUNE_ORIG_WORKING_DIR", raising=False)
    with _in_trial_folder(str(trial)):
        assert os.getcwd() == str(trial) and os.environ["TUNE_ORIG_WORKING_DIR"] == str(tmp_path)
    assert os.getcwd() == str(tmp_path)
    monkeypatch.setenv("RAY_CHDIR_TO_TRIAL_DIR", "0")  # Ray's switch
    monkeypatch.delenv("TUNE_ORIG_WORKING_DIR")
    with _in_trial_folder(str(tmp_path / "exp" / "trial_1")):  # Ray's FAQ asserts cwd == TUNE_ORIG_WORKING_DIR
        assert os.getcwd() == str(tmp_path) == os.environ["TUNE_ORIG_WORKING_DIR"]
    assert not (tmp_path / "exp" / "trial_1").exists()


def prints(config):
    import sys

    print(f"out {config['x']}")
    print(f"err {config['x']}", file=sys.stderr)
    tune.report({"x": config["x"]})


def test_log_to_file_writes_what_a_trial_prints_into_its_folder(storage):
    """Ray's output guide: RunConfig(log_to_file=True / "name" / (out, err)). Before, it was accepted
    and no file was written."""
    for value, files in [(True, {"stdout": "out", "stderr": "err"}),
                         ("combined.log", {"combined.log": "out err"}),
                         (("my_out.log", "my_err.log"), {"my_out.log": "out", "my_err.log": "err"})]:
        grid = tune.Tuner(prints, param_space={"x": tune.grid_search([1, 2])},
                          run_config=tune.RunConfig(storage_path=storage, log_to_file=value, verbose=0)).fit()
        for result in grid:
            x = result.config["x"]
            for name, words in files.items():
                with open(os.path.join(result.path, name)) as f:
                    assert f.read().split() == [part for w in words.split() for part in (w, str(x))], (value, name)


def test_a_bad_log_to_file_is_refused_at_once():
    with pytest.raises(ValueError, match=r"log_to_file=\('a', 'b', 'c'\).*pair"):
        tune.Tuner(prints, run_config=tune.RunConfig(log_to_file=("a", "b", "c")))
