"""``ObjectRef`` and the driver's table of them; ``get``, ``wait``, ``put``.

The driver owns every object: a ref in the driver wraps a future; a ref that
crosses into a worker travels by id, and the worker asks the driver for its
value (``owner.py`` answers).  Inside a worker the same functions work: they
forward to the driver through the engine's event channel.

A value lives as long as a driver-side ref to it does (the table holds
futures weakly), except that once its id has reached a worker it is pinned
for the life of the process: a worker may ask for it by id at any time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import itertools
import pickle
import threading
import time
import warnings
import weakref
from concurrent.futures import Future
from typing import Any, Iterable, Sequence


from muster.core import context as core_context
from muster.core import serialization
from muster.tasks import events
from muster.exceptions import (GetTimeoutError, InvalidArgumentError, InvalidTypeError, TaskError, also_an_instance_of,
                               checked_timeout)

_ids = itertools.count(1)
_table: "weakref.WeakValueDictionary[int, Future]" = weakref.WeakValueDictionary()
_pinned: dict[int, Future] = {}  # ids a worker has seen: it may ask for them at any time
_table_lock = threading.Lock()
_NIL_ID = (1 << 224) - 1  # Ray's nil ObjectRef: 28 bytes, all ones


class ObjectRef:
    """A handle to a value that a task returns (or that ``put`` stored)."""

    __slots__ = ("id", "_future", "_fetched", "__weakref__")

    def __init__(self, id_: int | bytes, future: Future | None = None):
        if isinstance(id_, (bytes, bytearray)):  # Ray's ObjectRef(binary_id): the bytes binary() gave
            id_ = int.from_bytes(id_, "big")
        self.id, self._future = id_, future
        self._fetched: Future | None = None  # in a worker: the value being fetched from the driver

    @classmethod
    def new(cls, future: Future) -> "ObjectRef":
        ref = cls(next(_ids), future)
        with _table_lock:
            _table[ref.id] = future
        return ref

    def future(self) -> Future:
        """A ``concurrent.futures.Future`` of the value: the driver's own, or in a worker (a task, an
        actor) one that a thread fills by asking the driver."""
        if self._future is None:
            with _table_lock:
                self._future = _table.get(self.id)
            if self._future is None:
                if core_context.in_worker():
                    return self._fetch()
                raise InvalidArgumentError(f"ObjectRef({self.id}) is not known in this process.")
        return self._future

    def _fetch(self) -> Future:
        if self._fetched is None:
            fetched: Future = Future()

            def fill() -> None:
                try:
                    fetched.set_result(get(self))
                except BaseException as exc:  # noqa: BLE001 - the task's error, for whoever waits
                    fetched.set_exception(exc)

            threading.Thread(target=fill, name=f"muster-fetch-{self.id}", daemon=True).start()
            self._fetched = fetched
        return self._fetched

    def __await__(self) -> Any:
        """``await ref`` in any event loop (the driver's, an async actor's): its value, or its task's
        error raised as ``muster.get`` raises it."""
        return self.as_future().__await__()

    def as_future(self) -> Any:
        """Ray's ``ref.as_future()``: an ``asyncio.Future`` of the running event loop, done with the value, or
        with the task's error as ``muster.get`` raises it (``asyncio.wait_for``, ``gather``, callbacks)."""
        import asyncio

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                f"{self!r}.as_future() needs a running asyncio event loop: call it in a coroutine (or use "
                "ref.future(), a concurrent.futures.Future, outside one)."
            ) from None
        return loop.run_in_executor(None, get, self)

    def __reduce__(self) -> Any:
        if self._future is not None:  # the id is leaving this driver-side ref: keep the value reachable
            pin(self)
        return (ObjectRef, (self.id,))

    def __repr__(self) -> str:
        return f"ObjectRef({self.id})"

    def hex(self) -> str:
        """The ref's id in hex, as Ray's ``ObjectRef.hex()`` (56 digits; unique within the job)."""
        return f"{self.id:056x}"

    def binary(self) -> bytes:
        """The ref's id as Ray's ``ObjectRef.binary()`` gives it (28 bytes); ``ObjectRef(b)`` rebuilds it."""
        return self.id.to_bytes(28, "big")

    @classmethod
    def from_binary(cls, id_bytes: bytes) -> "ObjectRef":
        """Ray's ``ObjectRef.from_binary``: the ref whose ``binary()`` is ``id_bytes``."""
        return cls(id_bytes)

    @classmethod
    def nil(cls) -> "ObjectRef":
        """Ray's nil ref (its binary id is all ones); it has no value."""
        return cls(_NIL_ID)

    def is_nil(self) -> bool:
        """Whether this is the nil ref, as Ray's ``is_nil`` (the refs muster hands out never are)."""
        return self.id == _NIL_ID

    def task_id(self) -> Any:
        """The id of the task or actor call that returned this ref, as Ray's ``ref.task_id()``: ``.hex()``
        (or the string itself) is the id ``get_runtime_context().get_task_id()`` gives in it and
        ``list_tasks`` shows. None for a ref no task returned (``put``, a generator's items) or a task older
        than the 10,000 the state API keeps (Ray also gives ids there)."""
        from muster.tasks.runtime_context import HexId
        from muster.tasks.task_table import task_of

        task = task_of(self.id)
        return None if task is None else HexId(task)

    def job_id(self) -> Any:
        """The job's id, as Ray's ``ref.job_id()``: ``.hex()`` is ``get_runtime_context().get_job_id()``."""
        from muster.tasks.runtime_context import HexId, get_runtime_context

        return HexId(get_runtime_context().get_job_id())

    def __hash__(self) -> int:
        return hash(self.id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectRef) and other.id == self.id


