"""examples/ensemble.py runs as a user runs it: a real subprocess with its own engine."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "ensemble.py"
MEMBERS = 3


@pytest.mark.timeout(200)
def test_ensemble_example_trains_members_in_parallel_and_runs_the_counter():
    tag = uuid.uuid4().hex
    env = dict(os.environ, MUSTER_EXAMPLE_TEST_TAG=tag)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--members", str(MEMBERS), "--epochs", "4", "--samples", "1600"],
        cwd=SCRIPT.parents[1], env=env, capture_output=True, text=True, timeout=180,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out

    # Every member trained as a task and came back with weights that predict.
    members = re.findall(r"member (\d+): test accuracy ([\d.]+) .*?(pid (\d+)|GPU \[\d+\])\)", out)
    assert [int(m[0]) for m in members] == list(range(MEMBERS)), out
    accs = [float(m[1]) for m in members]
    assert all(0.7 < a <= 1.0 for a in accs), out
    pids = {m[3] for m in members if m[3]}
    # No GPU here: num_cpus=1 tasks on the default engine (one CPU each), workers reused.
    assert pids and len(pids) <= min(MEMBERS, len(os.sched_getaffinity(0))), out
    ensemble = float(re.search(r"ensemble accuracy: ([\d.]+)", out).group(1))
    assert ensemble >= sum(accs) / len(accs) - 0.01, out  # averaging does not lose accuracy
    wrong, right = map(float, re.search(r"\(std of p\): ([\d.]+) on .*?wrong, ([\d.]+) on", out).groups())
    assert wrong > right, out  # members disagree more where the ensemble errs: the uncertainty signal

    assert "directly -> TypeError" in out and "trainer_fit.remote(" in out
    assert re.search(r"^counter: 10$", out, re.M), out

    # The script's engine and workers are gone with it.
    deadline = time.monotonic() + 5
    while (left := [p for p in psutil.process_iter() if _tagged(p, tag)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    for p in left:
        p.kill()
    assert not left, f"ensemble.py left processes behind: {[p.pid for p in left]}"


def _tagged(p: psutil.Process, tag: str) -> bool:
    try:
        return p.environ().get("MUSTER_EXAMPLE_TEST_TAG") == tag
    except (psutil.Error, OSError):
        return False
