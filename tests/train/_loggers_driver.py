"""A user's training script with loggers, run as its own process by test_interrupted_loggers.py.

usage: _loggers_driver.py STORAGE PROGRESS_FILE HOOKS_FILE
Rank 0 reports a step every 0.3 s (forever) and appends the step to PROGRESS_FILE after its
report returned; the run's CSV/JSON/TensorBoard loggers log them. A callback appends the name
of each end hook it hears (and the error's type) to HOOKS_FILE. Interrupted, it prints the steps
TensorBoard's files hold at once ("TBX STEPS [...]"), as a program that goes on would see them.
"""

import json
import os
import sys
import time

import muster.train as train
from muster.observe.loggers import CSVLoggerCallback, JsonLoggerCallback, TBXLoggerCallback
from muster.train import RunConfig, ScalingConfig
from muster.train.torch import TorchTrainer

storage, progress, hooks = sys.argv[1], sys.argv[2], sys.argv[3]


class Hooks:
    def on_run_end(self, result):
        with open(hooks, "a") as f:
            f.write("on_run_end\n")

    def on_run_failed(self, error):
        with open(hooks, "a") as f:
            f.write(f"on_run_failed {type(error).__name__}\n")


def loop():
    step = 0
    while True:
        time.sleep(0.3)
        if train.get_context().get_world_rank() == 0:
            train.report({"step": step, "loss": 1.0 / (step + 1)})
            with open(progress, "a") as f:
                f.write(f"{step}\n")
        step += 1


try:
    TorchTrainer(
        loop, scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(name="interrupted", storage_path=storage, callbacks=[
            CSVLoggerCallback(), JsonLoggerCallback(), TBXLoggerCallback(), Hooks()]),
    ).fit()
except KeyboardInterrupt:
    # a notebook or a program that goes on: what is on disk now, before any exit handler flushes
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(os.path.join(storage, "interrupted", "tensorboard"))
    acc.Reload()
    charted = acc.Scalars("step") if "step" in acc.Tags()["scalars"] else []
    print("TBX STEPS", json.dumps([int(e.value) for e in charted]), flush=True)
    raise
