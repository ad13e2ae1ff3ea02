"""A killed experiment driver, restored: finished trials are not rerun, running ones resume."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from muster import tune

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE))
import _experiment  # noqa: E402


def _lines(path: pathlib.Path) -> list[tuple[str, int]]:
    if not path.exists():
        return []
    return [(a, int(b)) for a, b in (line.split() for line in path.read_text().splitlines() if line.strip())]


def _recorded(storage: str) -> dict[str, int]:
    """How many results the driver recorded for each trial: its result.json rows, each written once
    the report's checkpoint was committed. A step's progress line is written before its report is
    sent, so a line alone does not mean the driver has that step (a signal or kill may come first)."""
    counts: dict[str, int] = {}
    for path in (pathlib.Path(storage) / "exp").glob("*/result.json"):
        rows = path.read_text().split("\n")[:-1]  # whole lines only: the last one may be being written
        if rows:
            counts[json.loads(rows[0])["trial_id"]] = len(rows)
    return counts


def _start_experiment(storage: str, progress: pathlib.Path, *mode: str, **env_vars: str) -> subprocess.Popen:
    """The user's script, as its own driver process (``env_vars`` set in its environment)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]), **env_vars)
    return subprocess.Popen(
        [sys.executable, str(HERE / "_experiment.py"), storage, "exp", str(progress), *mode],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )


def test_sigkilled_experiment_restores_without_rerunning_finished_trials(storage, tmp_path):
    progress = tmp_path / "progress"
    proc = _start_experiment(storage, progress)
    state_file = pathlib.Path(storage) / "exp" / "experiment_state.json"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            # kill once two trials finished and a third is under way with a checkpoint (recorded: its
            # progress lines alone are written before the driver has its report)
            if state_file.exists():
                try:
                    statuses = [t["status"] for t in json.loads(state_file.read_text())["trials"]]
                except ValueError:
                    statuses = []
                running = [t for t in _recorded(storage) if t.endswith(("00002", "00003"))]
                if statuses.count("TERMINATED") >= 2 and running:
                    break
            assert proc.poll() is None, proc.stdout.read()
            time.sleep(0.05)
        else:
            pytest.fail("the experiment never got to two finished trials")
        proc.kill()  # SIGKILL the driver: no cleanup code runs
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(0.5)  # let the orphaned workers notice (they exit when the driver's link closes)
    before = json.loads(state_file.read_text())
    finished = {t["trial_id"] for t in before["trials"] if t["status"] == "TERMINATED"}
    seen_before = _lines(progress)
    assert len(finished) >= 2

    path = str(pathlib.Path(storage) / "exp")
    assert tune.Tuner.can_restore(path)
    grid = tune.Tuner.restore(path, trainable=_experiment.trainable).fit()

    assert len(grid) == 4 and grid.num_errors == 0
    after = _lines(progress)[len(seen_before):]
    rerun = {t for t, _ in after} & finished
    assert not rerun, f"finished trials ran again: {rerun}"
    for r in grid:
        df = r.metrics_dataframe
        assert r.metrics["step"] == _experiment.STEPS - 1
        # every step reported exactly once across the kill (a step in flight at the kill is redone,
        # but its report never reached the run, so nothing is duplicated in the record)
        assert sorted(df["step"]) == list(range(_experiment.STEPS)), df
    resumed = [r for r in grid if r.metrics["resumed_from"] > 0]
    assert resumed, "no trial resumed from a checkpoint"
    for r in resumed:
        trial_id = r.metrics["trial_id"]
        first_after = min(s for t, s in after if t == trial_id)
        assert first_after == r.metrics["resumed_from"]
    state = json.loads(state_file.read_text())
    assert [t["status"] for t in state["trials"]] == ["TERMINATED"] * 4


def _run_until_the_driver_kills_itself(storage: str, tmp_path: pathlib.Path, mode: str) -> None:
    """The user's script in ``mode``, where its driver SIGKILLs itself at some point of the run."""
    proc = _start_experiment(storage, tmp_path / "progress", mode)
    try:
        assert proc.wait(90) == -9, proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(0.5)  # let the orphaned workers notice


