"""``ObjectRefGenerator``: the refs of a generator task's items (Ray's ``num_returns="dynamic"``/streaming).

A streaming generator *task* called from the driver streams, as Ray's does: the
worker sends each item as it is yielded (:class:`Stream` collects them), so the
caller's ``next`` returns as soon as the next item exists, and an endless
generator can be consumed. Elsewhere (``num_returns="dynamic"``, actor
generator methods, a generator task called from inside a worker) the generator
runs to its end and its items come back together. Either way, as in Ray, an
error does not lose what came before it: the items yielded before the
generator raised come first, then one ref whose ``get`` raises the error, then
the end. A task that fails as a whole (it raised before its first item, or after
some with ``retry_exceptions`` naming the error, and its retries are spent, or its
worker died) gives that one ref after the items that had arrived (a retried task
sends its items again; those already here are kept, as in Ray: the caller sees
each index once, from the first attempt that reached it). An actor's generator method is retried the same
way, with its ``max_task_retries`` (:class:`AttemptItems`).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any, NoReturn

from muster.core import context as core_context
from muster.exceptions import InvalidTypeError
from muster.tasks import events, objects
from muster.tasks.objects import ObjectRef


def shaped(reply: Any) -> Any:
    """In a worker, the refs a ``.remote()`` call returns, from the owner's reply to it."""
    if reply is None:
        return None
    if isinstance(reply, list):
        return [ObjectRef(i) for i in reply]
    if isinstance(reply, events.Streamed):
        return ObjectRefGenerator.of_list(ObjectRef(reply.ref))
    return ObjectRef(reply)


class GeneratorRaised:
    """Follows the items of a generator that raised after yielding some: its error, as a ``TaskError``."""

    def __init__(self, error: BaseException):
        self.error = error


class AttemptItems:
    """The items of an actor's generator calls over their attempts (driver side: an actor call's items come
    together once an attempt ended), retried as Ray 2.60 retries them. Items ending in an error that the call's
    ``retry_exceptions`` names fail the attempt, so ``max_task_retries`` runs it again; a streaming call keeps
    each index once, from the first attempt that reached it, then its last attempt's error (as a streaming
    task, see :class:`Stream`); a ``"dynamic"`` one gives its last attempt's items, or fails as a whole."""

    def __init__(self) -> None:
        self._kept: dict[int, list[Any]] = {}  # call token -> the items its failed streaming attempts sent
        self._lock = threading.Lock()

    def failed(self, token: int, num_returns: Any, retry_exceptions: Any, ok: bool, value: Any) -> tuple[bool, Any]:
        """An attempt's answer ``(ok, value)`` as its retries see it: ``(False, error)`` for items ending in
        an error ``retry_exceptions`` names (a streaming call's items are kept for :meth:`merged`)."""
        if not (ok and num_returns in ("streaming", "dynamic") and isinstance(value, list) and value
                and isinstance(value[-1], GeneratorRaised)):
            return ok, value
        from muster.tasks.options import retries_exception

        error = value[-1].error
        if not retries_exception(retry_exceptions, error):
            return ok, value
        if num_returns == "streaming":
            with self._lock:
                self._kept[token] = _after(self._kept.get(token, []), value)[0]
        return False, error

    def merged(self, token: int, ok: bool, value: Any) -> tuple[bool, Any]:
        """The last answer ``(ok, value)`` of call ``token`` after the items its earlier attempts sent
        (unchanged when none did)."""
        kept = self.forget(token)
        if kept is None or (ok and not isinstance(value, list)):
            return ok, value
        items, error = _after(kept, list(value) if ok else [GeneratorRaised(value)])
        return True, items + error

    def forget(self, token: int) -> list[Any] | None:
        """Drop what call ``token``'s attempts sent (it is settled); those items, if any."""
        if not self._kept:  # most calls: no attempt of this actor's calls kept items (a lock-free look)
            return None
        with self._lock:
            return self._kept.pop(token, None)


def _after(kept: list[Any], items: list[Any]) -> tuple[list[Any], list[Any]]:
    """The items ``kept`` from earlier attempts followed by those of ``items`` (an attempt's) past them; and
    the error that ended ``items`` (``[GeneratorRaised]``), or none."""
    error = items[-1:] if items and isinstance(items[-1], GeneratorRaised) else []
    return kept + items[len(kept):len(items) - len(error)], error


def _ref(item: Any, in_worker: bool) -> ObjectRef:
    if isinstance(item, GeneratorRaised):
        return objects.failed(item.error)
    return objects.put(item) if in_worker else objects.store(item)


