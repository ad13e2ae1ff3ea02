"""The driver itself dies or is stopped: the run resumes, nothing committed is lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from muster.train import Result
from muster.train.storage import MANIFEST, RUN_STATE, Storage

DRIVER = os.path.join(os.path.dirname(__file__), "_fault_driver.py")


def _start(storage, name, progress, steps=12):
    env = dict(os.environ, MUSTER_PLAIN_PROGRESS="1", PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, DRIVER, storage, name, str(steps), str(progress)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )


def _wait_for_checkpoints(storage, name, count, proc, timeout=60):
    st = Storage(storage, name)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.isdir(st.run_dir) and len(st.committed_rounds()) >= count:
            return st
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.05)
    raise AssertionError("no checkpoints appeared")


def _descendants(proc):
    try:
        return psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _gone(procs, timeout=5):
    gone, alive = psutil.wait_procs(procs, timeout=timeout)
    return not alive


def _steps_of(progress, rank=0):
    return [int(line.split()[1]) for line in open(progress) if line.split()[0] == str(rank)]


@pytest.mark.timeout(120)
def test_driver_sigkill_then_rerun_resumes_loudly_and_finishes(storage, tmp_path):
    progress = tmp_path / "progress.txt"
    proc = _start(storage, "crashy", progress)
    st = _wait_for_checkpoints(storage, "crashy", 3, proc)
    kids = _descendants(proc)
    proc.kill()  # SIGKILL: no cleanup code runs in the driver
    proc.wait()
    assert _gone(kids), "workers outlived a SIGKILLed driver"
    committed = st.committed_rounds()
    last_step = int(open(os.path.join(st.checkpoint_dir(committed[-1]), "step")).read())

    progress2 = tmp_path / "progress2.txt"
    rerun = _start(storage, "crashy", progress2)
    out, _ = rerun.communicate(timeout=90)
    assert rerun.returncode == 0, out
    assert "RESUMING run 'crashy'" in out and f"checkpoint_{committed[-1]:06d}" in out
    assert "FINAL STEP 11" in out
    # the second driver went on from the last committed step and redid nothing before it
    assert _steps_of(progress2) == list(range(last_step + 1, 12))
    assert _steps_of(progress2, rank=1) == list(range(last_step + 1, 12))
    result = Result.from_path(st.uri)
    assert result.metrics["step"] == 11


@pytest.mark.timeout(120)
def test_rerun_of_finished_run_is_refused(storage, tmp_path):
    progress = tmp_path / "progress.txt"
    first = _start(storage, "done", progress, steps=3)
    out, _ = first.communicate(timeout=90)
    assert first.returncode == 0, out
    again = _start(storage, "done", progress, steps=3)
    out, _ = again.communicate(timeout=90)
    assert again.returncode != 0
    assert "already FINISHED" in out and "RunConfig(name=" in out and "restore" in out
    assert _steps_of(progress) == [0, 1, 2]  # the refused rerun trained nothing


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_stops_cleanly_and_the_run_resumes(storage, tmp_path, sig):
    progress = tmp_path / "progress.txt"
    name = f"stop_{sig.name}"
    proc = _start(storage, name, progress)
    st = _wait_for_checkpoints(storage, name, 2, proc)
    kids = _descendants(proc)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode != 0
    assert "interrupted" in out and "to resume" in out
    # the signal takes effect between the controller's waits, never inside a queue's lock
    assert "release unlocked lock" not in out and out.count("Traceback") <= 1, out
    assert _gone(kids), "workers outlived a stopped driver"
    state = st.read_json(st.join(st.run_dir, RUN_STATE))
    assert state["status"] == "INTERRUPTED"
    for r in st.committed_rounds():  # every committed checkpoint is whole
        assert not st.verify(st.checkpoint_dir(r)) and os.path.exists(os.path.join(st.checkpoint_dir(r), MANIFEST))
    assert not [d for d in os.listdir(st.run_dir) if d.startswith("checkpoint_") and
                not os.path.exists(os.path.join(st.run_dir, d, MANIFEST))]
    rerun = _start(storage, name, progress)
    out, _ = rerun.communicate(timeout=90)
    assert rerun.returncode == 0 and "RESUMING" in out and "FINAL STEP 11" in out, out
