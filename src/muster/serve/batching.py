"""``@serve.batch``: callers pass one item each; the method runs on a list of them.

Calls that arrive within ``batch_wait_timeout_s`` of the first (up to
``max_batch_size``, or what ``batch_size_fn`` counts) run together as one call
with a list, and each caller gets its own element of the returned sequence (a
list, tuple, numpy array: anything with one item per input). A call of several
arguments batches each one into its own list (``f(self, xs, ys, flag=flags)``),
as Ray does, whether each call passed it by position or by name. An ``async def``
generator yields a list per step; each caller streams its own element of each
(``StopIteration`` in its place ends that caller's stream).  As in Ray, a caller
that has gone (cancelled, or its stream closed) before its batch
runs is left out of it, and a call that ``batch_size_fn`` counts over ``max_batch_size`` fails with a
``RuntimeError``.  ``set_max_batch_size`` and
``set_batch_wait_timeout_s`` on the decorated method change both for the
batches that follow (a replica is one process, so this is per replica, as in
Ray; call them from ``reconfigure`` to drive them by ``user_config``).
As in Ray, the batched method serves no one request (its request context is
empty); ``serve.context._get_serve_batch_request_context()`` lists its
callers' request contexts, one per input, in the batch's order.

A replica takes at most ``max_ongoing_requests`` (default 5) requests at once,
so a batch holds at most that many: set it to ``max_batch_size`` or more for
full batches, as Ray Serve's docs advise (the replica warns, as Ray's does).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable

from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.serve import context
from muster.serve._internal.batch_metrics import BatchMetrics
from muster.serve.exceptions import RayServeException
from muster.serve.multiplex import get_multiplexed_model_id, set_model_id


@dataclass
class _Options:
    """A batched method's settings; the setters change them, the batcher reads them for each batch."""

    max_batch_size: int
    batch_wait_timeout_s: float
    max_concurrent_batches: int
    batch_size_fn: Callable[[list], int] | None = None

    def size(self, calls: list["_Call"]) -> int:
        """The batch size of ``calls``: their count, or what ``batch_size_fn`` says of their items
        (each call's first argument)."""
        if self.batch_size_fn is None:
            return len(calls)
        return int(self.batch_size_fn([args[0] if args else next(iter(kw.values()), None) for args, kw in calls]))


#: One call: its positional arguments and keyword arguments (what the batched function gets, listed).
_Call = tuple[tuple, dict]
#: A queued call: the call, where its result goes (a future, or a stream's queue), the model it names, and its
#: caller's request context (what ``serve.context._get_serve_batch_request_context()`` lists in the batch).
_Queued = tuple[_Call, Any, str, context._RequestContext]
_END = object()  # a streaming caller's last item


class _Stream(asyncio.Queue):
    """A streaming caller's items; ``left`` once it stopped reading (ended, cancelled or closed)."""

    left = False


def _left(waiter: Any) -> bool:
    """Whether the caller behind ``waiter`` has gone: its future cancelled, or its stream closed."""
    return waiter.left if isinstance(waiter, _Stream) else waiter.cancelled()


def _fail(waiter: Any, exc: BaseException) -> None:
    """Hand ``exc`` to the caller behind ``waiter`` (raised where it waits), unless it has its answer."""
    if isinstance(waiter, _Stream):
        waiter.put_nowait(exc)
    elif not waiter.done():
        waiter.set_exception(exc)


def _check_size(value: Any, name: str = "max_batch_size") -> int:
    if name == "max_batch_size" and isinstance(value, float) and value.is_integer():  # as Ray's: 4.0 is 4
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidArgumentError(f"@serve.batch {name}={value!r}: use an integer >= 1.")
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
    fix = "return a sequence (list, tuple, numpy array) with one result per input, in order."
    if got is None:  # Ray's len() of it raises TypeError
        raise InvalidTypeError(f"@serve.batch method {fn.__qualname__} got {n} inputs and returned "
                               f"{type(results).__name__}; {fix}")
    if len(got) != n:  # Ray's RayServeException: "Batched function doesn't preserve batch size."
        raise RayServeException(f"@serve.batch method {fn.__qualname__} got {n} inputs and returned "
                                f"{type(results).__name__} of length {len(got)}; {fix}")
    return got


