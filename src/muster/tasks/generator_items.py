"""In the worker: what a task's or actor call's value becomes for its caller, and the items its generator yields.

As in Ray 2.60:

- ``num_returns=n`` (an int) and a generator: its first n items are the n results. One more item is not
  taken: the n results stand and the surplus is reported on the worker's stderr. With fewer than n items
  (it ended, or raised), the items it yielded stand and each ref past them raises (the generator's error,
  or one saying how many it yielded). An exception is never retried here (Ray stores the items as they
  come, so a generator with static ``num_returns`` is not re-run for ``retry_exceptions``).
- ``num_returns="dynamic"`` / ``"streaming"``: every item; an error after some items follows them as one
  more item, unless the task's ``retry_exceptions`` names it: then the attempt fails, and its task runs
  again while ``max_retries`` lasts. A streamed item already sent is kept (a retry's item of the same index
  is dropped by the owner), so the caller sees each index once, the first attempt's that reached it.
  An actor's generator method keeps the error after its items here: its caller's side decides whether its
  ``retry_exceptions`` and ``max_task_retries`` run it again (``generators.AttemptItems``).
"""

from __future__ import annotations

import inspect
import os
import sys
from typing import Any

from muster.core import context as core_context
from muster.exceptions import InvalidArgumentError
from muster.tasks import events


def collect(value: Any, num_returns: Any, name: str, retry_exceptions: Any = False) -> Any:
    """``value`` (what the function returned) as its caller's ``num_returns`` wants it; ``retry_exceptions``:
    the task's (True, or a list of exception types), for an error its dynamic generator raises."""
    if inspect.iscoroutine(value):
        import asyncio  # only async tasks pay for it

        value = asyncio.run(value)
    if num_returns in ("dynamic", "streaming"):
        return items(value, name, retry_exceptions)
    if isinstance(num_returns, int) and num_returns >= 1 and inspect.isgenerator(value):
        return static_items(value, num_returns, name)
    if isinstance(num_returns, int) and num_returns != 1:
        if inspect.isgenerator(value):  # num_returns=0: its items are not the caller's
            items(value, name)
            return None
        if num_returns == 0:
            return None
        if not isinstance(value, (tuple, list)) or len(value) != num_returns:
            got = f"{len(value)} values" if isinstance(value, (tuple, list)) else type(value).__name__
            raise InvalidArgumentError(
                f"{name} was declared with num_returns={num_returns} but returned {got}; return a tuple of "
                f"{num_returns} values or change num_returns.")
        return tuple(value)
    return value


def static_items(generator: Any, n: int, name: str) -> Any:
    """The first ``n`` items of ``generator`` as a task's ``num_returns=n`` results (see the module). (An async
    actor method's items come as a list, checked as a returned one: Ray refuses async generators there.)"""
    taken: list[Any] = []
    error: BaseException | None = None
    try:
        for item in generator:
            if len(taken) == n:
                _surplus(name, n)
                generator.close()
                break
            taken.append(set_aside(item))
    except Exception as exc:  # noqa: BLE001 - the refs past the items raise it
        error = exc
    return _static_values(taken, error, n, name)


def _surplus(name: str, n: int) -> None:
    print(f"{name} yielded more than its num_returns={n} values: the first {n} are its results, the rest were "
          f"dropped (as in Ray). Yield exactly {n}, or declare num_returns='streaming' to take them all.",
          file=sys.stderr)


def _static_values(taken: list[Any], error: BaseException | None, n: int, name: str) -> Any:
    """The ``n`` results of a generator that yielded ``taken`` and then raised ``error`` (None: it ended)."""
    if len(taken) == n:
        if error is not None:  # after all of them, the error has no ref to go to and is printed instead
            print(f"{name} raised after its num_returns={n} values: {raised(error, name).error}", file=sys.stderr)
        return taken[0] if n == 1 else tuple(taken)
    if error is None:
        error = InvalidArgumentError(
            f"{name} was declared with num_returns={n} but yielded {len(taken)} values; yield {n} values or "
            "change num_returns.")
    if n == 1:  # its one ref fails
        raise error
    return tuple(taken) + (raised(error, name),) * (n - len(taken))


