"""How long one PB2 exploit holds the Tune controller's thread, with N observations recorded.

Four trials' perturbation points are recorded as PB2 records them (N observations in all), then
each trial reports the next one, the worst last: that report makes it exploit the best, and the
time ``on_trial_result`` takes for it is what the controller's thread spends there, handling no
other trial's results. With the GP fitted on the controller's thread that is the whole fit; with
it fitted on PB2's own thread, only the decision (the fit's time is printed after it).

    PYTHONPATH=src python benchmarks/pb2_stall_bench.py 200 1000
"""

from __future__ import annotations

import sys
import tempfile
import time
from typing import Any

import numpy as np

from muster.train.storage import Storage
from muster.tune.schedulers import PB2
from muster.tune.trial import Trial


class _Controller:
    """What PB2 asks of the Tune controller: the live trials, their checkpoints, the experiment's folder."""

    def __init__(self, trials: list[Trial]):
        self.trials, self.experiment = trials, Storage(tempfile.mkdtemp(), "exp")

    def live_trials(self) -> list[Trial]:
        return self.trials

    def latest_checkpoint(self, trial: Trial) -> Any:
        return "checkpoint"

    def clone_latest_checkpoint(self, donor: Trial, into: Trial) -> Any:
        return "checkpoint"


def measure(n: int) -> None:
    rng = np.random.default_rng(0)
    trials = [Trial(f"t{i}", f"t{i}", {"lr": float(lr)}, "/tmp/x", {}) for i, lr in enumerate(rng.uniform(0, 1, 4))]
    sched = PB2(time_attr="training_iteration", metric="score", mode="max", perturbation_interval=1,
                hyperparam_bounds={"lr": [0.0, 1.0]}, quantile_fraction=0.25, log_config=False, seed=0)
    controller = _Controller(trials)
    for t in trials:
        sched.on_trial_add(controller, t)
    score = {t.trial_id: 0.0 for t in trials}
    steps = n // len(trials) + 1
    for step in range(1, steps):
        for t in trials:
            score[t.trial_id] += 1 - (t.config["lr"] - 0.7) ** 2 + 0.1 * rng.standard_normal()
            sched._record(t, float(step), score[t.trial_id])
    held, decision = 0.0, ""
    for t in sorted(trials, key=lambda t: -score[t.trial_id]):  # the worst reports last: it exploits
        score[t.trial_id] += 0.5
        start = time.perf_counter()
        decision = sched.on_trial_result(controller, t, {"training_iteration": steps, "score": score[t.trial_id]})
        held = time.perf_counter() - start
    observations = sched._observations()[0].shape[0]
    print(f"N={observations}: the controller's thread was held {held:.3f} s by the exploit ({decision})", flush=True)
    worst = min(trials, key=lambda t: score[t.trial_id])
    pending = worst.restart_plan[0] if worst.restart_plan else None
    if hasattr(pending, "result"):
        start = time.perf_counter()
        pending.result()
        print(f"  the GP fit, on PB2's own thread, took {time.perf_counter() - start:.1f} s more", flush=True)


if __name__ == "__main__":
    for count in [int(arg) for arg in sys.argv[1:]] or [200, 1000]:
        measure(count)
