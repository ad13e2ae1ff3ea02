"""An actor ends once no handle to it is left, as in Ray.

Ray counts every reference to an actor, in every process, and ends a non-detached
actor when the count reaches zero and its calls are done. The driver here keeps
an actor's record (:class:`muster.tasks.actor._Actor`) for as long as it runs, and
users hold :class:`~muster.tasks.actor.ActorHandle` s of it, each known to the
record by a weak reference. An actor made with ``Cls.remote()`` in the driver is
*watched*: a reaper thread looks every :data:`EVERY_S` seconds for watched actors
that have no live handle and no pending call, and ends each one on purpose
(``__ray_terminate__``, after the calls before it; its ``__ray_shutdown__`` and
``atexit`` handlers run, as in Ray).

What keeps an actor for good, as muster cannot see the reference go:
- a handle of it was pickled: passed to a task or an actor, put, returned, or
  captured by a function sent elsewhere;
- a worker looked it up by name (``get_actor`` in a task or an actor).

Not watched: ``lifetime="detached"`` actors, and actors that a task or another
actor made, which end with their creator's process instead (``owner.Gang``).

The reaper acts from its own thread, never from a weak reference's callback, so
no muster code runs inside the garbage collector.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from muster.core.api import is_current

EVERY_S = 0.2  # how often the reaper looks (an actor ends at most this long after its last handle)

_watched: list[Any] = []  # the actors (their _Actor records) that end when unreferenced
_lock = threading.Lock()
_reaper: threading.Thread | None = None


def watch(actor: Any) -> None:
    """End ``actor`` (an ``_Actor``) once no handle to it is left and its calls are done."""
    global _reaper
    with _lock:
        _watched.append(actor)
        if _reaper is None:
            _reaper = threading.Thread(target=_reap_forever, name="muster-actor-reaper", daemon=True)
            _reaper.start()


def _reap_forever() -> None:
    while True:
        time.sleep(EVERY_S)
        reap()


def reap() -> int:
    """End the watched actors no handle to is left; how many. (The reaper calls it; so may a test.)"""
    with _lock:
        candidates = list(_watched)
    ended, settled = [], []
    for actor in candidates:
        if actor._dead is not None or actor._borrowed or not is_current(actor._engine):
            settled.append(actor)  # dead, or kept for good: no longer watched
        elif actor._unreferenced():
            ended.append(actor)
    with _lock:
        gone = {id(a) for a in ended + settled}
        _watched[:] = [a for a in _watched if id(a) not in gone]
    for actor in ended:
        try:
            actor._end_unreferenced()
        except Exception:  # noqa: BLE001 - it died meanwhile: nothing left to end
            pass
    return len(ended)
