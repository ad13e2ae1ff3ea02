"""``muster.util.queue.Queue``: a first-in first-out queue that tasks and actors share (Ray's ``ray.util.queue``).

It lives in an async actor; the ``Queue`` object is a small picklable handle
to it, so pass it to tasks and actors as an argument.
"""

from __future__ import annotations

import asyncio
import queue as _stdlib_queue
from typing import Any

from muster.exceptions import InvalidArgumentError, InvalidTypeError, MusterError
from muster.tasks import get, kill, remote


class Empty(_stdlib_queue.Empty):
    """``get`` found nothing (non-blocking, or past its timeout)."""


class Full(_stdlib_queue.Full):
    """``put`` found no room (non-blocking, or past its timeout)."""


class QueueShutDownError(MusterError, AttributeError):
    """The queue was used after ``shutdown()`` (an ``AttributeError`` too: Ray's queue raises one there)."""


class _QueueActor:
    def __init__(self, maxsize: int):
        self.q: asyncio.Queue = asyncio.Queue(maxsize)

    def qsize(self) -> int:
        return self.q.qsize()

    async def put(self, item: Any, block: bool, timeout: float | None) -> bool:
        try:
            if not block:
                self.q.put_nowait(item)
            else:
                await asyncio.wait_for(self.q.put(item), timeout)
            return True
        except (asyncio.TimeoutError, asyncio.QueueFull):
            return False

    async def get(self, block: bool, timeout: float | None) -> tuple[bool, Any]:
        try:
            if not block:
                return True, self.q.get_nowait()
            return True, await asyncio.wait_for(self.q.get(), timeout)
        except (asyncio.TimeoutError, asyncio.QueueEmpty):
            return False, None

    def put_nowait_batch(self, items: list[Any]) -> bool:
        if self.q.maxsize > 0 and self.q.qsize() + len(items) > self.q.maxsize:
            return False
        for item in items:
            self.q.put_nowait(item)
        return True

    def get_nowait_batch(self, n: int) -> tuple[bool, list[Any]]:
        if n > self.q.qsize():
            return False, []
        return True, [self.q.get_nowait() for _ in range(n)]


class Queue:
    """A FIFO queue shared by the driver, tasks and actors.

    Args:
        maxsize: at most this many items (0, or any negative number: unbounded, as in Ray and ``queue.Queue``).
        actor_options: options of the actor that holds the items (default ``num_cpus=0``).
    """

    def __init__(self, maxsize: int = 0, actor_options: dict[str, Any] | None = None):
        if isinstance(maxsize, bool) or not isinstance(maxsize, int):
            raise InvalidTypeError(f"Queue(maxsize={maxsize!r}): use an integer (0 or less: unbounded).")
        self.maxsize = maxsize
        options = {"num_cpus": 0, **(actor_options or {})}
        self.actor = remote(**options)(_QueueActor).remote(maxsize)

    def __len__(self) -> int:
        return self.size()

    def _live(self, call: str) -> Any:
        """The queue's actor; a clear error once ``shutdown()`` ended it."""
        if self.actor is None:
            raise QueueShutDownError(f"Queue.{call}: this queue was shut down (Queue.shutdown()) and its items are "
                                     "gone; make a new Queue(...) to go on.")
        return self.actor

    def size(self) -> int:
        return int(get(self._live("size()").qsize.remote()))

    def qsize(self) -> int:
        return self.size()

    def empty(self) -> bool:
        return self.size() == 0

    def full(self) -> bool:
        return self.maxsize > 0 and self.size() >= self.maxsize

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        """Add ``item``; wait for room when full (up to ``timeout``), unless ``block=False``.

        Raises:
            Full: no room (at once with ``block=False``, or after ``timeout``).
        """
        if timeout is not None and timeout < 0:
            raise InvalidArgumentError(f"Queue.put(timeout={timeout!r}): use a number >= 0, or None to wait for room.")
        if not get(self._live("put()").put.remote(item, block, timeout)):
            raise Full(f"Queue is full (maxsize={self.maxsize}).")

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """Take the oldest item; wait for one when empty (up to ``timeout``), unless ``block=False``.

        Raises:
            Empty: nothing came (at once with ``block=False``, or after ``timeout``).
        """
        if timeout is not None and timeout < 0:
            raise InvalidArgumentError(f"Queue.get(timeout={timeout!r}): "
                                       "use a number >= 0, or None to wait for an item.")
        ok, item = get(self._live("get()").get.remote(block, timeout))
        if not ok:
            raise Empty("Queue is empty.")
        return item

    async def put_async(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        """:meth:`put` for an event loop: waits without blocking it."""
        import asyncio

        await asyncio.get_running_loop().run_in_executor(None, lambda: self.put(item, block, timeout))

    async def get_async(self, block: bool = True, timeout: float | None = None) -> Any:
        """:meth:`get` for an event loop: waits without blocking it."""
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(None, lambda: self.get(block, timeout))

    def put_nowait(self, item: Any) -> None:
        self.put(item, block=False)

    def get_nowait(self) -> Any:
        return self.get(block=False)

    def put_nowait_batch(self, items: list[Any]) -> None:
        """Add all ``items`` at once, or none (``Full``) if they do not fit."""
        if not hasattr(items, "__iter__"):
            raise InvalidTypeError(f"Queue.put_nowait_batch({items!r}): pass an iterable of the items to add "
                                   f"(a list or tuple), not a single {type(items).__name__}; put_nowait() adds one.")
        batch = list(items)
        if not get(self._live("put_nowait_batch()").put_nowait_batch.remote(batch)):
            raise Full(f"Queue has no room for {len(batch)} more items (maxsize={self.maxsize}).")

    def get_nowait_batch(self, num_items: int) -> list[Any]:
        """Take ``num_items`` at once, or none (``Empty``) if fewer are there."""
        if isinstance(num_items, bool) or not isinstance(num_items, int):
            raise InvalidTypeError(f"Queue.get_nowait_batch(num_items={num_items!r}): pass an int, the number of "
                                   "items to take.")
        if num_items < 0:
            raise InvalidArgumentError(f"Queue.get_nowait_batch(num_items={num_items}): pass a number >= 0 of "
                                       "items to take.")
        ok, items = get(self._live("get_nowait_batch()").get_nowait_batch.remote(num_items))
        if not ok:
            raise Empty(f"Queue holds fewer than {num_items} items.")
        return items

    def shutdown(self, force: bool = False, grace_period_s: int = 5) -> None:
        """End the queue's actor; items still in it are lost."""
        if self.actor is not None:
            kill(self.actor)
            self.actor = None


__all__ = ["Empty", "Full", "Queue"]
