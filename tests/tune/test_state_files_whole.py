"""Every file ``Tuner.restore`` reads is written whole or not at all, and one it cannot read is named, with the fix."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys

import pytest

from muster import tune
from muster.exceptions import InvalidArgumentError

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE))
from _searcher_experiment import STATE_FILE, trainable  # noqa: E402


def _run_driver(storage: str, kill_at_save: int) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, str(HERE / "_searcher_experiment.py"), storage, "exp", str(kill_at_save)],
                          capture_output=True, text=True, env=env, timeout=120)


def test_a_driver_killed_while_writing_the_searcher_state_restores_with_nothing_lost(storage):
    # the kernel kills the driver part-way through its third write of the searcher's state; before,
    # that write went into the file itself, which was left cut short and broke Tuner.restore
    proc = _run_driver(storage, kill_at_save=3)
    assert proc.returncode == -signal.SIGXFSZ, proc.stdout + proc.stderr
    run_dir = pathlib.Path(storage) / "exp"
    kept = json.loads((run_dir / STATE_FILE).read_text())  # the second save, whole
    assert kept["made"] >= 1, kept
    [cut] = [p for p in run_dir.iterdir() if STATE_FILE in p.name and p.name != STATE_FILE]  # the third, cut short
    restored = tune.Tuner.restore(str(run_dir), trainable=trainable)
    assert not cut.exists()  # restoring removed what the killed write left; it would stay there for good
    grid = restored.fit()
    assert sorted(r.config["x"] for r in grid) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert grid.num_errors == 0
    assert sorted(restored.tune_config.search_alg.told) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert [p for p in run_dir.rglob("*") if ".tmp" in p.name] == []


def test_an_unreadable_state_file_is_named_with_the_fix(storage):
    assert _run_driver(storage, kill_at_save=0).returncode == 0
    run_dir = pathlib.Path(storage) / "exp"
    (run_dir / STATE_FILE).write_text('{"made": 3, "to')  # as a version that wrote it in place left it
    with pytest.raises(InvalidArgumentError, match=rf"{STATE_FILE} is unreadable .*Delete that file"):
        tune.Tuner.restore(str(run_dir), trainable=trainable).fit()
    (run_dir / STATE_FILE).unlink()  # the fix it names: the search starts afresh, the trials are kept
    grid = tune.Tuner.restore(str(run_dir), trainable=trainable).fit()
    assert len(grid) == 6 and grid.num_errors == 0
    (run_dir / "experiment_state.json").write_text('{"trials": [')
    with pytest.raises(InvalidArgumentError, match=r"experiment_state.json is unreadable .*put back a copy"):
        tune.Tuner.restore(str(run_dir), trainable=trainable)
    (run_dir / "tuner.pkl").write_bytes((run_dir / "tuner.pkl").read_bytes()[:40])
    with pytest.raises(InvalidArgumentError, match=r"tuner.pkl is unreadable"):
        tune.Tuner.restore(str(run_dir), trainable=trainable)
