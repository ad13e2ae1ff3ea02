"""Helpers shared by test modules of every folder (driver side only; never shipped to workers).

``tests/`` is on ``sys.path`` while the suite runs (it holds the root conftest), so any
test module can ``from _shared import free_port, wait_for``.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Callable

import psutil

from muster.core.local import zygote_process


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (never a fixed port in a test)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def running(process: psutil.Process) -> bool:
    """Whether ``process`` still runs; one that exits between psutil's two reads is gone (a CI run's teardown
    raised NoSuchProcess from ``status()`` right after ``is_running()`` said yes)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def engine_workers() -> list[psutil.Process]:
    """The embedded engine's worker processes: the children of its zygote (this process's child,
    forked and named muster-zygote or a fresh interpreter running the module), and the workers
    it started as fresh interpreters of their own (``python -m muster.core.local --worker``: the
    Serve ingress).  Other children, such as a browser's driver or Ray's processes, are not workers."""
    out = []
    for child in psutil.Process().children():
        try:
            cmdline = child.cmdline()
            if zygote_process.MODULE in cmdline and "--worker" in cmdline:
                out.append(child)
            elif child.name() == "muster-zygote" or zygote_process.MODULE in cmdline:
                out.extend(child.children(recursive=True))
        except psutil.NoSuchProcess:
            pass
    return out


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0, interval: float = 0.02) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` seconds pass; its last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def output_with(capture, *needles: str, timeout: float = 15.0):
    """Wait (bounded) until every one of ``needles`` is in the output captured by ``capture`` (pytest's ``capfd``
    or ``capsys``), then take it all in one ``readouterr()`` and return that (``.out``, ``.err``).

    Polling ``readouterr()`` instead loses lines written by another thread, such as the runtime's log relay:
    pytest reads the capture, then empties it, and a line written in between is gone. Here the wait only looks
    (``capfd``: the file behind fds 1 and 2, read from its start; ``capsys``: the in-memory streams), and the
    one read comes after the needles are in: nothing written before them can be lost."""

    def look() -> str:
        if hasattr(sys.stdout, "getvalue"):  # capsys: sys.stdout and sys.stderr are pytest's buffers
            return sys.stdout.getvalue() + sys.stderr.getvalue()  # type: ignore[attr-defined]
        return "".join(os.pread(fd, os.fstat(fd).st_size, 0).decode("utf-8", "replace") for fd in (1, 2))

    if not wait_for(lambda: all(n in look() for n in needles), timeout):
        text = look()
        missing = [n for n in needles if n not in text]
        raise AssertionError(f"after {timeout} s the captured output lacks {missing!r}; its end:\n{text[-3000:]}")
    return capture.readouterr()


class Dashboard:
    """``muster dashboard`` in its own process, on a free port."""

    def __init__(self, storage: str, *args: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "muster.cli", "dashboard", "--storage-path", storage, "--port", "0", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        lines: queue.Queue[str] = queue.Queue()
        stdout, stderr = self.proc.stdout, self.proc.stderr
        assert stdout is not None and stderr is not None

        def pump() -> None:
            for line in stdout:
                lines.put(line)

        threading.Thread(target=pump, daemon=True).start()
        try:
            first = lines.get(timeout=60)
        except queue.Empty:
            self.stop()
            raise AssertionError(f"the dashboard printed nothing: {stderr.read()}")
        assert first.startswith("muster dashboard: http://"), first
        self.url = first.split(": ", 1)[1].strip()
        self.base = self.url.split("?", 1)[0]
        self.token = self.url.split("?token=", 1)[1] if "?token=" in self.url else None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def check_in_fork(check: Callable[[], bool], timeout: float = 30.0) -> str:
    """Run ``check`` in a child forked from this process (threads and all, as a user's fork would
    be) and say how it went: "passed", "failed", "raised" or "hung" (killed after ``timeout``)."""
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            code = 0 if check() else 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "hung"
        time.sleep(0.02)
    return {0: "passed", 1: "failed"}.get(os.waitstatus_to_exitcode(done[1]), "raised")


def without_aws_credentials(monkeypatch, folder) -> None:
    """Leave this process, and the workers it starts, no AWS credentials to find: no keys or profile in the
    environment, no credentials or config file, no instance role to ask (and fsspec's cached S3 clients gone)."""
    import s3fs

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.path.join(folder, "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", os.path.join(folder, "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    s3fs.S3FileSystem.clear_instance_cache()


def raise_naming(make: Callable[[], object], expected: type[BaseException], shown: list[str]) -> BaseException:
    """Call ``make``; it must raise ``expected`` with every text of ``shown`` in its message. Returns the error."""
    try:
        make()
    except expected as error:
        missing = [text for text in shown if text not in str(error)]
        assert not missing, f"{missing} not in the message: {error}"
        return error
    raise AssertionError(f"no {expected.__name__} raised")
