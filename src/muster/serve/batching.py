"""``@serve.batch``: callers pass one item each; the method runs on a list of them.

Calls that arrive within ``batch_wait_timeout_s`` of the first (up to
``max_batch_size``) run together as one call with a list, and each caller
gets its own element of the returned list.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import weakref
from typing import Any, Callable

from muster.exceptions import InvalidArgumentError, InvalidTypeError


class _Batcher:
    def __init__(self, fn: Callable, max_batch_size: int, wait_s: float, max_concurrent: int):
        self.fn, self.max_batch_size, self.wait_s = fn, max_batch_size, wait_s
        self.queue: asyncio.Queue | None = None
        self.sem = asyncio.Semaphore(max_concurrent)
        self.task: asyncio.Task | None = None

    async def submit(self, owner: Any, item: Any) -> Any:
        if self.queue is None:
            self.queue = asyncio.Queue()
            self.task = asyncio.ensure_future(self._run(owner))
        fut = asyncio.get_running_loop().create_future()
        await self.queue.put((item, fut))
        return await fut

    async def _run(self, owner: Any) -> None:
        assert self.queue is not None
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self.queue.get()]
            deadline = loop.time() + self.wait_s
            while len(batch) < self.max_batch_size:
                remaining = deadline - loop.time()
                if remaining <= 0 and self.queue.empty():
                    break
                try:
                    batch.append(await asyncio.wait_for(self.queue.get(), max(remaining, 0)))
                except asyncio.TimeoutError:
                    break
            await self.sem.acquire()
            asyncio.ensure_future(self._call(owner, batch))

    async def _call(self, owner: Any, batch: list) -> None:
        items = [i for i, _ in batch]
        try:
            args = (owner, items) if owner is not None else (items,)
            results = await self.fn(*args)
            if not isinstance(results, (list, tuple)) or len(results) != len(items):
                got = f"{type(results).__name__} of length {len(results)}" if isinstance(results, (list, tuple)) \
                    else type(results).__name__
                raise InvalidTypeError(
                    f"@serve.batch method {self.fn.__qualname__} got {len(items)} inputs and returned {got}; "
                    "return a list with one result per input, in order."
                )
            for (_, fut), r in zip(batch, results):
                if not fut.done():
                    fut.set_result(r)
        except Exception as exc:  # noqa: BLE001 - every caller of the batch sees it
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc)
        finally:
            self.sem.release()


# Batch queues live here, not in the decorator's closure, so decorated classes still pickle by value.
_by_owner: "weakref.WeakKeyDictionary[Any, dict[int, _Batcher]]" = weakref.WeakKeyDictionary()
_plain: dict[int, _Batcher] = {}


def _batcher(owner: Any, fn: Callable, opts: tuple[int, float, int]) -> _Batcher:
    table = _plain if owner is None else _by_owner.setdefault(owner, {})
    b = table.get(id(fn))
    if b is None:
        b = table[id(fn)] = _Batcher(fn, *opts)
    return b


def batch(
    _fn: Callable | None = None,
    /,
    max_batch_size: int = 10,
    batch_wait_timeout_s: float = 0.01,
    max_concurrent_batches: int = 1,
) -> Any:
    """Batch calls of an async method (or function) that takes a list (Ray Serve's ``@serve.batch``).

    Args:
        max_batch_size: most items in one call.
        batch_wait_timeout_s: how long the first item waits for others.
        max_concurrent_batches: batches that may run at once.

    Raises:
        TypeError: the decorated function is not ``async def``.
        ValueError: a bad size or timeout.
    """
    if not isinstance(max_batch_size, int) or isinstance(max_batch_size, bool) or max_batch_size < 1:
        raise InvalidArgumentError(f"@serve.batch max_batch_size={max_batch_size!r}: use an integer >= 1.")
    if not isinstance(batch_wait_timeout_s, (int, float)) or batch_wait_timeout_s < 0:
        raise InvalidArgumentError(f"@serve.batch batch_wait_timeout_s={batch_wait_timeout_s!r}: use a number >= 0.")

    opts = (max_batch_size, batch_wait_timeout_s, max_concurrent_batches)

    def wrap(fn: Callable) -> Callable:
        if not inspect.iscoroutinefunction(fn):
            raise InvalidTypeError(f"@serve.batch needs an `async def` function; {fn.__qualname__} is not one.")
        is_method = "self" in inspect.signature(fn).parameters

        @functools.wraps(fn)
        async def call(*args: Any) -> Any:
            owner, item = (args[0], args[1]) if is_method else (None, args[0])
            return await _batcher(owner, fn, opts).submit(owner, item)

        setattr(call, "__serve_batch__", True)  # noqa: B010 - a marker the replica looks for
        return call

    if _fn is not None:
        return wrap(_fn)
    return wrap