def pin(ref: ObjectRef) -> int:
    """Keep ``ref``'s value reachable by id alone (its id goes to a worker); return the id."""
    fut = ref.future()
    with _table_lock:
        _pinned[ref.id] = fut
    return ref.id


def lookup(id_: int) -> Future:
    return ObjectRef(id_).future()


def raise_remote(exc: BaseException) -> None:
    """Raise a task's error so that it is still an instance of the original type."""
    if isinstance(exc, TaskError):
        raise as_instance_of_cause(exc) from None
    raise exc


def as_instance_of_cause(err: TaskError) -> BaseException:
    """A ``TaskError`` that is also an instance of the remote exception's class.

    ``except ZeroDivisionError`` catches a task's ZeroDivisionError, and the
    message still carries the remote traceback.
    """
    cause = err.cause
    if cause is None or isinstance(cause, TaskError) or not isinstance(cause, Exception):
        return err  # a task's SystemExit or KeyboardInterrupt must not end the caller
    return also_an_instance_of(err, type(cause), getattr(cause, "__dict__", None))


def split(ref: ObjectRef, n: int) -> list[ObjectRef]:
    """``n`` refs to the items of ``ref``'s value (a tuple of n); each fails as ``ref`` does, or as
    its item says (a generator that raised after some items: ``GeneratorRaised``) (driver only)."""
    from muster.tasks.generators import GeneratorRaised

    parts: list[Future] = [Future() for _ in range(n)]

    def fan_out(f: Future) -> None:
        exc = f.exception()
        for i, part in enumerate(parts):
            if exc is not None:
                part.set_exception(exc)
                continue
            item = f.result()[i]
            part.set_exception(item.error) if isinstance(item, GeneratorRaised) else part.set_result(item)

    ref.future().add_done_callback(fan_out)
    return [ObjectRef.new(p) for p in parts]


def put(value: Any) -> ObjectRef:
    """Store a copy of ``value`` and return a ref to it (pass it to many tasks).

    Raises:
        TypeError: ``value`` cannot be serialized.
    """
    if isinstance(value, ObjectRef):
        raise InvalidTypeError(
            f"muster.put({value!r}): the value is already stored behind that ref; pass the ref itself "
            "where it is needed, or put([ref]) to store a list holding it (as Ray asks)."
        )
    if core_context.in_worker():
        return ObjectRef(core_context.send_event(events.Put(value)))
    return store(snapshot(value, "muster.put()"))


def store(value: Any) -> ObjectRef:
    """A ref to ``value`` as it is (no copy): for values no caller can change."""
    fut: Future = Future()
    fut.set_result(value)
    return ObjectRef.new(fut)


def failed(error: BaseException) -> ObjectRef:
    """A ref whose ``get`` raises ``error`` (a task's error as it came back from the worker)."""
    if core_context.in_worker():
        return ObjectRef(core_context.send_event(events.Put(error, failed=True)))
    fut: Future = Future()
    fut.set_exception(error)
    return ObjectRef.new(fut)


def settled(ref: ObjectRef) -> tuple[bool, Any]:
    """Wait for ``ref``: ``(True, value)``, or ``(False, error)`` with the error as its task raised it."""
    if core_context.in_worker():
        ok_value: tuple[bool, Any] = core_context.send_event(events.Get([ref.id], None))[0]
        return ok_value
    fut = ref.future()
    exc = fut.exception()
    return (True, fut.result()) if exc is None else (False, exc)


_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None), ObjectRef)


