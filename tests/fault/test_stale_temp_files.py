"""A writer killed mid-write leaves its temporary file; opening the run again removes it (never a live writer's),
and no checkpoint ever holds one."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import psutil
import pytest

from muster.train import Checkpoint, Result
from muster.train.storage import RUN_STATE, Storage, folder_files

HERE = os.path.dirname(__file__)
WRAPPER = os.path.join(HERE, "_killed_mid_write.py")


def _temps(folder, name):
    """The files under ``folder`` that are not ``name`` but are named after it: what its writes left."""
    return sorted(p for p in pathlib.Path(folder).rglob("*") if name in p.name and p.name != name)


def _writer(how, run_dir, text):
    return subprocess.Popen([sys.executable, WRAPPER, how, "notes.json", "1", "write", run_dir, text],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_stopped(proc, timeout=30):
    deadline = time.monotonic() + timeout
    while psutil.Process(proc.pid).status() != psutil.STATUS_STOPPED:
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
        time.sleep(0.02)


def test_only_a_dead_writers_temporary_file_goes_and_none_is_copied(storage):
    run_dir = os.path.join(storage, "run")
    dead = _writer("KILL", run_dir, '{"by": "dead"}')
    dead.wait(timeout=60)
    assert dead.returncode == -signal.SIGKILL
    [left] = _temps(run_dir, "notes.json")
    live = _writer("STOP", run_dir, '{"by": "live"}')
    try:
        _wait_stopped(live)
        assert len(_temps(run_dir, "notes.json")) == 2
        pathlib.Path(run_dir, "model.txt").write_text("weights")
        # a checkpoint of the folder (the run folder, as a trial's own) holds the user's file, no temporary one
        assert [rel for _, rel in folder_files(run_dir)] == ["model.txt"]
        st = Storage.at(run_dir)
        assert st.remove_stale_temp_files() == [str(left)]
        [kept] = _temps(run_dir, "notes.json")
        assert str(kept).endswith(f"-{live.pid}")  # the stopped writer's, still being written
    finally:
        live.send_signal(signal.SIGCONT)
    assert live.wait(timeout=60) == 0
    assert _temps(run_dir, "notes.json") == []
    assert pathlib.Path(run_dir, "notes.json").read_text() == '{"by": "live"}'


def _driver(how, storage, name, progress, nth=0):
    env = dict(os.environ, MUSTER_PLAIN_PROGRESS="1", PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, WRAPPER, how, RUN_STATE, str(nth), os.path.join(HERE, "_fault_driver.py"),
                             storage, name, "8", str(progress)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


@pytest.mark.timeout(180)
def test_a_driver_killed_while_writing_the_run_state_resumes_without_its_leftover(storage, tmp_path):
    # the driver dies between writing the run state's new version aside and renaming it into place (its
    # fourth write: after some checkpoints); before, that file stayed in the run folder for good
    first = _driver("KILL", storage, "crashy", tmp_path / "progress.txt", nth=4)
    out, _ = first.communicate(timeout=90)
    assert first.returncode == -signal.SIGKILL, out
    st = Storage(storage, "crashy")
    assert len(_temps(st.run_dir, RUN_STATE)) == 1
    rounds = st.committed_rounds()
    assert rounds
    rerun = _driver("KILL", storage, "crashy", tmp_path / "progress2.txt")
    out, _ = rerun.communicate(timeout=120)
    assert rerun.returncode == 0 and "RESUMING" in out and "FINAL STEP 7" in out, out
    assert _temps(st.run_dir, RUN_STATE) == []
    assert st.read_json(st.join(st.run_dir, RUN_STATE))["status"] == "FINISHED"
    assert set(rounds) <= set(st.committed_rounds())  # nothing committed before the crash was lost
    result = Result.from_path(st.uri)
    assert result.metrics["step"] == 7 and isinstance(result.checkpoint, Checkpoint)
