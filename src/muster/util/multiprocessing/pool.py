"""``Pool``: Python's ``multiprocessing.Pool`` on muster actors (Ray's ``ray.util.multiprocessing.Pool``).

Each pool process is an actor (``num_cpus=0`` unless ``ray_remote_args`` says otherwise) that runs batches
of calls of the user's function. The maps cut their input into batches and hand them round-robin to the
actors; an actor runs its batches one at a time, in the order sent.
"""

from __future__ import annotations

import itertools
import logging
import os
import traceback
from typing import Any, Callable, Iterable, Iterator

from muster import cluster_resources
from muster.core import context as core_context
from muster.core import settings
from muster.core.api import init, is_initialized
from muster.exceptions import InvalidArgumentError, InvalidTypeError, MusterError
from muster.tasks import get, kill, remote, wait
from muster.tasks.objects import ObjectRef
from muster.util.helpers import log_once
from muster.util.multiprocessing.results import AsyncResult, Failed, IMapIterator

logger = logging.getLogger(__name__)

Call = tuple[Any, Any]  # (args, kwargs) of one call of the user's function


class _PoolProcess:
    """One process of a pool (an actor): runs the initializer once, then batches of calls."""

    def __init__(self, initializer: Callable[..., Any] | None, initargs: Iterable[Any] | None):
        if initializer is not None:
            initializer(*(initargs or ()))

    def ping(self) -> None:
        """Answers once the initializer ran."""

    def stop(self) -> None:
        """End this process on purpose, after the calls sent before (Ray's ``__ray_terminate__``, which a
        handle inside a task does not offer)."""
        from muster.actor import exit_actor

        exit_actor()

    def run_batch(self, func: Callable[..., Any], batch: list[Call]) -> list[Any]:
        results: list[Any] = []
        for args, kwargs in batch:
            try:
                results.append(func(*(args or ()), **(kwargs or {})))
            except Exception as exc:  # noqa: BLE001 - handed back in the call's place, raised where it is asked for
                where = f"in a muster.util.multiprocessing.Pool process (pid {os.getpid()}):\n"
                results.append(Failed(exc, where + "".join(traceback.format_exception(exc))))
        return results


def _positive_int(value: Any, call: str, name: str, fix: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"{call}({name}={value!r}): pass an int, {fix}.")
    if value < 1:
        raise InvalidArgumentError(f"{call}({name}={value!r}): pass 1 or more, {fix}.")
    return value


def _batches(iterable: Iterable[Any], size: int, star: bool) -> Iterator[list[Call]]:
    items = iter(iterable)
    while chunk := list(itertools.islice(items, size)):
        yield [(item if star else (item,), None) for item in chunk]


