"""The order an actor's calls go out in: per submitter, each call once its ObjectRef arguments are ready.

As in Ray, the calls one submitter (the driver, or one worker process) makes on an actor run in the order it
made them, and a call whose arguments are not ready yet holds back the later calls of its submitter only:
the calls of other submitters go ahead. (Holding every later call, as one queue would, deadlocks a call whose
argument is a task that itself calls the actor and waits for the answer.)

:class:`ArgumentWait` holds, for one actor (:class:`muster.tasks.actor._Actor`), the calls whose top-level
ObjectRef arguments are not ready, and behind each one the later calls of its submitter; it hands a call to
``send`` (the actor's queue of calls to send) once the call's arguments are ready or the call was cancelled,
and only after the calls its submitter made before it, unless the actor runs calls out of order
(:func:`in_order`). Thread-safe.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable, Hashable

from muster.exceptions import InvalidArgumentError
from muster.tasks.actor_retry import Call
from muster.tasks.worker_side import is_async_class


def in_order(cls: type, options: dict[str, Any]) -> bool:
    """Whether an actor of ``cls`` made with ``options`` runs each submitter's calls in the order made, as Ray
    decides: not with ``allow_out_of_order_execution=True``, which is the default for an async actor and a
    threaded one (``max_concurrency > 1``), where False is refused (their calls overlap: no order to keep).

    Raises:
        InvalidArgumentError: ``allow_out_of_order_execution`` not a bool, or False on an async or threaded actor.
    """
    allowed = options.get("allow_out_of_order_execution")
    concurrent = is_async_class(cls) or (options.get("max_concurrency") or 1) > 1
    if allowed not in (None, True, False) or (allowed is False and concurrent):
        raise InvalidArgumentError(
            f"{cls.__name__}.options(allow_out_of_order_execution={allowed!r}): " + (
                "an async or threaded (max_concurrency > 1) actor's calls overlap, so they cannot run in the order "
                "made (as in Ray); leave the option out" if allowed is False else "use True or False"))
    return not (concurrent if allowed is None else allowed)


class ArgumentWait:
    """One actor's calls held for their arguments, per submitter (see the module's docstring); with
    ``in_order`` False each call waits for its own arguments only."""

    def __init__(self, send: Callable[[Call], None], in_order: bool = True):
        self._send = send
        self._in_order = in_order
        self._lock = threading.Lock()  # send is called under it: a submitter's calls reach it in their order
        self._held: dict[Hashable, deque[tuple[Call, list[Future]]]] = {}

    def submit(self, submitter: Hashable, call: Call, arguments: list[Future]) -> None:
        """Hand ``call`` to ``send`` now, or once ``arguments`` (its ObjectRefs' futures) are ready and its
        submitter's earlier calls went; ``call[-1]`` is its answer (done: cancelled, it is not held longer)."""
        if not self._in_order:
            submitter = ("call", call[0])  # its own: it waits behind no other call
        with self._lock:
            held = self._held.get(submitter)
            if held is None and all(f.done() for f in arguments):
                self._send(call)
                return
            if held is None:
                held = self._held[submitter] = deque()
            held.append((call, arguments))
        for f in (*arguments, call[-1]):
            f.add_done_callback(lambda _: self._release(submitter))

    def _release(self, submitter: Hashable) -> None:
        with self._lock:
            held = self._held.get(submitter)
            while held and _ready(*held[0]):
                self._send(held.popleft()[0])
            if held is not None and not held:
                del self._held[submitter]


def _ready(call: Call, arguments: list[Future]) -> bool:
    out: Any = call[-1]
    return bool(out.done()) or all(f.done() for f in arguments)
