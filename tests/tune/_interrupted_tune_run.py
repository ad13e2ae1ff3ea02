"""A user's ``tune.run`` script, run as its own process by the interrupt test.

usage: _interrupted_tune_run.py STORAGE PROGRESS_FILE
Two trials, one at a time: the first fails at once, the second reports slowly, appending a line
to PROGRESS_FILE per step, until the test sends Ctrl-C. Prints what ``tune.run`` gave back.
"""

import json
import sys
import time

from muster import tune


def trainable(config):
    if config["x"] < 0:
        raise RuntimeError("x is negative")
    for step in range(200):
        with open(config["progress"], "a") as f:
            f.write(f"{step}\n")
        tune.report({"step": step})
        time.sleep(0.2)


if __name__ == "__main__":
    storage, progress = sys.argv[1:3]
    try:
        analysis = tune.run(trainable, config={"x": tune.grid_search([-1, 1]), "progress": progress},
                            max_concurrent_trials=1, storage_path=storage, name="exp", verbose=0,
                            raise_on_failed_trial=True)
    except Exception as exc:  # noqa: BLE001 - the test reads what happened
        print("RAISED", type(exc).__name__, exc, flush=True)
    else:
        statuses = {t.config["x"]: t.status for t in analysis.trials}
        print("RETURNED", json.dumps(statuses, sort_keys=True), analysis.experiment_path, flush=True)
