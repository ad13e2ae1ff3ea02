"""No orphans: however a training driver ends, its workers and launcher go with it.

Each test runs ``_orphans_driver.py`` (a real 2-worker ``TorchTrainer``) as its own
process, lets it end one way, and checks that every worker pid and the
driver's zygote are gone within a few seconds, and so is the engine's folder of
sockets in the temporary directory (removed by the driver, or by the zygote
when the driver was killed).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from muster.core.local import zygote_process

DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_orphans_driver.py")
START_TIMEOUT = 60  # a fresh interpreter importing torch on a loaded 2-core box
GONE_WITHIN = 5.0


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_gone(pids: list[int], timeout: float = GONE_WITHIN) -> list[int]:
    deadline = time.monotonic() + timeout
    alive = [p for p in pids if not _gone(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if not _gone(p)]
    return alive


class Driver:
    def __init__(self, mode: str, outdir: str):
        self.outdir = outdir
        env = {k: v for k, v in os.environ.items() if k not in ("MUSTER_ADDRESS", "RAY_ADDRESS")}
        env["MUSTER_PLAIN_PROGRESS"] = "1"
        self.tmpdir = os.path.join(outdir, "tmp")
        os.makedirs(self.tmpdir)
        env["TMPDIR"] = self.tmpdir
        self._out = open(os.path.join(outdir, "driver.out"), "w")
        self.proc = subprocess.Popen(
            [sys.executable, DRIVER, mode, outdir],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=outdir,
        )
        self.zygotes: set[int] = set()
        self.workers: list[int] = []

    def output(self) -> str:
        self._out.flush()
        with open(os.path.join(self.outdir, "driver.out")) as f:
            return f.read()

    def watch_zygote(self) -> None:
        """Remember the driver's worker launcher (its child running muster's zygote)."""
        try:
            for child in psutil.Process(self.proc.pid).children():
                try:
                    # Forked from the driver it is named muster-zygote; a fresh interpreter runs the module.
                    if child.name() == "muster-zygote" or zygote_process.MODULE in child.cmdline():
                        self.zygotes.add(child.pid)
                except psutil.NoSuchProcess:
                    pass
        except psutil.NoSuchProcess:
            pass

    def wait_for_workers(self) -> list[int]:
        """Wait until both workers wrote their pids (polling the launcher meanwhile)."""
        paths = [os.path.join(self.outdir, f"worker-{r}.pid") for r in (0, 1)]
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            self.watch_zygote()
            if all(os.path.exists(p) for p in paths):
                break
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.watch_zygote()
        missing = [p for p in paths if not os.path.exists(p)]
        assert not missing, f"workers never started; driver output:\n{self.output()}"
        self.workers = []
        for p in paths:
            with open(p) as f:
                self.workers.append(int(f.read()))
        return self.workers

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pid in self.workers + sorted(self.zygotes):  # clean up after a failed test
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self._out.close()


@pytest.fixture
def driver(tmp_path):
    made = []

    def start(mode: str) -> Driver:
        d = Driver(mode, str(tmp_path))
        made.append(d)
        return d

    yield start
    for d in made:
        d.close()


def _assert_all_gone(d: Driver) -> None:
    assert d.zygotes, f"never saw the driver's zygote; driver output:\n{d.output()}"
    alive = _wait_gone(d.workers + sorted(d.zygotes))
    assert not alive, (
        f"still alive {GONE_WITHIN:.0f} s after the driver ended: {alive} "
        f"(workers {d.workers}, zygote {sorted(d.zygotes)}); driver output:\n{d.output()}"
    )
    engine_dirs = [n for n in os.listdir(d.tmpdir) if re.fullmatch(r"muster-[a-z0-9_]{8}", n)]
    assert not engine_dirs, f"the engine's folder of sockets was left in {d.tmpdir}: {engine_dirs}"


def _after_fit(d: Driver) -> dict:
    with open(os.path.join(d.outdir, "after-fit.json")) as f:
        return json.load(f)


def test_no_orphans_after_fit_returns(driver):
    d = driver("return")
    workers = d.wait_for_workers()
    assert d.proc.wait(START_TIMEOUT) == 0, d.output()
    report = _after_fit(d)
    assert report["outcome"] == "returned"
    assert report["alive"] == [], f"fit() returned with workers {report['alive']} of {workers} alive"
    _assert_all_gone(d)


def test_no_orphans_after_fit_raises(driver):
    d = driver("raise")
    workers = d.wait_for_workers()
    assert d.proc.wait(START_TIMEOUT) != 0, d.output()
    out = d.output()
    assert "planned failure on rank" in out
    report = _after_fit(d)
    assert report["outcome"] == "TrainingFailedError", out
    assert report["alive"] == [], f"fit() raised with workers {report['alive']} of {workers} alive"
    _assert_all_gone(d)


def test_no_orphans_after_sigint_to_the_driver(driver):
    d = driver("sleep")
    d.wait_for_workers()
    time.sleep(0.3)  # let both ranks settle into their sleep
    assert d.proc.poll() is None, d.output()
    d.proc.send_signal(signal.SIGINT)
    try:
        rc = d.proc.wait(20)
    except subprocess.TimeoutExpired:
        pytest.fail(f"driver did not exit within 20 s of SIGINT; output:\n{d.output()}")
    assert rc == -signal.SIGINT, d.output()  # Python's exit for an uncaught KeyboardInterrupt
    assert "KeyboardInterrupt" in d.output(), d.output()
    _assert_all_gone(d)


def test_no_orphans_after_sigkill_to_the_driver(driver):
    d = driver("sleep")
    d.wait_for_workers()
    assert d.proc.poll() is None, d.output()
    d.proc.send_signal(signal.SIGKILL)
    assert d.proc.wait(10) == -signal.SIGKILL
    _assert_all_gone(d)
