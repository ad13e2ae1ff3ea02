"""A corrupted checkpoint is skipped on resume, with a warning, in favour of the previous good one."""

from __future__ import annotations

import os

import pytest

from muster.train import Checkpoint, FailureConfig, RunConfig, ScalingConfig
from muster.train.torch import TorchTrainer


def loop(config):
    import signal
    import tempfile

    import muster.train as train

    ctx = train.get_context()
    ckpt = train.get_checkpoint()
    start = 0
    if ckpt:
        with ckpt.as_directory() as d:
            start = int(open(os.path.join(d, "step.txt")).read())
        train.report({"resumed_from": start})
        return
    for step in range(1, 4):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "step.txt"), "w") as f:
                f.write(str(step))
            train.report({"step": step}, checkpoint=Checkpoint.from_directory(d))
    # corrupt the newest committed checkpoint, then die
    newest = os.path.join(ctx.get_run_dir(), "checkpoint_000003", "step.txt")
    with open(newest, "w") as f:
        f.write("9")  # same size, different bytes: only the checksum can tell
    os.kill(os.getpid(), signal.SIGKILL)


def test_corrupt_checkpoint_is_skipped(storage):
    with pytest.warns(UserWarning, match="failed verification"):
        result = TorchTrainer(
            loop, scaling_config=ScalingConfig(num_workers=1),
            run_config=RunConfig(storage_path=storage, failure_config=FailureConfig(max_failures=1)),
        ).fit()
    assert result.metrics["resumed_from"] == 2