def snapshot_args(args: tuple, kwargs: dict, what: str) -> tuple[tuple, dict]:
    """``snapshot`` of a call's arguments; free when they are all numbers, strings or refs."""
    if all(type(a) in _IMMUTABLE for a in args) and all(type(v) in _IMMUTABLE for v in kwargs.values()):
        return args, kwargs
    return snapshot((args, kwargs), what)


def snapshot(value: Any, what: str) -> Any:
    """A private copy of ``value``, taken when ``.remote()`` or ``put`` is called.

    As in Ray, a task sees its arguments as they were at the call: changing a
    list or an array afterwards (reusing a buffer in a loop) must not reach a
    task still waiting for a CPU.  Big buffers (arrays, CPU tensors) are
    copied once, out of band; the pickle stream itself stays small.

    Raises:
        TypeError: ``value`` cannot be serialized (it could not be sent either).
    """
    if type(value) in _IMMUTABLE or (type(value) in (tuple, dict) and not value):
        return value
    try:
        body, buffers = serialization.dumps(value, out_of_band_min=0)
    except Exception as exc:
        raise InvalidTypeError(f"{what}: could not serialize {type(value).__name__} ({type(exc).__name__}: {exc}); "
                        "pass plain data, arrays, tensors or picklable objects, or teach muster the class with "
                        "muster.util.register_serializer(cls, serializer=..., deserializer=...).") from exc
    return pickle.loads(body, buffers=[_copy(b) for b in buffers])


def _copy(buf: pickle.PickleBuffer) -> Any:
    """Copy one buffer; a big one goes into shared memory, so sending it later copies nothing."""
    return serialization.copy_of(buf.raw())


_warned_blocking = False


def _warn_if_blocking_an_event_loop() -> None:
    """Warn once per process, as Ray does, when ``get`` blocks an async actor's event loop: no other call
    of the actor runs until it returns, and one it waits for on the same actor never starts."""
    global _warned_blocking
    from muster.tasks import worker_side

    if _warned_blocking or not worker_side.in_async_actor():
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # a thread of its own (a sync method, a thread the method started): nothing blocked
        return
    _warned_blocking = True
    warnings.warn("Using a blocking muster.get inside an async actor method blocks its event loop: no other call "
                  "of the actor runs until it returns. Use `await ref` (or `await asyncio.gather(*refs)`) "
                  "instead, which lets the loop run meanwhile.", RuntimeWarning, stacklevel=3)


def get(refs: ObjectRef | Sequence[ObjectRef], *, timeout: float | None = None) -> Any:
    """Wait for one ref or a list of refs and return the value(s). An ``ObjectRefGenerator`` is returned as it
    is, as in Ray 2.60: iterate it for its refs.

    Raises:
        the task's own exception type (also a ``TaskError`` carrying the remote traceback);
        WorkerCrashedError / ActorDiedError when the process running it died;
        GetTimeoutError when ``timeout`` passes first.
    """
    if timeout == -1 and not isinstance(timeout, bool):
        timeout = None  # Ray's get reads -1 as "no timeout" (its wait refuses it)
    timeout = checked_timeout("muster.get", timeout)
    single = isinstance(refs, ObjectRef)
    items: list[Any] = [refs]
    if not single:
        from muster.tasks.generators import ObjectRefGenerator  # (it imports this module)

        if isinstance(refs, ObjectRefGenerator):  # handed back untouched (no item taken), as Ray 2.60 does
            return refs
        try:
            items = list(refs)  # type: ignore[arg-type]
        except TypeError:  # not iterable: the check below says what get() takes
            pass
    for r in items:
        if not isinstance(r, ObjectRef):
            # a Serve DeploymentResponse (Ray 2.60 refuses it in ray.get too; older Serve docs still call it so)
            fix = ("take its value with response.result() (or `await response`), or a ref with "
                   "response._to_object_ref_sync()" if hasattr(r, "_to_object_ref_sync") else
                   "call .remote() to get a ref")
            raise InvalidTypeError(
                f"muster.get() takes an ObjectRef or a list of them, got {type(r).__name__}; {fix}."
            )
    if core_context.in_worker():
        _warn_if_blocking_an_event_loop()
        ok_values = core_context.send_event(events.Get([r.id for r in items], timeout))
        values = []
        for ok, value in ok_values:
            if not ok:
                raise_remote(value)
            values.append(value)
        return values[0] if single else values
    futures = [r.future() for r in items]
    failed, pending = settle(futures, timeout)
    if failed is not None:
        raise_remote(failed.exception() or cf.CancelledError())
    if pending:
        raise GetTimeoutError(f"muster.get timed out after {timeout} s waiting for {items[pending[0]]!r}.")
    values = [handed_out(f.result()) for f in futures]
    return values[0] if single else values


