"""A user's training script, run as its own process by the driver-fault tests.

usage: _fault_driver.py STORAGE NAME STEPS PROGRESS_FILE
Each step sleeps briefly and reports a checkpoint from rank 0; the step
numbers every rank runs are appended to PROGRESS_FILE.
"""

import os
import sys
import tempfile
import time

import muster.train as train
from muster.train import Checkpoint, RunConfig, ScalingConfig
from muster.train.torch import TorchTrainer

storage, name, steps, progress = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]


def loop():
    ckpt = train.get_checkpoint()
    start = 0
    if ckpt:
        with ckpt.as_directory() as d:
            start = int(open(os.path.join(d, "step")).read()) + 1
    for step in range(start, steps):
        time.sleep(0.3)
        with open(progress, "a") as f:
            f.write(f"{train.get_context().get_world_rank()} {step}\n")
        if train.get_context().get_world_rank() == 0:
            with tempfile.TemporaryDirectory() as d:
                open(os.path.join(d, "step"), "w").write(str(step))
                train.report({"step": step}, checkpoint=Checkpoint.from_directory(d))


result = TorchTrainer(
    loop, scaling_config=ScalingConfig(num_workers=2),
    run_config=RunConfig(name=name, storage_path=storage),
).fit()
print("FINAL STEP", result.metrics["step"], flush=True)
