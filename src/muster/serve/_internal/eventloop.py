"""One asyncio loop per process, on its own thread, for everything Serve does there.

The ingress, replicas and handles all run their sockets on it; code on other
threads reaches it with :func:`submit`.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import threading
from typing import Any, Coroutine

_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()
_inherited: list[asyncio.AbstractEventLoop] = []  # a forked child's copy of its parent's loop


def _forget_loop_in_child() -> None:
    """A forked child has the parent's loop object but not the thread that ran it (and, in a
    worker, not its file descriptors either): using it would hang or, on uvloop, abort. The
    child starts a loop of its own on first use."""
    global _loop, _lock
    if _loop is not None:
        _inherited.append(_loop)  # kept, not collected: its teardown would act on the parent's descriptors
    _loop = None
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_loop_in_child)


def _new_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind == "uvloop":
        try:
            import uvloop

            return uvloop.new_event_loop()
        except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard]
            pass
    return asyncio.new_event_loop()


def get_loop(kind: str = "uvloop") -> asyncio.AbstractEventLoop:
    """The process's Serve loop, started on first use: ``kind`` "uvloop" (when installed) or
    "asyncio" (the standard library's own), which only the first call chooses."""
    global _loop
    loop = _loop
    if loop is not None and not loop.is_closed():
        return loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = _new_loop(kind)
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            thread = threading.Thread(target=run, name="muster-serve-loop", daemon=True)
            thread.start()
            ready.wait(10)
            _loop = loop
            atexit.register(_stop_at_exit, loop, thread, os.getpid())
        return _loop


def _stop_at_exit(loop: asyncio.AbstractEventLoop, thread: threading.Thread, pid: int) -> None:
    """Stop and close the loop before the interpreter finalizes: a uvloop left running on its daemon thread
    crashed the exiting driver (SIGSEGV in the last garbage collection, about 1 exit in 20 under load)."""
    if pid != os.getpid() or loop.is_closed():  # a forked child's copy is its parent's (see above)
        return
    if threading.current_thread() is thread:  # exit_actor() from a handler on the loop: it cannot join itself
        loop.stop()
        return
    try:
        asyncio.run_coroutine_threadsafe(_cancel_all_then_stop(), loop)
    except RuntimeError:  # closed meanwhile
        return
    thread.join(5)
    if not thread.is_alive():
        loop.close()


async def _cancel_all_then_stop() -> None:
    """Cancel the loop's other tasks and let them unwind (collected pending, each would log "Task was destroyed
    but it is pending!" as the driver exits); then stop the loop."""
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me]
    for t in tasks:
        t.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=2)
    asyncio.get_running_loop().stop()


def on_loop() -> bool:
    """True when the caller runs on the Serve loop's thread."""
    try:
        return asyncio.get_running_loop() is _loop
    except RuntimeError:
        return False


def submit(coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future:
    """Schedule ``coro`` on the Serve loop from any thread."""
    return asyncio.run_coroutine_threadsafe(coro, get_loop())


def run_sync(coro: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any:
    """Run ``coro`` on the Serve loop and wait for its result (not from the loop itself)."""
    if on_loop():
        coro.close()
        raise RuntimeError(
            "a blocking Serve call (.result(), serve.run from a replica, ...) was made on the Serve event "
            "loop, where it would wait on itself forever; use `await` instead."
        )
    return submit(coro).result(timeout)