def handed_out(value: Any) -> Any:
    """What the driver's ``get`` hands out of a stored value, as Ray's ``get`` does: its numpy arrays as read-only
    views (no copy: ``arr[0] = 1`` raises "assignment destination is read-only"; ``arr.copy()`` is the caller's
    to change), its lists, tuples and dicts new ones. The stored value is the driver's own object (a ``put``'s copy
    or a task's result, never the caller's), so changing what one ``get`` returned would change what every later
    ``get``, and every task the ref goes to, sees."""
    kind = type(value)
    if kind is list:
        return [handed_out(v) for v in value]
    if kind is tuple:
        return tuple(handed_out(v) for v in value)
    if kind is dict:
        return {k: handed_out(v) for k, v in value.items()}
    if kind.__name__ == "ndarray" and kind.__module__ == "numpy" and value.flags.writeable:
        view = value.view()  # the stored array stays writable: a task the ref goes to gets a writable copy
        view.flags.writeable = False
        return view
    return value


def wait(
    refs: Sequence[ObjectRef], *, num_returns: int = 1, timeout: float | None = None, fetch_local: bool = True
) -> tuple[list[ObjectRef], list[ObjectRef]]:
    """Return ``(ready, not_ready)`` once ``num_returns`` refs are done or ``timeout`` passes.

    Both lists keep the input order. ``fetch_local`` (Ray's) changes nothing here: a value is
    in this machine's memory once its task is done.
    """
    if not isinstance(refs, (list, tuple)):  # a lone ref, or a set whose order would be lost
        raise InvalidTypeError(
            f"muster.wait({refs!r}): pass a list of ObjectRefs, e.g. muster.wait([ref]) for a single one."
        )
    timeout = checked_timeout("muster.wait", timeout)
    refs = list(refs)
    if not refs:
        return [], []  # as Ray: nothing to wait for
    if not 1 <= num_returns <= len(refs):
        raise InvalidArgumentError(
            f"muster.wait(num_returns={num_returns}): use a number from 1 to len(refs)={len(refs)}."
        )
    keys = [_waited(r) for r in refs]  # a generator is waited on through the ref of its task
    if len({k.id for k in keys}) != len(keys):
        raise InvalidArgumentError(
            f"muster.wait({refs!r}): a ref appears more than once; pass each once (as Ray requires)."
        )
    if core_context.in_worker():
        done_ids = set(
            core_context.send_event(events.Wait([k.id for k in keys], num_returns, timeout))
        )
    else:
        done_ids = _wait_local(keys, num_returns, timeout)
    ready = [r for r, k in zip(refs, keys) if k.id in done_ids][: max(num_returns, 0)] if num_returns else []
    taken = {id(r) for r in ready}
    return ready, [r for r in refs if id(r) not in taken]


def _waited(item: Any) -> ObjectRef:
    """What ``wait`` watches for ``item``: a ref itself; for an ``ObjectRefGenerator``, as in Ray, a
    ref ready once its next item is here (or it ended), or, for a generator whose items come
    together, its task's ref."""
    if isinstance(item, ObjectRef):
        return item
    next_ready = getattr(item, "next_ready_ref", None)
    if next_ready is not None and (ref := next_ready()) is not None:
        return ref
    completed = getattr(item, "completed", None)
    if completed is not None:
        source = completed()
        if isinstance(source, ObjectRef):
            return source
        done: Future = Future()  # no task behind it: its items are here already
        done.set_result(None)
        return ObjectRef.new(done)
    raise InvalidTypeError(f"muster.wait() takes ObjectRefs (or generators of them), got {type(item).__name__}.")


def settle(futures: list[cf.Future], timeout: float | None) -> tuple[cf.Future | None, list[int]]:
    """Wait until every future is done, or one has failed, or ``timeout`` passes (Ray's ``get`` raises
    the first error at once, without waiting for the rest). Returns the failed future (the first of
    the list that failed) or None, and the positions of those still pending."""
    cf.wait(futures, timeout, return_when=cf.FIRST_EXCEPTION)
    failed = next((f for f in futures if f.done() and f.exception() is not None), None)
    return failed, [i for i, f in enumerate(futures) if not f.done()]


def _wait_local(refs: Iterable[ObjectRef], num_returns: int, timeout: float | None) -> set[int]:
    futures = {r.future(): r.id for r in refs}
    deadline = None if timeout is None else time.monotonic() + timeout
    done = {f for f in futures if f.done()}
    while len(done) < num_returns:
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            break
        newly, _ = cf.wait([f for f in futures if f not in done], remaining, return_when=cf.FIRST_COMPLETED)
        if not newly:
            break
        done |= newly
    return {futures[f] for f in done}
