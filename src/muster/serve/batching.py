"""``@serve.batch``: callers pass one item each; the method runs on a list of them.

Calls that arrive within ``batch_wait_timeout_s`` of the first (up to
``max_batch_size``) run together as one call with a list, and each caller
gets its own element of the returned sequence (a list, tuple, numpy array:
anything with one item per input).  ``set_max_batch_size`` and
``set_batch_wait_timeout_s`` on the decorated method change both for the
batches that follow (a replica is one process, so this is per replica, as in
Ray; call them from ``reconfigure`` to drive them by ``user_config``).

A replica takes at most ``max_ongoing_requests`` (default 5) requests at once,
so a batch holds at most that many: set it to ``max_batch_size`` or more for
full batches, as Ray Serve's docs advise.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import weakref
from dataclasses import dataclass
from typing import Any, Callable

from muster.exceptions import InvalidArgumentError, InvalidTypeError


@dataclass
class _Options:
    """A batched method's settings; the setters change them, the batcher reads them for each batch."""

    max_batch_size: int
    batch_wait_timeout_s: float
    max_concurrent_batches: int


def _check_size(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidArgumentError(f"@serve.batch max_batch_size={value!r}: use an integer >= 1.")
    return value


def _check_wait(value: Any) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
        raise InvalidArgumentError(f"@serve.batch batch_wait_timeout_s={value!r}: use a number >= 0.")
    return float(value)


def _results(fn: Callable, results: Any, n: int) -> list:
    """The batch's results as a list, one per input; a sequence of another length or type is an error."""
    try:
        got = list(results) if not isinstance(results, (str, bytes, dict)) and hasattr(results, "__len__") else None
    except TypeError:  # a 0-d numpy array has __len__ but no length
        got = None
    if got is None or len(got) != n:
        what = f"{type(results).__name__} of length {len(got)}" if got is not None else type(results).__name__
        raise InvalidTypeError(
            f"@serve.batch method {fn.__qualname__} got {n} inputs and returned {what}; "
            "return a sequence (list, tuple, numpy array) with one result per input, in order."
        )
    return got


class _Batcher:
    def __init__(self, fn: Callable, opts: _Options):
        self.fn, self.opts = fn, opts
        self.queue: asyncio.Queue | None = None
        self.sem = asyncio.Semaphore(opts.max_concurrent_batches)
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
            deadline = loop.time() + self.opts.batch_wait_timeout_s
            while len(batch) < self.opts.max_batch_size:
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
            results = _results(self.fn, await self.fn(*args), len(items))
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


def _batcher(owner: Any, fn: Callable, opts: _Options) -> _Batcher:
    table = _plain if owner is None else _by_owner.setdefault(owner, {})
    b = table.get(id(fn))
    if b is None:
        b = table[id(fn)] = _Batcher(fn, opts)
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

    Returns:
        The decorated function; its ``set_max_batch_size(n)`` and ``set_batch_wait_timeout_s(s)`` change
        the settings for the batches that follow in this replica.

    Raises:
        TypeError: the decorated function is not ``async def``.
        ValueError: a bad size or timeout.
    """
    _check_size(max_batch_size)
    _check_wait(batch_wait_timeout_s)

    def wrap(fn: Callable) -> Callable:
        if not inspect.iscoroutinefunction(fn):
            raise InvalidTypeError(f"@serve.batch needs an `async def` function; {fn.__qualname__} is not one.")
        is_method = "self" in inspect.signature(fn).parameters
        opts = _Options(max_batch_size, batch_wait_timeout_s, max_concurrent_batches)

        def set_max_batch_size(value: int) -> None:
            opts.max_batch_size = _check_size(value)

        def set_batch_wait_timeout_s(value: float) -> None:
            opts.batch_wait_timeout_s = _check_wait(value)

        @functools.wraps(fn)
        async def call(*args: Any) -> Any:
            owner, item = (args[0], args[1]) if is_method else (None, args[0])
            return await _batcher(owner, fn, opts).submit(owner, item)

        setattr(call, "__serve_batch__", True)  # noqa: B010 - a marker the replica looks for
        setattr(call, "set_max_batch_size", set_max_batch_size)  # noqa: B010 - Ray's names, on the method
        setattr(call, "set_batch_wait_timeout_s", set_batch_wait_timeout_s)  # noqa: B010
        setattr(call, "_get_max_batch_size", lambda: opts.max_batch_size)  # noqa: B010
        setattr(call, "_get_batch_wait_timeout_s", lambda: opts.batch_wait_timeout_s)  # noqa: B010
        return call

    if _fn is not None:
        return wrap(_fn)
    return wrap
