"""Ray's calls from muster's threads, and ``ray.shutdown()``: never at once.

Ray ends the whole process (exit status 1, nothing on stderr: "The core worker
has already been shutdown ... The process will exit" goes to its log file)
when a thread touches the core worker after ``ray.shutdown()`` has removed it,
as a ``ray.get`` that was waiting when the shutdown began does when it
returns. The engine's own threads (the event poller, the finisher, mailboxes,
actors' senders) go on calling Ray while a user's thread shuts muster down,
so each of their calls enters this gate, and the shutdown closes it: it waits
for the calls inside to end, and every later call is refused with
:class:`~muster.exceptions.RuntimeNotStartedError`, without touching Ray.

Threads that are not muster's reach the core worker too: any thread that lets go
of an ObjectRef does. :func:`shutdown_ray` hides the core worker from every
thread but its own while Ray shuts down.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

import ray

from muster.exceptions import RuntimeNotStartedError


class RayGate:
    """``with gate:`` around a call into Ray; ``close()`` before ``ray.shutdown()``."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._inside = 0
        self._closed = False

    def __enter__(self) -> None:
        with self._cond:
            if self._closed:
                raise RuntimeNotStartedError("This muster runtime was shut down; call muster.init().")
            self._inside += 1

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        with self._cond:
            self._inside -= 1
            self._cond.notify_all()

    def close(self, timeout_s: float) -> int:
        """Refuse new calls and wait up to ``timeout_s`` for those inside to end; how many are still inside."""
        with self._cond:
            self._closed = True
            self._cond.wait_for(lambda: self._inside == 0, timeout_s)
            return self._inside


class _OwnerOnly:
    """Ray's core worker, seen only from the thread that shuts Ray down (``shutdown_ray``)."""

    def __init__(self, core: Any):
        self._core, self._owner = core, threading.get_ident()

    def __getattr__(self, name: str) -> Any:
        if threading.get_ident() != self._owner:
            raise AttributeError(f"{name}: Ray's core worker is shutting down")
        return getattr(self._core, name)


def shutdown_ray() -> None:
    """``ray.shutdown()``, with Ray's core worker hidden from every other thread meanwhile.

    Ray ends the process (exit 1, its message only in its log) when a thread reaches the core worker while
    ``ray.shutdown()`` takes it down: a thread that lets go of an ObjectRef does (the user's, Ray Data's, or
    one the collector frees then). Hidden, the core worker is as after the shutdown for them: a dropped ref
    is skipped, as Ray skips one then, and a Ray call fails in that thread instead of ending the process."""
    worker = ray._private.worker.global_worker
    core = getattr(worker, "core_worker", None)
    if core is not None:
        worker.core_worker = _OwnerOnly(core)  # type: ignore[attr-defined]
    ray.shutdown()