def test_a_trial_that_reported_its_last_step_just_before_the_kill_keeps_those_metrics(storage, tmp_path):
    # the driver dies before the experiment state records the trial's last results; restored, the
    # trial resumes from its last checkpoint and has nothing left to report, so its metrics must
    # come from what it recorded (they were the state's stale ones, a step or more behind)
    _run_until_the_driver_kills_itself(storage, tmp_path, "kill-after-last-step")
    grid = tune.Tuner.restore(str(pathlib.Path(storage) / "exp"), trainable=_experiment.trainable).fit()
    assert grid.num_errors == 0
    for r in grid:
        assert r.metrics["step"] == _experiment.STEPS - 1, (r.metrics, r.metrics_dataframe)
        assert r.metrics["step"] == r.metrics_dataframe["step"].iloc[-1]
    assert grid.get_best_result().metrics["step"] == _experiment.STEPS - 1


def test_restore_of_a_non_experiment_names_the_expected_files(tmp_path):
    with pytest.raises(ValueError, match="experiment_state.json"):
        tune.Tuner.restore(str(tmp_path / "nothing"), trainable=_experiment.trainable)


def _signal_experiment(storage: str, progress: pathlib.Path, sig: str,
                       **env_vars: str) -> tuple[subprocess.Popen, str, list]:
    """Run the user's script, send it ``sig`` once both running trials have a result recorded (with its
    checkpoint); its output and worker processes."""
    import signal

    import psutil

    proc = _start_experiment(storage, progress, **env_vars)
    try:
        deadline = time.monotonic() + 60
        while len(_recorded(storage)) < 2:
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, f"two trials never reported: {_lines(progress)}"
            time.sleep(0.05)
        kids = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(getattr(signal, sig))
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    gone, alive = psutil.wait_procs(kids, timeout=5)
    assert not alive, f"workers outlived the stopped experiment: {alive}"
    return proc, out, [t["status"] for t in json.loads((pathlib.Path(storage) / "exp" / "experiment_state.json")
                                                      .read_text())["trials"]]


def test_sigterm_stops_the_experiment_cleanly_and_says_how_to_resume(storage, tmp_path):
    proc, out, statuses = _signal_experiment(storage, tmp_path / "progress", "SIGTERM")
    assert proc.returncode != 0
    assert "experiment interrupted; resume it with Tuner.restore(" in out, out
    # one traceback, of the interrupt: before, a signal landing in the loop's queue wait could leave
    # the queue's lock released and end in "RuntimeError: release unlocked lock", with no hint
    assert out.count("Traceback") == 1 and "KeyboardInterrupt: SIGTERM" in out and "RuntimeError" not in out, out
    assert "interrupted after" in out, out
    assert "RUNNING" in statuses  # resumable, not marked done


def test_ctrl_c_ends_fit_which_returns_the_results_so_far_and_restore_goes_on(storage, tmp_path):
    """Ray's Tuner.fit: Ctrl-C stops the trials and returns a ResultGrid (no error for the stopped
    trials); Tuner.restore then resumes them from their checkpoints."""
    progress = tmp_path / "progress"
    proc, out, statuses = _signal_experiment(storage, progress, "SIGINT")
    assert proc.returncode == 0 and "Traceback" not in out, out  # before: KeyboardInterrupt out of fit()
    assert "experiment interrupted; resume it with Tuner.restore(" in out and "interrupted after" in out, out
    grid = json.loads(out[out.index("DONE ") + 5:].splitlines()[0])
    started = {x: r for x, r in grid.items() if r[0] is not None}  # the trials created so far, two of them running
    assert len(started) == 2 and len(grid) <= 4, out
    assert started and all(r[0] < _experiment.STEPS - 1 and r[1] is False and r[3] for r in started.values()), out
    assert not any(r[2] for r in grid.values()), out  # the stopped trials carry no error
    assert all(os.path.isdir(r[4]) for r in started.values()), out
    assert "RUNNING" in statuses
    at_stop = len(_lines(progress))
    resumed = tune.Tuner.restore(str(pathlib.Path(storage) / "exp"), trainable=_experiment.trainable).fit()
    assert resumed.num_errors == 0 and len(resumed) == 4
    assert all(r.metrics["step"] == _experiment.STEPS - 1 for r in resumed)
    # the trials that had reported went on from their checkpoints, not from step 0
    assert all(r.metrics["resumed_from"] > 0 for r in resumed if str(r.config["x"]) in started)
    assert len(_lines(progress)) - at_stop < 4 * _experiment.STEPS


