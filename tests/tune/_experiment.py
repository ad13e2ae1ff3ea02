"""A user's Tune script, run as its own process by the experiment-fault tests.

usage: _experiment.py STORAGE NAME PROGRESS_FILE [kill-after-last-step | kill-between-commit-and-row]
Four trials, two at a time; each step sleeps, appends "<trial_id> <step>" to
PROGRESS_FILE, and reports a checkpoint. With ``kill-after-last-step``, the first
trial to report its last step then SIGKILLs this driver (once: a marker file says so).
With ``kill-between-commit-and-row``, the driver SIGKILLs itself once it has committed
the third trial's fourth checkpoint and is about to append that step's row to the
trial's result.json (an audit hook on the open of that file).
"""

import json
import os
import signal
import sys
import tempfile
import time

from muster import tune
from muster.train import Checkpoint

STEPS = 6


def trainable(config):
    ckpt = tune.get_checkpoint()
    start = 0
    if ckpt:
        with ckpt.as_directory() as d:
            start = int(open(os.path.join(d, "step")).read()) + 1
    for step in range(start, STEPS):
        time.sleep(0.3)
        with open(config["progress"], "a") as f:
            f.write(f"{tune.get_context().get_trial_id()} {step}\n")
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "step"), "w").write(str(step))
            tune.report({"step": step, "resumed_from": start}, checkpoint=Checkpoint.from_directory(d))
    marker = config["progress"] + ".killed"
    if config.get("kill_driver") and not os.path.exists(marker):
        open(marker, "w").close()
        time.sleep(0.3)  # the last checkpoint is committed; the experiment state is saved at most once a second
        os.kill(config["kill_driver"], signal.SIGKILL)


def _third_trials(path) -> bool:
    return "_00002" in os.path.basename(os.path.dirname(str(path)))


def _kill_between_commit_and_row(event, args):
    # "os.rename" publishes a staged checkpoint (checkpoint_00000N); the next "open" of the
    # trial's result.json for appending writes that step's row
    if event == "os.rename" and _third_trials(args[1]) and os.path.basename(str(args[1])).startswith("checkpoint_"):
        _commits.append(args[1])
    elif (event == "open" and len(_commits) == 4 and str(args[0]).endswith("result.json")
          and _third_trials(args[0]) and "a" in str(args[1])):
        os.kill(os.getpid(), signal.SIGKILL)


_commits: list = []

if __name__ == "__main__":
    storage, name, progress = sys.argv[1:4]
    if sys.argv[4:] == ["kill-between-commit-and-row"]:
        sys.addaudithook(_kill_between_commit_and_row)
    grid = tune.Tuner(
        trainable,
        param_space={"x": tune.grid_search([1, 2, 3, 4]), "progress": progress,
                     "kill_driver": os.getpid() if sys.argv[4:] == ["kill-after-last-step"] else 0},
        tune_config=tune.TuneConfig(max_concurrent_trials=2, metric="step", mode="max"),
        run_config=tune.RunConfig(name=name, storage_path=storage),
    ).fit()
    # what fit() returned (after a Ctrl-C too): each trial's last step, whether it finished, error, checkpoint, folder
    print("DONE", json.dumps({r.config["x"]: [(r.metrics or {}).get("step"), (r.metrics or {}).get("done"),
                                              r.error is not None, r.checkpoint is not None, r.path]
                              for r in grid}), flush=True)