class Stream:
    """The items a streaming task has sent so far (driver side), in order, and how it ended.

    ``source`` gets the list of every item (the last one a ``GeneratorRaised`` if the generator
    raised) once the task returned and all its items are here, or the task's error if it failed
    before its first item: what ``ObjectRefGenerator.completed()`` and nested callers wait for.
    """

    def __init__(self, task_id: str, source: Future):
        self.task_id, self.source = task_id, source
        self._values: list[Any] = []
        self._refs: list[ObjectRef] = []
        self._expected: int | None = None
        self._error: BaseException | None = None
        self._cond = threading.Condition()
        self._watchers: list[tuple[int, Future]] = []  # (item index, future done once it or the end is here)
        with _streams_lock:
            _streams[task_id] = self

    def add(self, index: int, value: Any) -> None:
        """The worker's ``index``-th item (a retried task sends its items again: kept once)."""
        with self._cond:
            if index != len(self._values) or self._done():
                return
            self._values.append(value)
            self._refs.append(_ref(value, False))
            self._cond.notify_all()
            self._maybe_finish()
            self._wake()

    def end(self, result: Any = None, error: BaseException | None = None) -> None:
        """The task's own end: how many items it sent, or the error it failed with."""
        with self._cond:
            if error is not None:
                self._error = error
            elif isinstance(result, events.StreamEnd):
                self._expected = result.count
            else:  # its function returned where it was to yield: an end now, not a wait for items that never come
                self._error = InvalidTypeError(
                    f"a streaming task returned {type(result).__name__} instead of yielding its items: give "
                    "num_returns='streaming' only to a generator function (one that yields).")
            self._cond.notify_all()
            self._maybe_finish()
            self._wake()

    def next_ready(self, index: int) -> Future:
        """A future done once the ``index``-th item is here or the stream has ended (what Ray's
        ``wait`` calls a generator being ready)."""
        fut: Future = Future()
        with self._cond:
            self._watchers.append((index, fut))
            self._wake()
        return fut

    def _wake(self) -> None:
        ended = self._done() and self.source.done()
        keep = []
        for index, fut in self._watchers:
            if ended or index < len(self._refs):
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((index, fut))
        self._watchers = keep

    def _done(self) -> bool:
        return self._error is not None or (self._expected is not None and len(self._values) >= self._expected)

    def _maybe_finish(self) -> None:
        if not self._done() or self.source.done():
            return
        with _streams_lock:
            _streams.pop(self.task_id, None)
        if self._error is not None:
            self._refs.append(objects.failed(self._error))  # the items that came, then the error
            if not self._values:
                self.source.set_exception(self._error)
                return
        values = list(self._values) + ([GeneratorRaised(self._error)] if self._error is not None else [])
        self.source.set_result(values)

    def has(self, index: int) -> bool:
        """Whether the ``index``-th item's ref is here (returns at once)."""
        with self._cond:
            return index < len(self._refs)

    def ended_before(self, index: int) -> bool:
        """Whether the stream ended with fewer than ``index + 1`` refs (returns at once)."""
        with self._cond:
            return self._done() and self.source.done() and index >= len(self._refs)

    def ref(self, index: int) -> ObjectRef | None:
        """The ``index``-th item's ref once it is here, or None once the stream ended before it."""
        with self._cond:
            while index >= len(self._refs) and not (self._done() and self.source.done()):
                self._cond.wait(0.5)
            return self._refs[index] if index < len(self._refs) else None

    def all_refs(self) -> list[ObjectRef]:
        self.ref(1 << 62)  # waits for the end
        with self._cond:
            return list(self._refs)


_streams: dict[str, Stream] = {}
_streams_lock = threading.Lock()


def yielded(task_id: str, index: int, value: Any) -> None:
    """A streaming task's item arrived (its ``Yielded`` event); one whose stream ended is dropped."""
    with _streams_lock:
        stream = _streams.get(task_id)
    if stream is not None:
        stream.add(index, value)


