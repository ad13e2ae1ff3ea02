"""The `muster` command on a real run folder."""

from __future__ import annotations

import subprocess
import sys

import muster.train as train
from muster.train import RunConfig, ScalingConfig
from muster.train.torch import TorchTrainer


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "muster.cli", *args], capture_output=True, text=True, timeout=60)


def test_runs_list_and_show(storage):
    def loop():
        train.report({"loss": 0.5})

    TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=2),
                 run_config=RunConfig(name="cli_run", storage_path=storage, verbose=0)).fit()
    listing = _cli("runs", "list", "--storage-path", storage)
    assert listing.returncode == 0, listing.stderr
    assert "cli_run" in listing.stdout and "FINISHED" in listing.stdout
    shown = _cli("runs", "show", "cli_run", "--storage-path", storage)
    assert shown.returncode == 0, shown.stderr
    assert "FINISHED" in shown.stdout and '"loss": 0.5' in shown.stdout and "reports    2" in shown.stdout
    missing = _cli("runs", "show", "nope", "--storage-path", storage)
    assert missing.returncode == 2 and "muster runs list" in missing.stderr


def test_status_and_version():
    status = _cli("status")
    assert status.returncode == 0 and "CPU=" in status.stdout
    version = _cli("--version")
    assert version.returncode == 0 and "muster" in version.stdout
