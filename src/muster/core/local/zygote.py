"""The zygote: a process that imports torch once and forks ready workers.

Forking a worker from here costs milliseconds instead of the seconds a fresh
interpreter needs to import torch, and the workers share torch's pages
copy-on-write.  The zygote stays single-threaded so that forking it is safe.

It starts one of two ways.  When the driver is safe to fork (no other Python
thread, neither CUDA nor NVML started: see :func:`fork_blocker`), the engine forks it
from the driver itself (:func:`run_forked`), so it holds the driver's torch
at once and only imports what the driver has not.  Otherwise it is a fresh
``python -m muster.core.local`` (:func:`main`) that imports torch itself.

A worker that must not inherit the driver's state (the Serve ingress, whose
native event loops have crashed in a fork of a busy driver) skips the zygote:
``python -m muster.core.local --worker`` (:func:`worker_main`) becomes
that one worker in a fresh interpreter.

It watches its link to the driver: when the driver dies (even by SIGKILL) the
link closes, the zygote kills every worker it forked and exits.  Workers also
carry PR_SET_PDEATHSIG, so a killed zygote takes them with it.
"""

from __future__ import annotations

import atexit
import ctypes
import faulthandler
import gc
import importlib
import json
import os
import selectors
import shutil
import signal
import socket
import sys
from multiprocessing.connection import Client, Connection
from typing import Iterable

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
#: The forked zygote's process name (``/proc/<pid>/comm``): its command line is the driver's.
FORKED_NAME = "muster-zygote"
_driver_name: bytes | None = None  # the forked zygote's name before it renamed itself


def fork_blocker() -> str | None:
    """Why this process must not be forked into the zygote now, or ``None`` when it may be.

    Forking copies only the calling thread: another Python thread could hold a
    lock (logging, an import, a queue) that the child would then wait on
    forever, and CUDA does not survive a fork.  Native thread pools that
    libraries start at import (OpenBLAS, OpenMP) shut down or rebuild
    themselves around ``fork()``, as PyTorch's DataLoader workers rely on.
    """
    from muster.core import settings

    if not settings.zygote_fork_enabled():
        return "MUSTER_ZYGOTE_FORK=0"
    if not hasattr(os, "fork") or not sys.platform.startswith("linux"):
        return f"fork() of the driver is supported on Linux only (this is {sys.platform})"
    import threading

    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if others:
        return f"the driver runs {len(others)} other Python thread(s): {', '.join(sorted(others)[:4])}"
    if threading.current_thread() is not threading.main_thread():
        return "the engine is starting from a thread other than the main thread"
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and getattr(cuda, "is_initialized", lambda: False)():
        return "CUDA is initialised in the driver (it does not survive fork())"
    if cuda_driver_started():
        # torch.cuda.is_available() starts the CUDA driver without initialising torch.cuda; a child
        # forked after it cannot use the GPU (seen on an H200).
        return "the CUDA driver was started in the driver (by torch.cuda.is_available() or another CUDA call)"
    if nvml_started():
        # torch.cuda.device_count() starts NVML and leaves it running. Seen on an H200: workers forked
        # (through the zygote) from such a driver counted 0 GPUs while is_available() was True.
        return "NVML was started in the driver (by torch.cuda.device_count() or nvidia-ml-py)"
    return None


def _loaded(name: str) -> str | None:
    """The path of the shared library ``name`` (e.g. ``/libcuda.so``) if this process has it mapped."""
    try:
        with open("/proc/self/maps") as f:
            return next((line.split(None, 5)[-1].strip() for line in f if name in line), None)
    except OSError:
        return None


def _answers(path: str, call: str, not_started: int) -> bool:
    """Whether the already-mapped library at ``path`` answers a device count with anything but
    its "not initialised" code, i.e. whether it was started.  Loads and starts nothing."""
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        count = ctypes.c_uint(0)
        return bool(getattr(lib, call)(ctypes.byref(count)) != not_started)
    except (OSError, AttributeError):
        return True  # a library that cannot be asked: a fresh launcher is safe either way


def cuda_driver_started() -> bool:
    """Whether this process has started NVIDIA's CUDA driver (``cuInit``), which a forked child cannot use.

    Importing torch may map ``libcuda`` without starting it (torch 2.11 with CUDA 13 does), and a
    child forked then uses the GPU; the first CUDA runtime call starts it.  Before ``cuInit`` the
    library answers every call with CUDA_ERROR_NOT_INITIALIZED (3).
    """
    path = _loaded("/libcuda.so")
    return path is not None and _answers(path, "cuDeviceGetCount", 3)


def nvml_started() -> bool:
    """Whether this process has started NVML (``nvmlInit``, which ``torch.cuda.device_count()`` calls
    and never shuts down).  Before that NVML answers NVML_ERROR_UNINITIALIZED (1)."""
    path = _loaded("/libnvidia-ml.so")
    return path is not None and _answers(path, "nvmlDeviceGetCount_v2", 1)


