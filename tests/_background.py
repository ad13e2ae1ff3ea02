"""Checks that only read the sources (mypy, each module importing alone) run from the start of the session in
the background, at the lowest CPU priority, and their tests collect the result where they stand in the run.

Most of the suite waits on processes, sockets and clocks, so the cores are often idle; these checks are all
CPU (mypy alone is ~2 minutes of it) and used to run with the rest of the suite waiting on them. At nice 19 they
take only what the other tests leave. A test run on its own starts its check when it needs it, and so does a test
in a suite split over processes by pytest-xdist (the other process keeps the second core busy).
"""

from __future__ import annotations

import dataclasses
import pathlib
import shutil
import subprocess
import tempfile
from typing import IO

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@dataclasses.dataclass
class _Check:
    proc: subprocess.Popen
    out: IO[str]
    err: IO[str]


_running: dict[str, _Check] = {}


def start(name: str, argv: list[str], nice: bool = False) -> None:
    """Start check ``name`` (``argv`` run in the repository's root) unless it was started already; ``nice``: at
    the lowest CPU priority."""
    if name in _running:
        return
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")  # never a full pipe that stalls it
    niced = nice and shutil.which("nice")  # a command prefix, not preexec_fn (unsafe in a process with threads)
    proc = subprocess.Popen(["nice", "-n", "19", *argv] if niced else argv, cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=out, stderr=err, text=True)
    _running[name] = _Check(proc, out, err)


def result(name: str, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Check ``name``'s exit status and output, once it has ended (started here if it was not)."""
    start(name, argv)
    check = _running[name]
    try:
        check.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        check.proc.kill()
        check.proc.wait()
        pytest.fail(f"{name} ({' '.join(argv[:4])} ...) ran past {timeout} s")
    check.out.seek(0)
    check.err.seek(0)
    return subprocess.CompletedProcess(argv, check.proc.returncode, check.out.read(), check.err.read())


def pids() -> set[int]:
    """The checks' processes (not work of the engine or of a Ray cluster)."""
    return {check.proc.pid for check in _running.values()}


def start_for(items: list[pytest.Item]) -> None:
    """At the end of collection: start the checks of the collected tests marked ``background``, whose modules
    list them in ``BACKGROUND`` (name: argv). Niced only when other tests run beside them."""
    modules = {item.module for item in items if item.get_closest_marker("background")}
    others = any(item.module not in modules for item in items)
    for module in modules:
        for name, argv in module.BACKGROUND.items():
            start(name, argv, nice=others)


def stop_all() -> None:
    for check in _running.values():
        if check.proc.poll() is None:
            check.proc.kill()
            check.proc.wait()
