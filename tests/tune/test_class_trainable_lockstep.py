"""A class trainable steps in lockstep with the Tune controller, as in Ray: step N+1 runs only once
the controller acted on result N, so a controller that lags (a slow stopper) lets no step, and no
checkpoint, run past a stop."""

import json
import os
import time

import pytest

from muster import tune


class _Marks(tune.Trainable):
    """Leaves a file per step it ran, in the folder ``config["marks"]``."""

    def step(self):
        with open(os.path.join(self.config["marks"], f"step_{self.iteration + 1}"), "w"):
            pass
        return {"value": self.iteration + 1}


class _SavingMarks(_Marks):
    def save_checkpoint(self, checkpoint_dir):
        return {"value": self.iteration}


class _SlowStopper(tune.Stopper):
    """Stops at iteration 2, after thinking long enough for a worker that runs ahead to step again."""

    def __call__(self, trial_id, result):
        if result["training_iteration"] < 2:
            return False
        time.sleep(2.0)
        return True

    def stop_all(self):
        return False


@pytest.mark.parametrize(
    "trainable, checkpointing, saved",
    [
        (_SavingMarks, {"checkpoint_frequency": 2}, [2]),  # Ray's trial_checkpoint doc case: a periodic save
        (_SavingMarks, {}, [1, 2]),  # muster's default: every step saved
        (_Marks, {}, []),  # a class that saves nothing
    ],
)
def test_no_step_runs_before_the_controller_decided_on_the_last(storage, tmp_path, trainable, checkpointing, saved):
    marks = tmp_path / "marks"
    marks.mkdir()
    grid = tune.Tuner(
        trainable,
        param_space={"marks": str(marks)},
        run_config=tune.RunConfig(storage_path=storage, verbose=0, stop=_SlowStopper(),
                                  checkpoint_config=tune.CheckpointConfig(**checkpointing)),
    ).fit()
    assert grid.num_errors == 0, grid.errors
    assert sorted(os.listdir(marks)) == ["step_1", "step_2"]  # step 3 never ran
    assert grid[0].metrics["training_iteration"] == 2
    folders = sorted(f for f in os.listdir(grid[0].path) if f.startswith("checkpoint_"))
    assert folders == [f"checkpoint_{i:06d}" for i in saved], folders
    with open(os.path.join(grid[0].path, "result.json")) as f:
        assert [json.loads(line)["training_iteration"] for line in f] == [1, 2]