def _set_name(name: bytes) -> bytes | None:
    """Set this process's name (``/proc/<pid>/comm``); return the old one."""
    try:
        with open("/proc/self/comm", "rb") as f:
            old = f.read().strip()
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name[:15]), 0, 0, 0)
        return old
    except OSError:
        return None


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:  # not Linux: the link-EOF watch still catches driver death
        pass


def _child(spec: dict, zygote_conn: Connection) -> None:
    """Become a worker (in a child the zygote just forked). Never returns."""
    code = 1
    try:
        _die_with_parent()
        zygote_conn.close()
        atexit._clear()  # the driver's exit handlers (a forked zygote inherits them) are not this worker's
        if _driver_name is not None:
            _set_name(_driver_name)  # a worker of a forked zygote keeps the driver's name, as before
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
        _run_worker(spec)
    except BaseException:  # noqa: BLE001
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


#: The environment variable that carries a fresh worker's spec (see :func:`worker_main`).
WORKER_SPEC_ENV = "MUSTER_WORKER"


def worker_main() -> None:
    """Entry point of ``python -m muster.core.local --worker``: one worker, in a fresh interpreter.

    Its environment and working directory come from the engine's ``Popen``;
    the rest of its spec (JSON, the authkey in hex) from ``$MUSTER_WORKER``.
    """
    code = 1
    try:
        spec = json.loads(os.environ.pop(WORKER_SPEC_ENV))
        spec["authkey"] = bytes.fromhex(spec["authkey"])
        sys.path[:] = spec["sys_path"]
        _run_worker(spec)
    except BaseException:  # noqa: BLE001
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


#: The signal on which a worker prints every thread's Python stack into its output (and goes on).
STACKS_SIGNAL = signal.SIGUSR2


def _run_worker(spec: dict) -> None:
    """Connect to the driver and serve its calls (both starts end here). Never returns."""
    _attach_logs(spec["log_address"], spec["worker_id"])
    # A native crash (SIGSEGV, SIGBUS, SIGABRT...) prints every thread's Python stack into the
    # worker's log before the process dies, so the driver says where, not only "killed by SIGSEGV".
    faulthandler.enable(file=sys.stderr, all_threads=True)
    # ... and STACKS_SIGNAL prints them and goes on: how the driver shows where a quiet gang waits.
    faulthandler.register(STACKS_SIGNAL, file=sys.stderr, all_threads=True)
    threads = os.environ.get("OMP_NUM_THREADS")
    if threads and threads.isdigit() and int(threads) > 0 and "torch" in sys.modules:
        # torch was imported here under the zygote's environment: give it the count a fresh
        # `import torch` takes from this worker's OMP_NUM_THREADS (capped at the machine's cores).
        sys.modules["torch"].set_num_threads(min(int(threads), os.cpu_count() or int(threads)))
    from muster.core.local import wire
    from muster.core.local.worker import serve

    conn = Client(spec["address"], family="AF_UNIX", authkey=spec["authkey"])
    wire.send(conn, ("hello", spec["worker_id"], os.getpid(), spec["node_id"]))
    serve(conn, spec["label"], spec["node_id"])


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
    from muster.core.local import logs

    logs.mark_attached()


def main() -> None:
    """Entry point of ``python -m muster.core.local`` (the fresh-interpreter start)."""
    config = json.loads(os.environ.pop("MUSTER_ZYGOTE", "{}"))
    sys.path[:] = config.get("sys_path", sys.path)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the driver
    _preload(config.get("preload", []))
    try:
        conn = Client(config["address"], family="AF_UNIX", authkey=bytes.fromhex(config["authkey"]))
    except OSError:  # the driver is already gone: nothing to serve, only its folder to remove
        shutil.rmtree(os.path.dirname(config["address"]), ignore_errors=True)
        os._exit(0)
    _serve(conn, os.path.dirname(config["address"]))


def run_forked(link_fd: int, preload: list[str], sigmask: "set[int | signal.Signals]", driver_dir: str) -> None:
    """Become the zygote in a child just forked from the driver. Never returns.

    ``link_fd`` is this end of a socket pair whose other end the driver keeps;
    SIGINT arrives blocked, and ``sigmask`` is the mask to restore once it is ignored.
    ``driver_dir`` is the engine's folder of sockets (see :func:`_serve`).
    """
    global _driver_name
    try:
        os.setsid()  # Ctrl-C in the terminal reaches the driver only
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_SETMASK, sigmask)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        # Keep only stdio and the link: the driver's files, sockets and pipes must not stay open
        # here (a pipe's reader would never see EOF), just as a fresh interpreter would not hold them.
        os.closerange(3, link_fd)
        os.closerange(link_fd + 1, _max_fd())
        _driver_name = _set_name(FORKED_NAME.encode())
        torch = sys.modules.get("torch")
        if torch is not None:  # a fresh seed, as a new interpreter's torch draws: not the driver's stream
            torch.random.default_generator.seed()
        _preload(preload)
        _serve(Connection(link_fd), driver_dir)
    except BaseException:  # noqa: BLE001
        import traceback

        traceback.print_exc()
    finally:
        os._exit(1)