def items(generator: Any, name: str, retry_exceptions: Any = False) -> list[Any]:
    """The items ``generator`` yields; when it raises after yielding some, they are kept and its
    error follows them (Ray's streaming generators deliver the items yielded before an error), unless
    ``retry_exceptions`` names it. An error before the first item fails the task as a whole, so its
    retries still apply."""
    out: list[Any] = []
    try:
        for item in generator:
            out.append(set_aside(item))
    except Exception as exc:  # noqa: BLE001 - handed on after the items, as the task's error would be
        if not out or retried(retry_exceptions, exc):
            raise
        out.append(raised(exc, name))
    return out


async def async_items(generator: Any, name: str) -> list[Any]:
    """:func:`items` of an async generator."""
    out: list[Any] = []
    try:
        async for item in generator:
            out.append(set_aside(item))
    except Exception as exc:  # noqa: BLE001 - as in items
        if not out:
            raise
        out.append(raised(exc, name))
    return out


def retried(retry_exceptions: Any, error: BaseException) -> bool:
    """Whether ``retry_exceptions`` (a task's: True, or a list of exception types) retries ``error``, as the
    owner decides once the attempt failed (``options.retries_exception``)."""
    if not retry_exceptions:
        return False
    return retry_exceptions is True or isinstance(error, tuple(retry_exceptions))


def stream(generator: Any, task_id: str, name: str, retry_exceptions: Any = False) -> events.StreamEnd:
    """Send each item to the owner as it is yielded (Ray's streaming generators): the caller's
    ``next`` has it at once, and an endless generator can be consumed. When it raises after some
    items, the error follows them as one more item, unless ``retry_exceptions`` names it; before the
    first, the task fails as a whole (so its retries apply)."""
    sent = 0
    try:
        for item in generator:
            core_context.send_event(events.Yielded(task_id, sent, item), wait=False)
            sent += 1
    except Exception as exc:  # noqa: BLE001 - handed on after the items, as the task's error would be
        if not sent or retried(retry_exceptions, exc):
            raise
        core_context.send_event(events.Yielded(task_id, sent, raised(exc, name)), wait=False)
        sent += 1
    return events.StreamEnd(sent)


def raised(exc: BaseException, name: str) -> Any:
    """``exc`` as the item that follows a generator's items (a ``GeneratorRaised``)."""
    from muster.core.local.wire import capture_error
    from muster.tasks.generators import GeneratorRaised

    return GeneratorRaised(capture_error(exc, name, os.getpid(), ""))


def set_aside(item: Any) -> Any:
    """``item`` with its big buffers (arrays, tensors) moved to shared memory, so the worker's heap
    holds one yielded value at a time, as Ray's object store lets a generator task do (the items of a
    task with ``num_returns=n`` or "dynamic" are sent together once it ends).  Items with less than
    :data:`SET_ASIDE_MIN` bytes of buffers stay as they are; one that does not pickle stays too (sending
    it reports that). Only an item holding an array of that size, or a container holding such arrays
    at its top level, is pickled to find out: the rest are sent as they are, with no second pickling."""
    from muster.core import serialization

    if _array_bytes(item) < SET_ASIDE_MIN:
        return item
    try:
        body, buffers = serialization.dumps(item)
    except Exception:  # noqa: BLE001 - sending the result reports it, with the task's name
        return item
    if sum(b.raw().nbytes for b in buffers) < SET_ASIDE_MIN:  # nothing worth moving: keep it as it is
        return item
    import pickle

    return pickle.loads(body, buffers=[serialization.copy_of(b.raw()) for b in buffers])


SET_ASIDE_MIN = 1 << 20  # bytes of buffers in one yielded item before it is moved to shared memory


def _array_bytes(item: Any) -> int:
    """The bytes of the arrays (numpy, torch: what has ``nbytes``) ``item`` is or holds at its top level."""
    values = item.values() if isinstance(item, dict) else item if isinstance(item, (list, tuple)) else (item,)
    return sum(n for n in (getattr(v, "nbytes", 0) for v in values) if isinstance(n, int))
