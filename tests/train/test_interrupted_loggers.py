"""Ctrl-C to a Trainer's driver: its loggers still close, so what was reported before the signal is on disk."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest

DRIVER = os.path.join(os.path.dirname(__file__), "_loggers_driver.py")


def _steps(path):
    return [int(line) for line in open(path)] if os.path.exists(path) else []


@pytest.mark.timeout(120)
def test_ctrl_c_closes_the_loggers_with_the_last_reports_on_disk(storage, tmp_path):
    pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    progress, hooks = tmp_path / "progress.txt", tmp_path / "hooks.txt"
    env = dict(os.environ, MUSTER_PLAIN_PROGRESS="1", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, DRIVER, storage, str(progress), str(hooks)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    deadline = time.monotonic() + 60
    while len(_steps(progress)) < 4:
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.stdout else ""
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode != 0 and "KeyboardInterrupt" in out and "interrupted" in out, out
    # before: neither end hook was called, TensorBoard's writer was left open
    assert open(hooks).read().splitlines() == ["on_run_failed KeyboardInterrupt"], out
    reported = _steps(progress)  # every report that returned before the driver stopped
    run_dir = os.path.join(storage, "interrupted")
    with open(os.path.join(run_dir, "progress.json")) as f:
        assert [json.loads(line)["step"] for line in f][:len(reported)] == reported
    with open(os.path.join(run_dir, "progress.csv")) as f:
        assert [int(row["step"]) for row in csv.DictReader(f)][:len(reported)] == reported
    # read in the driver as fit() raised, before tensorboardX's exit handler could flush it
    charted = json.loads(out[out.index("TBX STEPS ") + 10:].splitlines()[0])
    assert charted[:len(reported)] == reported, out