def _max_fd() -> int:
    try:
        return max(int(fd) for fd in os.listdir("/proc/self/fd")) + 1
    except (OSError, ValueError):
        return os.sysconf("SC_OPEN_MAX")


def _preload(names: list[str]) -> None:
    # No full collection while importing: an import makes objects by the hundred thousand
    # (torch._dynamo ~120k), none of them garbage, and every full collection their count sets off
    # walks them all again (0.1 s of torch._dynamo's ~0.85 s, on the launch's critical path).
    # Young collections go on, so the import's short-lived cycles are freed as it runs: with the
    # collector off altogether they pile up and leave ~5 MiB more heap here and in every worker.
    young, middle, full = gc.get_threshold()
    gc.set_threshold(young, middle, 1 << 30)
    try:
        for name in names:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - a module that fails here fails later, in context
                pass
    finally:
        gc.set_threshold(young, middle, full)
        # Everything imported so far is shared with the workers copy-on-write; keep
        # Python's collector from touching (and so copying) those objects in them.
        gc.freeze()


_MADV_DONTNEED = 4
_TRIM_AFTER_IDLE_S = 3.0


def _drop_file_pages() -> None:
    """Drop this process's page-table entries for read-only, file-backed mappings (shared libraries).

    An idle zygote needs none of them, and the pages stay in the page cache (a
    later touch maps them back); this only takes them off its resident set, so
    the zygote's RSS is what it holds of its own.
    """
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        with open("/proc/self/smaps") as f:
            for lo, hi in droppable_mappings(f):
                libc.madvise(lo, hi - lo, _MADV_DONTNEED)
    except (OSError, ValueError):  # not Linux, or an unexpected smaps: keep the pages
        pass


def droppable_mappings(smaps: Iterable[str]) -> list[tuple[int, int]]:
    """The address ranges in ``smaps`` (``/proc/<pid>/smaps`` lines) whose pages can be dropped and
    read back from their file unchanged: read-only private file mappings with no page of their own.

    A page of its own is an anonymous copy (relocated read-only data, written before it was made
    read-only), resident ("Anonymous") or swapped out ("Swap"): dropping it would bring back the
    file's original bytes in its place.  A mapping whose smaps lacks either count is kept.
    """
    out: list[tuple[int, int]] = []
    span: tuple[int, int] | None = None
    counts: dict[str, str] = {}

    def close() -> None:
        if span is not None and counts.get("Anonymous:") == "0" and counts.get("Swap:") == "0":
            out.append(span)

    for line in smaps:
        parts = line.split()
        if len(parts) >= 5 and "-" in parts[0] and ":" in parts[3]:  # a mapping's header line
            close()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            file_backed = len(parts) > 5 and parts[5].startswith("/")
            span = (lo, hi) if file_backed and parts[1] in ("r--p", "r-xp") else None
            counts = {}
        elif len(parts) > 1 and parts[0] in ("Anonymous:", "Swap:"):
            counts[parts[0]] = parts[1]
    close()
    return out


def _serve(conn: Connection, driver_dir: str) -> None:
    """Fork a worker per request until the driver's link closes; then kill them all. Never returns.

    A driver that shuts down says "quit" and removes its own folder of sockets (``driver_dir``);
    one killed outright cannot, so when the link just closes the zygote removes it instead.
    """
    import time

    from muster.core.local import wire

    wire.send(conn, ("ready", os.getpid()))
    trim_at: float | None = time.monotonic() + _TRIM_AFTER_IDLE_S
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
            timeout = None if trim_at is None else max(0.0, trim_at - time.monotonic())
            events = sel.select(timeout)
            if not events and trim_at is not None:
                _drop_file_pages()  # idle a while after importing or forking: shed library pages
                trim_at = None
            for key, _ in events:
                if key.data == "sigchld":
                    os.read(rfd, 4096)
                    _reap(children, conn)
                    continue
                try:
                    msg = wire.recv(conn)
                except (EOFError, OSError):
                    shutil.rmtree(driver_dir, ignore_errors=True)
                    return
                if msg[0] == "quit":
                    return
                if msg[0] == "preload":  # a trainer's workers will need these: import them while idle
                    _preload(msg[1])
                    trim_at = time.monotonic() + _TRIM_AFTER_IDLE_S
                if msg[0] == "fork":
                    spec = msg[2]
                    _preload(spec.get("preload", []))  # what the driver needs now (no-op once imported)
                    trim_at = time.monotonic() + _TRIM_AFTER_IDLE_S
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

