"""The zygote: a process that imports torch once and forks ready workers.

Forking a worker from here costs milliseconds instead of the seconds a fresh
interpreter needs to import torch, and the workers share torch's pages
copy-on-write.  The zygote stays single-threaded so that forking it is safe.

It watches its link to the driver: when the driver dies (even by SIGKILL) the
link closes, the zygote kills every worker it forked and exits.  Workers also
carry PR_SET_PDEATHSIG, so a killed zygote takes them with it.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import json
import os
import selectors
import signal
import socket
import sys
from multiprocessing.connection import Client, Connection

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:  # not Linux: the link-EOF watch still catches driver death
        pass


def _child(spec: dict, zygote_conn: Connection) -> None:
    """Become a worker. Never returns."""
    code = 1
    try:
        _die_with_parent()
        zygote_conn.close()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(spec["env"])
        sys.path[:] = spec["sys_path"]
        try:
            os.chdir(spec["cwd"])
        except OSError:
            pass
        _attach_logs(spec["log_address"], spec["worker_id"])
        threads = os.environ.get("OMP_NUM_THREADS")
        if threads and threads.isdigit() and "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(int(threads))
        from muster.core.local.worker import serve

        conn = Client(spec["address"], family="AF_UNIX", authkey=spec["authkey"])
        from muster.core.local import wire

        wire.send(conn, ("hello", spec["worker_id"], os.getpid(), spec["node_id"]))
        serve(conn, spec["label"], spec["node_id"])
    except BaseException:  # noqa: BLE001
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def _attach_logs(address: str, worker_id: int) -> None:
    """Point fds 1 and 2 at the driver's log socket: output survives a SIGKILL."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(address)
    sock.sendall(f"{worker_id}\n".encode())
    for fd in (1, 2):
        os.dup2(sock.fileno(), fd)
    sock.close()
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)


def main() -> None:
    config = json.loads(os.environ.pop("MUSTER_ZYGOTE", "{}"))
    sys.path[:] = config.get("sys_path", sys.path)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the driver
    for name in config.get("preload", []):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module that fails here fails later, in context
            pass
    from muster.core.local import wire

    # Everything imported so far is shared with the workers copy-on-write; keep
    # Python's collector from touching (and so copying) those objects in them.
    gc.freeze()
    try:
        conn = Client(config["address"], family="AF_UNIX", authkey=bytes.fromhex(config["authkey"]))
    except OSError:  # the driver is already gone: nothing to serve
        os._exit(0)
    wire.send(conn, ("ready", os.getpid()))
    children: set[int] = set()
    rfd, wfd = os.pipe()
    os.set_blocking(wfd, False)
    signal.set_wakeup_fd(wfd)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sel = selectors.DefaultSelector()
    sel.register(conn.fileno(), selectors.EVENT_READ, "driver")
    sel.register(rfd, selectors.EVENT_READ, "sigchld")
    try:
        while True:
            for key, _ in sel.select():
                if key.data == "sigchld":
                    os.read(rfd, 4096)
                    _reap(children, conn)
                    continue
                try:
                    msg = wire.recv(conn)
                except (EOFError, OSError):
                    return
                if msg[0] == "quit":
                    return
                if msg[0] == "fork":
                    spec = msg[2]
                    pid = os.fork()
                    if pid == 0:
                        sel.close()
                        signal.set_wakeup_fd(-1)
                        os.close(rfd)
                        os.close(wfd)
                        _child(spec, conn)
                    children.add(pid)
                    wire.send(conn, ("forked", msg[1], pid))
            _reap(children, conn)
    finally:
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os._exit(0)


def _reap(children: set[int], conn: Connection) -> None:
    from muster.core.local import wire

    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        try:
            wire.send(conn, ("exited", pid, code))
        except OSError:
            return


if __name__ == "__main__":
    main()