class ObjectRefGenerator:
    """Iterate it for ``ObjectRef`` s, one per item the task yielded."""

    def __init__(self, refs: list[ObjectRef] | None = None, source: ObjectRef | None = None,
                 stream: Stream | None = None):
        self._refs, self._source, self._next, self._stream = refs, source, 0, stream
        self._lock = threading.Lock()

    @classmethod
    def of_list(cls, source: ObjectRef) -> "ObjectRefGenerator":
        """Refs of the items of ``source``'s value (a list), made when first iterated."""
        return cls(source=source)

    @classmethod
    def future_of_list(cls, source: ObjectRef) -> Future:
        """A future of a generator over ``source``'s items, done when ``source`` is (driver only)."""
        out: Future = Future()

        def done(f: Future) -> None:
            exc = f.exception()
            if exc is not None:
                out.set_exception(exc)
            else:
                out.set_result(cls([_ref(v, False) for v in f.result()]))

        source.future().add_done_callback(done)
        return out

    def _materialize(self) -> list[ObjectRef]:
        with self._lock:
            if self._refs is None and self._stream is not None:
                self._refs = self._stream.all_refs()
            if self._refs is None:
                assert self._source is not None
                ok, values = objects.settled(self._source)
                if not ok:  # the task failed before its first item: one ref carries the error
                    values = [GeneratorRaised(values)]
                in_worker = core_context.in_worker()
                self._refs = [_ref(v, in_worker) for v in values]
            return self._refs

    def __iter__(self) -> "ObjectRefGenerator":
        return self

    def __next__(self) -> ObjectRef:
        if self._refs is None and self._stream is not None:  # streaming: this item, as soon as it is here
            ref = self._stream.ref(self._next)
            if ref is None:
                raise StopIteration
            self._next += 1
            return ref
        refs = self._materialize()
        if self._next >= len(refs):
            raise StopIteration
        self._next += 1
        return refs[self._next - 1]

    def __aiter__(self) -> "ObjectRefGenerator":
        return self

    async def __anext__(self) -> ObjectRef:
        """``async for ref in gen`` (Ray's asyncio form): waits for the items without blocking the loop."""
        import asyncio

        if self._refs is None and self._stream is None:
            await asyncio.get_running_loop().run_in_executor(None, self._materialize)
            return self._sync_next_or_stop()
        return await asyncio.get_running_loop().run_in_executor(None, self._sync_next_or_stop)

    def _sync_next_or_stop(self) -> ObjectRef:
        try:
            return self.__next__()
        except StopIteration:
            raise StopAsyncIteration from None

    def __len__(self) -> int:
        return len(self._materialize())

    def completed(self) -> ObjectRef:
        """The ref that is ready once the generator task finished (at once for one whose items are all here).
        Returns at once."""
        if self._source is None:  # made from refs its task already returned
            done: Future = Future()
            done.set_result(None)
            self._source = objects.ObjectRef.new(done)
        return self._source

    def is_finished(self) -> bool:
        """Whether every ref is taken, so ``next`` raises ``StopIteration`` (Ray's ``is_finished``; the
        ref of an error counts: it must be taken too). Returns at once."""
        if self._refs is None and self._stream is not None:
            return self._stream.ended_before(self._next)
        if self._refs is None and not self._source_done():
            return False
        return self._next >= len(self._materialize())

    def next_ready(self) -> bool:
        """Whether ``next`` returns at once, with a ref whose ``get`` returns at once (Ray's
        ``next_ready``); False once :meth:`is_finished`. Returns at once."""
        if self._refs is None and self._stream is not None:
            return self._stream.has(self._next)
        if self._refs is None and not self._source_done():
            return False
        return not self.is_finished()

    def _source_done(self) -> bool:
        return self._source is None or self._source.future().done()

    def close(self) -> None:
        """Not supported, as in Ray (``NotImplementedError``): stop taking items instead, or
        ``muster.cancel(gen)`` to stop its task. So are ``send``, ``throw`` and the async ``asend``,
        ``athrow`` and ``aclose``: the generator runs in its task, and nothing goes back into it."""
        _unsupported("close")

    def send(self, value: Any) -> None:
        _unsupported("send")

    def throw(self, value: Any) -> None:
        _unsupported("throw")

    async def asend(self, value: Any) -> None:
        _unsupported("asend")

    async def athrow(self, value: Any) -> None:
        _unsupported("athrow")

    async def aclose(self) -> None:
        _unsupported("aclose")

    def next_ready_ref(self) -> ObjectRef | None:
        """For ``wait``: a ref ready once this generator's next item (or its end) is here; None when
        it is not streamed (its items come together, with its task's end)."""
        if self._refs is not None or self._stream is None:
            return None
        return objects.ObjectRef.new(self._stream.next_ready(self._next))

    def __reduce__(self) -> Any:
        return (ObjectRefGenerator, (self._materialize(),))

    def __repr__(self) -> str:
        return f"ObjectRefGenerator({'pending' if self._refs is None else len(self._refs)})"


def _unsupported(method: str) -> NoReturn:
    raise NotImplementedError(
        f"ObjectRefGenerator.{method}() is not supported (as in Ray): the generator runs in its task and takes "
        "nothing back. Stop iterating it, or call muster.cancel(gen) to stop the task that yields its items.")
