"""What a worker's output and environment look like from the driver.

* stdout, stderr and raw fd writes of a worker reach the driver's
  ``sys.stdout``, each line prefixed with ``(<label>, pid=<pid>) ``, none lost,
  cut or reordered in a burst;
* OMP_NUM_THREADS follows the CPUs an actor holds unless the driver set it;
* the driver's environment at actor creation reaches the worker.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest
from _shared import output_with

from muster.core.api import get_runtime

TIMEOUT = 30


class Talker:
    def talk(self, token: str) -> int:
        print(f"out {token}")
        print(f"err {token}", file=sys.stderr)
        os.write(1, f"raw1 {token}\n".encode())
        os.write(2, f"raw2 {token}\n".encode())
        return os.getpid()

    def burst(self, n: int) -> None:
        for i in range(n):  # one write per line, of varied lengths, some over the relay's 64 KiB read
            print(f"burst {i} " + "x" * (i % 97) + ("y" * 70000 if i % 5000 == 4999 else ""), flush=True)
            if i % 200 == 0:
                time.sleep(0.005)  # in bursts over ~0.5 s: the driver waits while lines still come

    def last_words_then_sigkill(self, token: str) -> None:
        print(f"last {token}")
        os.kill(os.getpid(), signal.SIGKILL)


    def crash(self) -> None:
        import ctypes

        print("about to crash", flush=True)
        ctypes.string_at(0)  # a real SIGSEGV, in C


class Probe:
    def env(self, names: list[str]) -> dict[str, str | None]:
        return {n: os.environ.get(n) for n in names}

    def threads(self) -> tuple[str | None, int]:
        import torch

        return os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads()


@pytest.fixture
def actors():
    rt = get_runtime()
    made = []

    def create(cls, resources=None, label=""):
        h = rt.create_actor(cls, (), {}, resources if resources is not None else {"CPU": 1}, label=label)
        made.append(h)
        return h

    yield create
    for h in made:
        rt.kill(h)


def _collect(capture, wanted: list[str], timeout: float = 10.0) -> list[str]:
    """Lines of captured stdout (``capture``: ``capsys`` or ``capfd``), once every wanted line is in (bounded)."""
    return output_with(capture, *wanted, timeout=timeout).out.splitlines()


def test_print_stderr_and_raw_fd_writes_reach_driver_stdout_prefixed(actors, capsys):
    h = actors(Talker, label="talker")
    pid = h.call("talk", "t0k3n").result(TIMEOUT)
    assert pid == h.pid
    prefix = f"(talker, pid={pid}) "
    wanted = [f"{prefix}{kind} t0k3n" for kind in ("out", "err", "raw1", "raw2")]
    lines = _collect(capsys, wanted)
    for w in wanted:
        assert w in lines, f"missing {w!r} in {lines!r}"
    # Each line once, prefixed once.
    assert sum("t0k3n" in line for line in lines) == 4


@pytest.mark.parametrize("capture", ["capfd", "capsys"])
def test_a_burst_of_lines_reaches_the_driver_whole_and_in_order(actors, capture, request):
    h, captured = actors(Talker, label="burst"), request.getfixturevalue(capture)  # capturing before it writes
    n = 20000
    call = h.call("burst", n)  # read while it writes
    prefix = f"(burst, pid={h.pid}) burst "
    lines = [line for line in _collect(captured, [f"{prefix}{n - 1} "], TIMEOUT) if line.startswith(prefix)]
    call.result(TIMEOUT)
    assert [int(line.split()[3]) for line in lines] == list(range(n))  # none lost, none twice, none reordered
    assert all(line.endswith("x" * (i % 97) + ("y" * 70000 if i % 5000 == 4999 else "")) for i, line in
               enumerate(lines))  # none cut


def test_two_workers_lines_carry_their_own_label_and_pid(actors, capsys):
    a, b = actors(Talker, label="alpha"), actors(Talker, label="beta")
    pa = a.call("talk", "from-a").result(TIMEOUT)
    pb = b.call("talk", "from-b").result(TIMEOUT)
    wanted = [f"(alpha, pid={pa}) out from-a", f"(beta, pid={pb}) out from-b"]
    lines = _collect(capsys, wanted)
    assert all(w in lines for w in wanted), lines
    assert not any("from-a" in line and "beta" in line for line in lines)


def test_output_printed_just_before_a_sigkill_is_not_lost(actors, capsys):
    h = actors(Talker, label="doomed")
    pid = h.pid
    h.call("last_words_then_sigkill", "bye-now").exception(TIMEOUT)
    wanted = [f"(doomed, pid={pid}) last bye-now"]
    assert all(w in _collect(capsys, wanted) for w in wanted)


def test_a_native_crash_prints_the_python_stack_where_it_happened(actors, capsys):
    h = actors(Talker, label="segv")
    pid = h.pid
    h.call("crash").exception(TIMEOUT)
    prefix = f"(segv, pid={pid}) "
    wanted = [f"{prefix}about to crash", f"{prefix}Fatal Python error: Segmentation fault"]
    lines = _collect(capsys, wanted)
    assert all(w in lines for w in wanted), lines
    assert any(line.startswith(prefix) and 'line' in line and 'in crash' in line for line in lines), lines
    assert get_runtime().exit_status(h, 5) == -signal.SIGSEGV


def test_omp_threads_follow_cpus_by_default(actors, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    one = actors(Probe, resources={"CPU": 1})
    two = actors(Probe, resources={"CPU": 2})
    assert one.call("threads").result(TIMEOUT) == ("1", 1)
    assert two.call("threads").result(TIMEOUT) == ("2", 2)
    assert "OMP_NUM_THREADS" not in os.environ  # the driver's own env is left alone


def test_driver_omp_num_threads_wins(actors, monkeypatch):
    """The driver's value reaches the worker, and its torch uses what a fresh interpreter's would.

    Whether the zygote imported torch before the fork (the driver had) must not matter.
    """
    import subprocess

    wanted = os.cpu_count() + 1  # more than the machine has: torch caps it
    monkeypatch.setenv("OMP_NUM_THREADS", str(wanted))
    fresh = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                           capture_output=True, text=True, check=True).stdout.strip()
    h = actors(Probe, resources={"CPU": 1})
    assert h.call("threads").result(TIMEOUT) == (str(wanted), int(fresh))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    h = actors(Probe, resources={"CPU": 2})
    assert h.call("threads").result(TIMEOUT) == ("1", 1)


def test_driver_env_at_creation_reaches_the_worker(actors, monkeypatch):
    monkeypatch.setenv("MUSTER_TEST_FLAG", "set-before-create")
    monkeypatch.setenv("WANDB_MODE", "offline")
    h = actors(Probe)
    monkeypatch.setenv("MUSTER_TEST_LATE", "after")  # too late for this worker
    got = h.call("env", ["MUSTER_TEST_FLAG", "WANDB_MODE", "MUSTER_TEST_LATE"]).result(TIMEOUT)
    assert got == {"MUSTER_TEST_FLAG": "set-before-create", "WANDB_MODE": "offline", "MUSTER_TEST_LATE": None}


def test_gang_env_is_added_to_the_driver_env(monkeypatch):
    rt = get_runtime()
    monkeypatch.setenv("MUSTER_TEST_FLAG", "driver")
    gang = rt.create_gang(2, Probe, {"CPU": 1}, env={"MUSTER_GANG_ONLY": "g"})
    try:
        for h in gang:
            got = h.call("env", ["MUSTER_TEST_FLAG", "MUSTER_GANG_ONLY"]).result(TIMEOUT)
            assert got == {"MUSTER_TEST_FLAG": "driver", "MUSTER_GANG_ONLY": "g"}
    finally:
        for h in gang:
            rt.kill(h)
    assert "MUSTER_GANG_ONLY" not in os.environ
