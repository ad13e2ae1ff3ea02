"""The driver's side of the zygote process: start it (a fork of the driver, or a fresh
interpreter), hold a handle on it, and kill its process group; and start a worker
as a fresh interpreter of its own, without the zygote.

The zygote's own loop is in :mod:`muster.core.local.zygote`; the engine decides
which start applies (``zygote.fork_blocker``) and talks to the running zygote.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection

from muster.core.local import zygote

#: What a fresh zygote or worker runs, ``python -m MODULE [--worker]`` (its ``__main__``).
MODULE = "muster.core.local"


class ForkedZygote:
    """The zygote when it was forked from the driver: the few ``Popen`` members the engine uses."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere (a SIGCHLD handler of the user's)
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"zygote {self.pid}", timeout or 0.0)
            time.sleep(0.01)
        assert self.returncode is not None
        return self.returncode


def fork(preload: list[str], driver_dir: str) -> tuple[ForkedZygote, Connection]:
    """Fork the zygote from this process, which already holds torch (when it has imported it);
    returns its handle and the driver's end of their socket.  ``driver_dir`` is the engine's
    folder of sockets, which the zygote removes if the driver dies without saying goodbye."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    for stream in (sys.stdout, sys.stderr):  # or the child would write our buffered output again
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed or odd stream: nothing to flush
            pass
    # A Ctrl-C between fork() and the child's setsid() must not reach the child: hold SIGINT
    # blocked across the fork (the child ignores it before unblocking; we get ours after).
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    pid = -1
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child never returns
            ours.close()
            zygote.run_forked(theirs.detach(), preload, blocked, driver_dir)
    finally:
        if pid != 0:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    theirs.close()
    return ForkedZygote(pid), Connection(ours.detach())


def spawn(address: str, authkey: bytes, preload: list[str]) -> subprocess.Popen:
    """Start the zygote as a fresh interpreter that connects back to ``address`` (a socket in the
    engine's folder, which the zygote removes if the driver dies without saying goodbye)."""
    config = {
        "address": address,
        "authkey": authkey.hex(),
        "sys_path": [p for p in sys.path if p],
        "preload": preload,
    }
    return subprocess.Popen(
        [sys.executable, "-m", MODULE],
        env=finds_muster(dict(os.environ, MUSTER_ZYGOTE=json.dumps(config))),
        cwd=os.getcwd(),
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # Ctrl-C in the terminal reaches the driver only
    )


def spawn_worker(spec: dict) -> subprocess.Popen:
    """Start one worker as a fresh interpreter (no zygote, none of the driver's state); it connects
    back as a forked one does.  ``spec`` is the fork request's: its ``env`` and ``cwd`` go to ``Popen``."""
    spec = dict(spec)
    env, cwd = spec.pop("env"), spec.pop("cwd")
    spec.pop("preload", None)
    spec["authkey"] = spec["authkey"].hex()
    return subprocess.Popen(
        [sys.executable, "-m", MODULE, "--worker"],
        env=finds_muster(dict(env, **{zygote.WORKER_SPEC_ENV: json.dumps(spec)})),
        cwd=cwd if os.path.isdir(cwd) else None,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # Ctrl-C in the terminal reaches the driver only, as with forked workers
    )


def finds_muster(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a fresh interpreter that must import muster before it can read the driver's
    ``sys.path``: when this process found muster in a folder put on ``sys.path`` by hand (a
    checkout, not an install), that folder goes first on the child's PYTHONPATH."""
    import sysconfig

    import muster

    root = os.path.dirname(os.path.dirname(os.path.abspath(muster.__file__)))
    if root not in [os.path.abspath(p or ".") for p in sys.path]:
        return env  # found through an installed package's finder: any interpreter here finds it
    site_dirs = {os.path.abspath(p) for p in sysconfig.get_paths().values()}
    pythonpath = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root in site_dirs or root in [os.path.abspath(p) for p in pythonpath]:
        return env
    return dict(env, PYTHONPATH=os.pathsep.join([root, *pythonpath]))


def kill_group(pid: int) -> None:
    """SIGKILL the zygote's process group (it leads its own session), or it alone if it has none yet."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