def test_sigusr1_ends_fit_as_ctrl_c_does_as_in_ray(storage, tmp_path):
    proc, out, statuses = _signal_experiment(storage, tmp_path / "progress", "SIGUSR1")
    assert proc.returncode == 0 and "Traceback" not in out, out  # before: SIGUSR1's default, the process died
    assert "DONE " in out and "RUNNING" in statuses, out


def test_ctrl_c_raises_keyboard_interrupt_under_tune_disable_sigint_handler(storage, tmp_path):
    """Ray's TUNE_DISABLE_SIGINT_HANDLER=1: Tune installs no SIGINT handler, so Ctrl-C raises
    KeyboardInterrupt out of fit() (muster still stops the trials and saves the state first)."""
    proc, out, statuses = _signal_experiment(storage, tmp_path / "progress", "SIGINT", TUNE_DISABLE_SIGINT_HANDLER="1")
    assert proc.returncode != 0 and "DONE " not in out, out  # before: fit() returned the results so far
    assert "KeyboardInterrupt" in out and "RuntimeError" not in out, out
    assert "RUNNING" in statuses  # saved, resumable


class _Interrupting(tune.Callback):
    """Sends this (driver) process a real SIGINT at the first result."""

    def __init__(self):
        self.sent = False

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if not self.sent:
            self.sent = True
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)  # the handler runs at once


def _steps(config):
    for step in range(3):
        tune.report({"step": step})
        time.sleep(0.1)


def test_tune_disable_sigint_handler_leaves_the_programs_own_handler_in_place(storage, monkeypatch):
    got = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    try:
        monkeypatch.setenv("TUNE_DISABLE_SIGINT_HANDLER", "1")
        grid = tune.Tuner(_steps, run_config=tune.RunConfig(storage_path=storage, verbose=0,
                                                            callbacks=[_Interrupting()])).fit()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert got == [signal.SIGINT]  # before: Tune's handler took it and ended the run
    (r,) = list(grid)
    assert r.error is None and r.metrics["step"] == 2 and r.metrics["done"] is True


def test_the_first_signal_waits_for_the_loop_and_a_second_raises_at_once():
    import signal

    from muster.core.interrupts import SafeInterrupts

    with SafeInterrupts(signal.SIGUSR1) as interrupts:
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.05)
        assert interrupts.received == "SIGUSR1"  # noted, nothing raised yet
        with pytest.raises(KeyboardInterrupt, match="SIGUSR1 again"):
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.5)
        with pytest.raises(KeyboardInterrupt, match="SIGUSR1"):
            interrupts.check()
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # the handler is given back


def test_a_driver_killed_between_a_checkpoints_commit_and_its_row_loses_no_step(storage, tmp_path):
    # the driver commits a report's checkpoint, then appends the report's row to result.json: killed in
    # between, the restored trial resumes after that checkpoint, so the step's row must be recovered
    # from the checkpoint's manifest (it was never in the record: a step missing from metrics_dataframe)
    _run_until_the_driver_kills_itself(storage, tmp_path, "kill-between-commit-and-row")
    [third] = [t for t in _recorded(storage) if t.endswith("00002")] or [None]
    assert third is not None and _recorded(storage)[third] == 3  # its fourth step's row never written
    grid = tune.Tuner.restore(str(pathlib.Path(storage) / "exp"), trainable=_experiment.trainable).fit()
    assert grid.num_errors == 0 and len(grid) == 4
    for r in grid:
        assert sorted(r.metrics_dataframe["step"]) == list(range(_experiment.STEPS)), r.metrics_dataframe
        assert r.metrics["step"] == _experiment.STEPS - 1
