"""``ActorPool``: spread work over a fixed set of actors (Ray's ``ray.util.ActorPool``)."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

from muster.exceptions import GetTimeoutError, InvalidArgumentError, InvalidTypeError
from muster.tasks import get, wait
from muster.tasks.objects import ObjectRef

Submit = Callable[[Any, Any], ObjectRef]  # (actor, value) -> the ref of actor.method.remote(value)


class ActorPool:
    """Hand values to idle actors; collect results in order (``get_next``) or as they finish.

    Args:
        actors: the actor handles to use; each runs one submitted call at a time.

    Example:
        ``pool = ActorPool([A.remote(), A.remote()])``;
        ``list(pool.map(lambda a, v: a.double.remote(v), [1, 2, 3]))`` gives ``[2, 4, 6]``.
    """

    def __init__(self, actors: Iterable[Any]):
        self._idle: list[Any] = list(actors)
        self._by_index: dict[int, ObjectRef] = {}  # submit order -> ref, until returned
        self._owner: dict[ObjectRef, tuple[int, Any]] = {}  # ref -> (submit order, actor)
        self._next_index = 0
        self._next_return = 0
        self._queued: list[tuple[Submit, Any]] = []  # submitted while every actor was busy

    def map(self, fn: Submit, values: Iterable[Any]) -> Iterator[Any]:
        """Results of ``fn(actor, v)`` for every value, in the order of ``values``."""
        self._submit_all(fn, values)
        while self.has_next():
            yield self.get_next()

    def map_unordered(self, fn: Submit, values: Iterable[Any]) -> Iterator[Any]:
        """Results of ``fn(actor, v)`` for every value, as they finish."""
        self._submit_all(fn, values)
        while self.has_next():
            yield self.get_next_unordered()

    def _submit_all(self, fn: Submit, values: Iterable[Any]) -> None:
        while self.has_next():  # results of earlier submits are dropped, as in Ray
            self.get_next_unordered()
        for v in values:
            self.submit(fn, v)

    def submit(self, fn: Submit, value: Any) -> None:
        """Run ``fn(actor, value)`` on an idle actor now, or once one is free."""
        if not self._idle:
            self._queued.append((fn, value))
            return
        actor = self._idle.pop()
        try:
            ref = fn(actor, value)
        except BaseException:
            self._idle.append(actor)  # fn failed before starting work (a typo in the method name...): keep the actor
            raise
        if not isinstance(ref, ObjectRef):
            self._idle.append(actor)
            raise InvalidTypeError(f"ActorPool: fn must return the ref of an actor call (actor.method.remote(v)), "
                                   f"got {type(ref).__name__} {ref!r}; e.g. lambda a, v: a.method.remote(v).")
        self._by_index[self._next_index] = ref
        self._owner[ref] = (self._next_index, actor)
        self._next_index += 1

    def has_next(self) -> bool:
        """Whether a submitted call's result has not been returned yet."""
        return bool(self._owner) or bool(self._queued)

    def get_next(self, timeout: float | None = None, ignore_if_timedout: bool = False) -> Any:
        """The next result in submission order.

        Raises:
            StopIteration: nothing was submitted.
            TimeoutError: not ready within ``timeout`` seconds.
        """
        self._require_next()
        while self._next_return not in self._by_index:  # its call is still queued behind busy actors
            self._wait_one(timeout)
        ref = self._by_index[self._next_return]
        try:
            self._first_ready([ref], timeout, "get_next")
        except GetTimeoutError:
            if ignore_if_timedout:
                self._release(ref)
            raise
        self._release(ref)
        return get(ref)

    def get_next_unordered(self, timeout: float | None = None, ignore_if_timedout: bool = False) -> Any:
        """Whichever pending result is ready first.

        Raises:
            StopIteration: nothing was submitted.
            TimeoutError: none ready within ``timeout`` seconds.
        """
        self._require_next()
        ref = self._first_ready(list(self._owner), timeout, "get_next_unordered")
        self._release(ref)
        return get(ref)

    def has_free(self) -> bool:
        """Whether an actor is idle (and nothing waits for one)."""
        return bool(self._idle) and not self._queued

    def pop_idle(self) -> Any | None:
        """Take an idle actor out of the pool (None if all are busy)."""
        return self._idle.pop() if self.has_free() else None

    def push(self, actor: Any) -> None:
        """Add an actor to the pool."""
        if any(a is actor for a in self._idle) or any(a is actor for _, a in self._owner.values()):
            raise InvalidArgumentError("ActorPool.push: that actor is already in the pool.")
        self._return(actor)

    # -- internals -------------------------------------------------------------------------------
    def _wait_one(self, timeout: float | None) -> None:
        busy = [r for r, (_, a) in self._owner.items() if a is not None]
        if not busy:
            raise InvalidArgumentError(
                f"ActorPool: {len(self._queued)} submitted value(s) wait for an actor but the pool has none "
                "(pop_idle() took them all, or it was made from an empty list); push() an actor into the pool.")
        done = self._first_ready(busy, timeout, "get_next")
        index, actor = self._owner[done]
        self._owner[done] = (index, None)  # finished: its actor takes the next queued value
        self._return(actor)

    def _require_next(self) -> None:
        if not self.has_next():
            raise StopIteration("ActorPool: no more results; submit() first.")

    @staticmethod
    def _first_ready(refs: list[ObjectRef], timeout: float | None, what: str) -> ObjectRef:
        ready, _ = wait(refs, num_returns=1, timeout=timeout)
        if not ready:
            raise GetTimeoutError(f"ActorPool.{what}: no result within {timeout} s.")
        return ready[0]

    def _release(self, ref: ObjectRef) -> None:
        index, actor = self._owner.pop(ref)
        del self._by_index[index]
        if index == self._next_return:
            self._next_return += 1
            while self._next_return < self._next_index and self._next_return not in self._by_index:
                self._next_return += 1
        if actor is not None:
            self._return(actor)

    def _return(self, actor: Any) -> None:
        self._idle.append(actor)
        if self._queued:
            fn, value = self._queued.pop(0)
            self.submit(fn, value)