class Pool:
    """A pool of actor processes that runs a function over many inputs in parallel.

    Args:
        processes: how many processes (actors); default: the CPUs muster's engine has. The engine is
            started if it is not yet, with that many CPUs.
        initializer: called as ``initializer(*initargs)`` in each process as it starts.
        initargs: the initializer's arguments.
        maxtasksperchild: batches a process runs before it is replaced by a fresh one (default: no limit).
        context: accepted as ``multiprocessing.Pool`` takes it, and ignored with a warning (as Ray does):
            muster starts the processes.
        ray_address: where to start the engine if it is not running (``muster.init(address=...)``); unused
            once it runs. ``MUSTER_ADDRESS``/``RAY_ADDRESS`` are read when it is not given.
        ray_remote_args: actor options for the processes (``num_cpus``, ``resources``, ``runtime_env``...),
            as ``muster.remote`` takes them.

    Raises:
        InvalidArgumentError: ``processes`` below 1 or above the engine's CPUs.
        InvalidTypeError: an argument of the wrong type.
        ActorDiedError: the initializer raised in a process.
    """

    def __init__(self, processes: int | None = None, initializer: Callable[..., Any] | None = None,
                 initargs: Iterable[Any] | None = None, maxtasksperchild: int | None = None, context: Any = None,
                 ray_address: str | None = None, ray_remote_args: dict[str, Any] | None = None):
        if processes is not None:
            _positive_int(processes, "Pool", "processes", "or None for every CPU")
        if initializer is not None and not callable(initializer):
            raise InvalidTypeError(f"Pool(initializer={initializer!r}): pass a function (or None).")
        if maxtasksperchild:
            _positive_int(maxtasksperchild, "Pool", "maxtasksperchild", "or None for no limit")
        if ray_remote_args is not None and not isinstance(ray_remote_args, dict):
            raise InvalidTypeError(f"Pool(ray_remote_args={ray_remote_args!r}): pass a dict of actor options, "
                                   "e.g. {'num_cpus': 1}.")
        if context and log_once("muster.util.multiprocessing.Pool.context"):
            logger.warning("Pool(context=%r) is ignored: muster starts the pool's processes (as Ray does); "
                           "drop the argument.", context)
        self._closed = False
        self._max_batches = maxtasksperchild or 0
        self._initializer, self._initargs = initializer, initargs
        self._stopping: list[tuple[Any, ObjectRef]] = []  # (actor, ref of its stop())
        self._last = 0  # the process apply_async used last
        self._actor_class = remote(**{"num_cpus": 0, **(ray_remote_args or {})})(_PoolProcess)
        count = self._start_engine(processes, ray_address)
        self._processes: list[tuple[Any, int]] = []  # (actor, batches sent to it)
        try:
            for _ in range(count):
                self._processes.append((self._new_process(), 0))
            get([actor.ping.remote() for actor, _ in self._processes])
        except BaseException:
            self.terminate()
            raise

    @staticmethod
    def _start_engine(processes: int | None, ray_address: str | None) -> int:
        if not is_initialized() and not core_context.in_worker():  # a pool made in a task uses the driver's engine
            address = ray_address if ray_address is not None else settings.cluster_address()
            init(address=ray_address, num_cpus=processes if address in (None, "", "local") else None)
        cpus = int(cluster_resources().get("CPU", 0))
        if processes is None:
            processes = cpus
        if not 1 <= processes <= cpus:
            raise InvalidArgumentError(
                f"Pool(processes={processes}): muster's engine has {cpus} CPUs; ask for 1 to {cpus} processes, or "
                f"start the engine with more before making the pool: muster.init(num_cpus={max(processes, 1)}).")
        return processes

    def _new_process(self) -> Any:
        return self._actor_class.remote(self._initializer, self._initargs)

    def _send(self, index: int, func: Callable[..., Any], batch: list[Call]) -> ObjectRef:
        actor, sent = self._processes[index]
        ref = actor.run_batch.remote(func, batch)
        sent += 1
        if self._max_batches and sent >= self._max_batches:  # it ends after this batch; a fresh one takes over
            self._retire(actor)
            actor, sent = self._new_process(), 0
        self._processes[index] = (actor, sent)
        return ref

    def _retire(self, actor: Any) -> None:
        refs = [ref for _, ref in self._stopping]
        _, still = wait(refs, num_returns=len(refs), timeout=0) if refs else ([], [])
        self._stopping = [pair for pair in self._stopping if any(pair[1] is ref for ref in still)]
        self._stopping.append((actor, actor.stop.remote()))  # after the calls sent before it

    def _check(self, what: str, func: Callable[..., Any]) -> None:
        if self._closed:
            raise InvalidArgumentError(f"Pool.{what}(): the pool is closed (Pool not running); make a new Pool "
                                       "for more work.")
        if not callable(func):
            raise InvalidTypeError(f"Pool.{what}(func={func!r}): func must be callable, e.g. a function.")

    # -- one call ------------------------------------------------------------------------------------------
    def apply(self, func: Callable[..., Any], args: Iterable[Any] | None = None,
              kwargs: dict[str, Any] | None = None) -> Any:
        """``func(*args, **kwargs)`` in one of the processes; its value (or the exception it raised)."""
        return self.apply_async(func, args, kwargs).get()

    def apply_async(self, func: Callable[..., Any], args: Iterable[Any] | None = None,
                    kwargs: dict[str, Any] | None = None, callback: Callable[[Any], Any] | None = None,
                    error_callback: Callable[[BaseException], Any] | None = None) -> AsyncResult:
        """Start ``func(*args, **kwargs)`` in the next process (round-robin); ``callback`` gets its value,
        ``error_callback`` the exception it raised (each on a thread of the result)."""
        self._check("apply_async", func)
        self._last = (self._last + 1) % len(self._processes)
        ref = self._send(self._last, func, [(args, kwargs)])
        return AsyncResult([ref], callback, error_callback, single_result=True)

    # -- maps ---------------------------------------------------------------------------------------------
    def map(self, func: Callable[..., Any], iterable: Iterable[Any], chunksize: int | None = None) -> list[Any]:
        """``[func(x) for x in iterable]``, computed in batches of ``chunksize`` (default: about four
        batches per process) spread over the processes.

        Raises:
            the first exception (in input order) that a call raised, as its own type.
        """
        return self._map_async("map", func, iterable, chunksize, False, None, None).get()

    def map_async(self, func: Callable[..., Any], iterable: Iterable[Any], chunksize: int | None = None,
                  callback: Callable[[list[Any]], Any] | None = None,
                  error_callback: Callable[[BaseException], Any] | None = None) -> AsyncResult:
        """``map`` without waiting: ``callback`` gets the list of results, ``error_callback`` the first
        exception to arrive."""
        return self._map_async("map_async", func, iterable, chunksize, False, callback, error_callback)

    def starmap(self, func: Callable[..., Any], iterable: Iterable[Iterable[Any]],
                chunksize: int | None = None) -> list[Any]:
        """``[func(*args) for args in iterable]``, as ``map`` computes it."""
        return self._map_async("starmap", func, iterable, chunksize, True, None, None).get()

    def starmap_async(self, func: Callable[..., Any], iterable: Iterable[Iterable[Any]],
                      callback: Callable[[list[Any]], Any] | None = None,
                      error_callback: Callable[[BaseException], Any] | None = None, *,
                      chunksize: int | None = None) -> AsyncResult:
        """``starmap`` without waiting (Ray's argument order: ``callback`` third; ``chunksize`` by name)."""
        return self._map_async("starmap_async", func, iterable, chunksize, True, callback, error_callback)

    def _map_async(self, what: str, func: Callable[..., Any], iterable: Iterable[Any], chunksize: int | None,
                   star: bool, callback: Callable[[list[Any]], Any] | None,
                   error_callback: Callable[[BaseException], Any] | None) -> AsyncResult:
        self._check(what, func)
        items = self._as_list(what, iterable)
        size = self._chunksize(what, chunksize, len(items))
        refs = [self._send(i % len(self._processes), func, batch)
                for i, batch in enumerate(_batches(items, size, star))]
        return AsyncResult(refs, callback, error_callback)

    def imap(self, func: Callable[..., Any], iterable: Iterable[Any], chunksize: int | None = 1) -> IMapIterator:
        """Results of ``func(x)`` in input order, as they come: one batch per process in flight, so a long
        (or endless) input is read only as fast as the pool works."""
        return self._imap("imap", func, iterable, chunksize, ordered=True)

    def imap_unordered(self, func: Callable[..., Any], iterable: Iterable[Any],
                       chunksize: int | None = 1) -> IMapIterator:
        """``imap``, with the results in the order they finish."""
        return self._imap("imap_unordered", func, iterable, chunksize, ordered=False)

    def _imap(self, what: str, func: Callable[..., Any], iterable: Iterable[Any], chunksize: int | None,
              ordered: bool) -> IMapIterator:
        self._check(what, func)
        if not hasattr(iterable, "__iter__") and not hasattr(iterable, "__getitem__"):
            raise InvalidTypeError(f"Pool.{what}(iterable={iterable!r}): pass an iterable, e.g. a list or a "
                                   "generator.")
        sized = hasattr(iterable, "__len__") and not isinstance(iterable, Iterator)
        size = self._chunksize(what, chunksize, len(iterable) if sized else 0)  # type: ignore[arg-type]
        counter = itertools.count()
        return IMapIterator(lambda batch: self._send(next(counter) % len(self._processes), func, batch),
                            _batches(iterable, size, False), len(self._processes), ordered)

    @staticmethod
    def _as_list(what: str, iterable: Iterable[Any]) -> list[Any]:
        try:
            return list(iterable)
        except TypeError:
            raise InvalidTypeError(f"Pool.{what}(iterable={iterable!r}): pass an iterable, e.g. a list or a "
                                   "generator.") from None

    def _chunksize(self, what: str, chunksize: int | None, length: int) -> int:
        if chunksize is None:  # about four batches per process
            return max(1, -(-length // (len(self._processes) * 4)))
        return _positive_int(chunksize, f"Pool.{what}", "chunksize", "or None to let the pool choose")

    # -- ending ------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Take no more work; the processes end once the work already sent is done."""
        if self._closed:
            return
        self._closed = True
        for actor, _ in self._processes:
            self._retire(actor)

    def terminate(self) -> None:
        """Take no more work and end the processes now; results not yet in raise ``ActorDiedError``."""
        self.close()
        for actor in [a for a, _ in self._processes] + [a for a, _ in self._stopping]:
            try:
                kill(actor)
            except MusterError:  # noqa: PERF203 - already gone
                pass

    def join(self) -> None:
        """Wait for the processes of a closed pool to end (after their work, if it was ``close``d).

        Raises:
            InvalidArgumentError: the pool is still running: call ``close()`` or ``terminate()`` first.
        """
        if not self._closed:
            raise InvalidArgumentError("Pool.join(): the pool is still running; call close() (the work sent "
                                       "finishes) or terminate() (it stops) first, then join().")
        refs = [ref for _, ref in self._stopping]
        if refs:
            wait(refs, num_returns=len(refs))
        self._stopping = []

    def __enter__(self) -> "Pool":
        if self._closed:
            raise InvalidArgumentError("Pool: `with pool:` on a closed pool (Pool not running); make a new Pool.")
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.terminate()
