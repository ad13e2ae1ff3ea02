"""``ObjectRefGenerator``: the refs of a generator task's items (Ray's ``num_returns="dynamic"``/streaming).

muster runs the generator to its end in the worker and sends the items back
together; iterating the generator waits for that, then yields one ref per
item.  (Ray streams items as they are yielded; here the first ``next`` waits
for the last item.)  As in Ray, an error does not lose what came before it:
the items yielded before the generator raised come first, then one ref whose
``get`` raises the error, then the end.  A task that fails as a whole (it
raised before its first item and its retries are spent, or its worker died,
which loses the items not yet sent: all of them here) gives that one ref.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

from muster.core import context as core_context
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


def _ref(item: Any, in_worker: bool) -> ObjectRef:
    if isinstance(item, GeneratorRaised):
        return objects.failed(item.error)
    return objects.put(item) if in_worker else objects.store(item)


class ObjectRefGenerator:
    """Iterate it for ``ObjectRef`` s, one per item the task yielded."""

    def __init__(self, refs: list[ObjectRef] | None = None, source: ObjectRef | None = None):
        self._refs, self._source, self._next = refs, source, 0
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
        refs = self._materialize()
        if self._next >= len(refs):
            raise StopIteration
        self._next += 1
        return refs[self._next - 1]

    def __aiter__(self) -> "ObjectRefGenerator":
        return self

    async def __anext__(self) -> ObjectRef:
        """``async for ref in gen`` (Ray's asyncio form): waits for the items without blocking the loop."""
        if self._refs is None:
            import asyncio

            await asyncio.get_running_loop().run_in_executor(None, self._materialize)
        try:
            return self.__next__()
        except StopIteration:
            raise StopAsyncIteration from None

    def __len__(self) -> int:
        return len(self._materialize())

    def completed(self) -> ObjectRef | None:
        """The ref that is ready once the generator task finished."""
        return self._source

    def __reduce__(self) -> Any:
        return (ObjectRefGenerator, (self._materialize(),))

    def __repr__(self) -> str:
        return f"ObjectRefGenerator({'pending' if self._refs is None else len(self._refs)})"
