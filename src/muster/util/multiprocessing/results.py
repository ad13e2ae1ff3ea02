"""What ``Pool`` hands back: ``AsyncResult`` (``apply_async``, ``map_async``, ``starmap_async``) and the
iterators of ``imap``/``imap_unordered``.

Each batch the pool sends is one actor call whose value is a list, one item per call of the user's
function: its return value, or a :class:`Failed` holding what it raised.
"""

from __future__ import annotations

import collections
import logging
import multiprocessing
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from muster.exceptions import GetTimeoutError, InvalidArgumentError, MusterError
from muster.tasks import get, wait
from muster.tasks.objects import ObjectRef

logger = logging.getLogger(__name__)


class PoolTimeoutError(GetTimeoutError, multiprocessing.TimeoutError):
    """A pool's result was not ready within the timeout given; also ``multiprocessing.TimeoutError`` (what
    Ray's and Python's pools raise) and the builtin ``TimeoutError``. The work goes on: ask again later."""


class RemoteTraceback(MusterError):
    """The cause given to an exception the pool's function raised: its traceback in the pool's process (as
    Python's ``multiprocessing.pool.RemoteTraceback``)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class Failed:
    """One call of the user's function raised ``error``: it stands in that call's place in its batch, with
    the traceback of where it was raised."""

    error: BaseException
    remote_traceback: str = ""


def fetch(ref: ObjectRef) -> list[Any]:
    """The items of a finished batch; a batch that failed as a whole (its actor died, the function raised a
    ``BaseException`` that is not an ``Exception``) is one :class:`Failed` item. As Python's pool does, an
    exception's cause is the traceback it had in the pool's process (a :class:`RemoteTraceback`)."""
    try:
        batch = list(get(ref))
    except Exception as exc:  # noqa: BLE001 - handed to whoever asks for the batch's results
        return [Failed(exc)]
    for item in batch:
        if isinstance(item, Failed) and item.remote_traceback and item.error.__cause__ is None:
            item.error.__cause__ = RemoteTraceback(f'\n"""\n{item.remote_traceback}"""')
    return batch


def _first_error(batch: list[Any]) -> BaseException | None:
    return next((item.error for item in batch if isinstance(item, Failed)), None)


def _call(hook: Callable[[Any], Any], value: Any, what: str) -> None:
    try:
        hook(value)
    except Exception:  # noqa: BLE001 - a user's callback failing must not stop the results from arriving
        logger.exception("muster.util.multiprocessing.Pool: the %s %r raised; the result is kept.", what, hook)


class AsyncResult:
    """The future result of ``apply_async``/``map_async``/``starmap_async`` (not made directly).

    A thread collects the batches as they finish: it calls ``error_callback`` with the first exception a
    call raised (as soon as it arrives), or, once every batch is in and none raised, ``callback`` with the
    result (the value for ``apply_async``, the list of values in input order for the maps). ``ready()`` is
    true once that is done.
    """

    def __init__(self, refs: list[ObjectRef], callback: Callable[[Any], Any] | None = None,
                 error_callback: Callable[[BaseException], Any] | None = None, single_result: bool = False):
        self._batches: list[list[Any]] = [[] for _ in refs]
        self._single = single_result
        self._failed = False
        self._done = threading.Event()
        threading.Thread(target=self._collect, args=(refs, callback, error_callback), daemon=True,
                         name="muster-pool-result").start()

    def _collect(self, refs: list[ObjectRef], callback: Callable[[Any], Any] | None,
                 error_callback: Callable[[BaseException], Any] | None) -> None:
        try:
            position = {id(ref): i for i, ref in enumerate(refs)}
            pending = list(refs)
            while pending:
                ready, pending = wait(pending, num_returns=1)
                batch = self._batches[position[id(ready[0])]] = fetch(ready[0])
                error = _first_error(batch)
                if error is not None and not self._failed:
                    self._failed = True
                    if error_callback is not None:
                        _call(error_callback, error, "error_callback")
            if not self._failed and callback is not None:
                values = [value for batch in self._batches for value in batch]
                _call(callback, values[0] if self._single else values, "callback")
        finally:
            self._done.set()

    def wait(self, timeout: float | None = None) -> None:
        """Return once the result is ready, or after ``timeout`` seconds (no error either way)."""
        self._done.wait(timeout)

    def get(self, timeout: float | None = None) -> Any:
        """The result: a value for ``apply_async``, a list in input order for the maps.

        Raises:
            the exception the user's function raised (the first in input order), as its own type;
            PoolTimeoutError: not ready within ``timeout`` seconds (a ``multiprocessing.TimeoutError``).
        """
        if not self._done.wait(timeout):
            raise PoolTimeoutError(f"AsyncResult.get(timeout={timeout}): the result was not ready in time; the work "
                                   "goes on: call get() again, with a longer timeout or none.")
        values: list[Any] = []
        for batch in self._batches:
            error = _first_error(batch)
            if error is not None:
                raise error
            values.extend(batch)
        return values[0] if self._single else values

    def ready(self) -> bool:
        """Whether every call finished (and the callback, if any, ran)."""
        return self._done.is_set()

    def successful(self) -> bool:
        """Whether no call raised.

        Raises:
            InvalidArgumentError: the result is not ready yet.
        """
        if not self.ready():
            raise InvalidArgumentError(f"{self!r} is not ready: call successful() once ready() is True "
                                       "(after wait() or get()).")
        return not self._failed


class IMapIterator:
    """The results of ``imap`` (input order) or ``imap_unordered`` (as they finish); not made directly.

    One batch per pool process is in flight; each time one finishes another is sent, so the input is read
    only as fast as the pool works. ``next(timeout)`` raises ``PoolTimeoutError`` when nothing is ready in
    time, and the user's exception where a call raised (the iterator goes on after it).
    """

    def __init__(self, send: Callable[[list[Any]], ObjectRef], batches: Iterator[list[Any]], in_flight: int,
                 ordered: bool):
        self._send, self._batches, self._ordered = send, batches, ordered
        self._running: dict[int, ObjectRef] = {}  # batch index -> ref, not seen finished yet
        self._finished: dict[int, list[Any]] = {}  # batch index -> items, not handed out yet
        self._finish_order: collections.deque[int] = collections.deque()
        self._items: collections.deque[Any] = collections.deque()
        self._sent = self._taken = 0
        self._exhausted = False
        for _ in range(in_flight):
            self._send_next()

    def _send_next(self) -> None:
        batch = None if self._exhausted else next(self._batches, None)
        if batch is None:
            self._exhausted = True
            return
        self._running[self._sent] = self._send(batch)
        self._sent += 1

    def __iter__(self) -> "IMapIterator":
        return self

    def __next__(self) -> Any:
        return self.next()

    def next(self, timeout: float | None = None) -> Any:
        """The next result.

        Raises:
            StopIteration: every result was handed out.
            PoolTimeoutError: none ready within ``timeout`` seconds.
            the exception the user's function raised for this item.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._items:
            if self._exhausted and self._taken == self._sent:
                raise StopIteration
            self._items.extend(self._finished.pop(self._next_finished(deadline, timeout)))
            self._taken += 1
        item = self._items.popleft()
        if isinstance(item, Failed):
            raise item.error
        return item

    def _next_finished(self, deadline: float | None, timeout: float | None) -> int:
        while True:
            if self._ordered and self._taken in self._finished:
                return self._taken
            if not self._ordered and self._finish_order:
                return self._finish_order.popleft()
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _ = wait(list(self._running.values()), num_returns=1, timeout=remaining)
            if not ready:
                raise PoolTimeoutError(f"imap iterator next(timeout={timeout}): no result was ready in time; the "
                                       "work goes on: call next() again, with a longer timeout or none.")
            index = next(i for i, ref in self._running.items() if ref is ready[0])
            self._finished[index] = fetch(self._running.pop(index))
            if not self._ordered:
                self._finish_order.append(index)
            self._send_next()