def _by_model(batch: list[_Queued]) -> list[tuple[str, list[_Queued]]]:
    """The batch split by the multiplexed model its calls name, in arrival order (one part, the common case,
    when they name the same model or none)."""
    first = batch[0][2]
    if all(q[2] == first for q in batch):
        return [(first, batch)]
    parts: dict[str, list[_Queued]] = {}
    for queued in batch:
        parts.setdefault(queued[2], []).append(queued)
    return list(parts.items())


def _by_signature(fn: Callable, signature: inspect.Signature, args: tuple, kwargs: dict,
                  owner: bool) -> tuple[tuple, dict]:
    """One call's arguments as the signature places them: each parameter that can be passed by position is,
    however the caller named it, so ``f(1, "a")``, ``f(1, ys="a")`` and ``f(xs=1, ys="a")`` batch together (as
    in Ray). Defaults are not filled in: calls that leave out different parameters do not batch. ``owner``: the
    first of ``args`` is ``self``."""
    if not kwargs:
        return args, kwargs
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise InvalidTypeError(
            f"@serve.batch method {fn.__qualname__}: a call with {len(args) - owner} positional argument(s) and "
            f"keywords {sorted(kwargs)} does not fit its signature {signature} ({exc}). Fix: pass one item for "
            "each of its parameters (by position or by name), as you would call it without @serve.batch."
        ) from exc
    return bound.args, bound.kwargs


def _batched(fn: Callable, calls: list[_Call]) -> tuple[tuple, dict]:
    """The calls' arguments, each position and keyword as one list over the calls."""
    shapes = {(len(a), tuple(sorted(k))) for a, k in calls}
    if len(shapes) != 1:
        raise InvalidTypeError(
            f"@serve.batch method {fn.__qualname__}: the calls of one batch passed different arguments "
            f"({sorted(shapes)}); pass the same positional count and keywords in every call."
        )
    n, keys = shapes.pop()
    return (tuple([a[i] for a, _ in calls] for i in range(n)),
            {key: [k[key] for _, k in calls] for key in keys})


