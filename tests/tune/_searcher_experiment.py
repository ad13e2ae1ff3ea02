"""A user's Tune script with a searcher that keeps state, run as its own process by test_state_files_whole.py.

usage: _searcher_experiment.py STORAGE NAME KILL_AT_SAVE
Six trials, one at a time, x = 0, 1, 2, ... from ``Counting``. When the driver opens the experiment's
searcher state file for writing for the KILL_AT_SAVE-th time, an audit hook caps the size of the files
this process may write (RLIMIT_FSIZE) below that state's size: the kernel kills the driver with SIGXFSZ
part-way through writing it, as a crash or power cut mid-write would.
"""

import json
import os
import pathlib
import resource
import signal
import sys
import time

from muster import tune
from muster.tune.search import Searcher

STATE_FILE = Searcher.CKPT_FILE_TMPL.format("default")


class Counting(Searcher):
    """Suggests x = 0, 1, 2, ... and remembers every loss it was told (its state is padded to some KiB)."""

    def __init__(self):
        super().__init__(metric="loss", mode="min")
        self.made, self.told = 0, []

    def suggest(self, trial_id):
        self.made += 1
        return {"x": float(self.made - 1)}

    def on_trial_complete(self, trial_id, result=None, error=False):
        self.told.append(result["loss"])

    def save(self, checkpoint_path):
        pathlib.Path(checkpoint_path).write_text(json.dumps({"made": self.made, "told": self.told, "pad": "." * 4096}))

    def restore(self, checkpoint_path):
        state = json.loads(pathlib.Path(checkpoint_path).read_text())
        self.made, self.told = state["made"], state["told"]


def trainable(config):
    time.sleep(0.6)  # the experiment state (and the searcher's) is saved at most once a second
    tune.report({"loss": config["x"]})


def _cut_short_at(run_dir: str, nth: int):
    opened = []

    def hook(event, args):
        if (event == "open" and isinstance(args[0], str) and "w" in str(args[1])
                and os.path.dirname(args[0]) == run_dir and STATE_FILE in os.path.basename(args[0])):
            opened.append(args[0])
            if len(opened) == nth:  # the next write past 64 bytes, this file's, gets SIGXFSZ
                resource.setrlimit(resource.RLIMIT_FSIZE, (64, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return hook


if __name__ == "__main__":
    storage, name, nth = sys.argv[1], sys.argv[2], int(sys.argv[3])
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it; a real crash would not wait for EFBIG
    sys.addaudithook(_cut_short_at(os.path.join(storage, name), nth))
    tune.Tuner(
        trainable, param_space={},
        tune_config=tune.TuneConfig(num_samples=6, search_alg=Counting(), max_concurrent_trials=1),
        run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0),
    ).fit()
    print("DONE", flush=True)