class _Batcher:
    def __init__(self, fn: Callable, opts: _Options):
        self.fn, self.opts = fn, opts
        self.streams = inspect.isasyncgenfunction(fn)
        self.queue: asyncio.Queue | None = None
        self.sem = asyncio.Semaphore(opts.max_concurrent_batches)
        self.task: asyncio.Task | None = None
        self.carry: tuple | None = None  # an item that would have made the last batch too big
        self.warned_at = 0  # the batch capacity last warned about (see _warn_if_batches_cannot_fill)
        self.metrics = BatchMetrics(getattr(fn, "__name__", "unknown"))  # made in the replica: with its tags

    def _warn_if_batches_cannot_fill(self) -> None:
        """As Ray's: say so when the replica's ``max_ongoing_requests`` is below what one batch (times the
        concurrent batches) holds, as its batches then never fill (once per setting; ``set_max_batch_size``
        may change it)."""
        config = getattr(context._current, "_deployment_config", None)
        limit = getattr(config, "max_ongoing_requests", None)
        want = self.opts.max_batch_size * self.opts.max_concurrent_batches
        if not isinstance(limit, int) or want <= limit or want == self.warned_at or self.opts.batch_size_fn:
            return
        self.warned_at = want
        logging.getLogger("muster.serve").warning(
            "@serve.batch %s: max_batch_size (%d) x max_concurrent_batches (%d) is more than the deployment's "
            "max_ongoing_requests (%d), so a batch never holds more than %d calls. Fix: set "
            "@serve.deployment(max_ongoing_requests=%d) or more.",
            self.fn.__qualname__, self.opts.max_batch_size, self.opts.max_concurrent_batches, limit, limit, want)

    def _start(self, owner: Any) -> asyncio.Queue:
        if self.queue is None:
            self.queue = asyncio.Queue()
            self.task = asyncio.ensure_future(self._run(owner))
        return self.queue

    async def _put(self, owner: Any, call: _Call, waiter: Any) -> None:
        """Queue the call with what its caller's context says: the model it names, the request it serves."""
        await self._start(owner).put((call, waiter, get_multiplexed_model_id(), context._get_serve_request_context()))

    async def submit(self, owner: Any, call: _Call) -> Any:
        fut = asyncio.get_running_loop().create_future()
        await self._put(owner, call, fut)
        return await fut

    async def stream(self, owner: Any, call: _Call) -> Any:
        """The caller's own element of each list the batched generator yields."""
        out = _Stream()
        await self._put(owner, call, out)
        try:
            while (item := await out.get()) is not _END:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:  # its batch skips it if it has not started, and stops queueing its items if it has
            out.left = True

    async def _run(self, owner: Any) -> None:
        assert self.queue is not None
        loop = asyncio.get_running_loop()
        # this task began in its first caller's context: a batch serves many requests, so (as in Ray) none is
        # "the" request here; _get_serve_batch_request_context() lists them
        context._set_request("", "")
        while True:
            first, self.carry = self.carry or await self.queue.get(), None
            if self._too_big(first):
                continue
            self._warn_if_batches_cannot_fill()
            batch = [first]
            opened = loop.time()
            deadline = opened + self.opts.batch_wait_timeout_s
            while self.opts.size([q[0] for q in batch]) < self.opts.max_batch_size:
                self.metrics.filling(self.queue.qsize())
                remaining = deadline - loop.time()
                if remaining <= 0 and self.queue.empty():
                    break
                try:
                    got = await asyncio.wait_for(self.queue.get(), max(remaining, 0))
                except asyncio.TimeoutError:
                    break
                if self.opts.size([q[0] for q in batch] + [got[0]]) > self.opts.max_batch_size:
                    self.carry = got  # it starts the next batch
                    break
                batch.append(got)
            self.metrics.closed(loop.time() - opened)
            await self.sem.acquire()
            asyncio.ensure_future(self._call_parts(owner, batch))

    def _too_big(self, queued: _Queued) -> bool:
        """Whether ``batch_size_fn`` counts this one call as more than a batch holds; if so, as in Ray, its caller
        gets a ``RuntimeError`` (it could never run)."""
        if self.opts.batch_size_fn is None:
            return False
        size = self.opts.size([queued[0]])
        if size <= self.opts.max_batch_size:
            return False
        _fail(queued[1], RuntimeError(
            f"@serve.batch method {self.fn.__qualname__}: batch_size_fn counts this call's item as {size}, more "
            f"than max_batch_size={self.opts.max_batch_size}, so no batch can hold it. Fix: raise max_batch_size "
            "(or set_max_batch_size) to at least that, split the item, or check batch_size_fn."))
        return True

    async def _call_parts(self, owner: Any, batch: list[_Queued]) -> None:
        """Run the batch, one call per model it names, all under the one ``max_concurrent_batches`` slot."""
        try:
            batch = [q for q in batch if not _left(q[1])]  # as in Ray, callers that have gone are not run
            if not batch:
                return
            parts = _by_model(batch)
            if len(parts) == 1:
                await self._call(owner, *parts[0])
            else:  # each part a task of its own, so each sets the model id in its own context
                await asyncio.gather(*(asyncio.ensure_future(self._call(owner, m, p)) for m, p in parts))
        finally:
            self.sem.release()

    async def _call(self, owner: Any, model_id: str, batch: list[_Queued]) -> None:
        waiters = [q[1] for q in batch]
        set_model_id(model_id)  # this task's context: the first caller's model was inherited from _run's
        context._set_batch_request_context([q[3] for q in batch])
        began = time.monotonic()
        try:
            self.metrics.started(self.opts.size([q[0] for q in batch]), self.opts.max_batch_size)
            args, kwargs = _batched(self.fn, [q[0] for q in batch])
            args = (owner, *args) if owner is not None else args
            if self.streams:
                await self._stream(self.fn(*args, **kwargs), waiters)
                return
            results = _results(self.fn, await self.fn(*args, **kwargs), len(waiters))
            for fut, r in zip(waiters, results):
                if not fut.done():
                    fut.set_result(r)
        except Exception as exc:  # noqa: BLE001 - every caller of the batch sees it
            for w in waiters:
                _fail(w, exc)
        finally:
            self.metrics.ran(time.monotonic() - began)

    async def _stream(self, gen: Any, queues: list[_Stream]) -> None:
        live: list[_Stream | None] = list(queues)
        async for results in gen:
            for i, r in enumerate(_results(self.fn, results, len(queues))):
                q = live[i]
                if q is None or q.left:
                    continue
                if r is StopIteration or r is StopAsyncIteration:
                    q.put_nowait(_END)
                    live[i] = None
                else:
                    q.put_nowait(r)
        for q in live:
            if q is not None:
                q.put_nowait(_END)


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
    batch_size_fn: Callable[[list], int] | None = None,
) -> Any:
    """Batch calls of an async method (or function) that takes a list (Ray Serve's ``@serve.batch``).

    Args:
        max_batch_size: most items in one call.
        batch_wait_timeout_s: how long the first item waits for others.
        max_concurrent_batches: batches that may run at once.
        batch_size_fn: what a list of items counts as (default ``len``), e.g. their total tokens;
            a batch stays at ``max_batch_size`` or under by it.

    Returns:
        The decorated function; its ``set_max_batch_size(n)`` and ``set_batch_wait_timeout_s(s)`` change
        the settings for the batches that follow in this replica.

    Raises:
        TypeError: the decorated function is not ``async def``, or is an async generator under a bare
            ``@serve.batch`` (as in Ray: write ``@serve.batch()``).
        ValueError: a bad size or timeout.
    """
    max_batch_size = _check_size(max_batch_size)
    _check_wait(batch_wait_timeout_s)
    _check_size(max_concurrent_batches, "max_concurrent_batches")
    if batch_size_fn is not None and not callable(batch_size_fn):
        raise InvalidTypeError(f"@serve.batch batch_size_fn={batch_size_fn!r}: pass a function list of items -> int.")

    def wrap(fn: Callable) -> Callable:
        streams = inspect.isasyncgenfunction(fn)
        if not (inspect.iscoroutinefunction(fn) or streams):
            raise InvalidTypeError(f"@serve.batch needs an `async def` function; "
                                   f"{getattr(fn, '__qualname__', repr(fn))} is not one.")
        signature = inspect.signature(fn)
        is_method = "self" in signature.parameters
        opts = _Options(max_batch_size, batch_wait_timeout_s, max_concurrent_batches, batch_size_fn)

        def set_max_batch_size(value: int) -> None:
            opts.max_batch_size = _check_size(value)

        def set_batch_wait_timeout_s(value: float) -> None:
            opts.batch_wait_timeout_s = _check_wait(value)

        def split(args: tuple, kwargs: dict) -> tuple[Any, _Call]:
            args, kwargs = _by_signature(fn, signature, args, kwargs, is_method)
            return (args[0], (args[1:], kwargs)) if is_method else (None, (args, kwargs))

        async def streamed(*args: Any, **kwargs: Any) -> Any:
            owner, one = split(args, kwargs)
            async for item in _batcher(owner, fn, opts).stream(owner, one):
                yield item

        async def returned(*args: Any, **kwargs: Any) -> Any:
            owner, one = split(args, kwargs)
            return await _batcher(owner, fn, opts).submit(owner, one)

        call = functools.wraps(fn)(streamed if streams else returned)

        setattr(call, "__serve_batch__", True)  # noqa: B010 - a marker the replica looks for
        setattr(call, "set_max_batch_size", set_max_batch_size)  # noqa: B010 - Ray's names, on the method
        setattr(call, "set_batch_wait_timeout_s", set_batch_wait_timeout_s)  # noqa: B010
        setattr(call, "_get_max_batch_size", lambda: opts.max_batch_size)  # noqa: B010
        setattr(call, "_get_batch_wait_timeout_s", lambda: opts.batch_wait_timeout_s)  # noqa: B010
        return call

    if _fn is not None:
        if not callable(_fn):  # @serve.batch(4): options are keyword-only, as in Ray
            raise InvalidTypeError(f"@serve.batch({_fn!r}): its one positional argument is the method to batch; "
                                   f"give options by name, e.g. @serve.batch(max_batch_size={_fn!r}).")
        if inspect.isasyncgenfunction(_fn):  # Ray 2.60 refuses this form too (a TypeError), only with arguments
            raise InvalidTypeError(
                f"bare @serve.batch on the async generator {_fn.__qualname__}: as in Ray, a batched generator "
                "needs the decorator called. Fix: write @serve.batch() (or @serve.batch(max_batch_size=...)).")
        return wrap(_fn)
    return wrap
