"""The local engine's tasks: pooled workers of one resource shape, and the dispatchers that start them.

A task runs in a worker of its exact resource shape that an earlier task left
idle (an idle pooled worker holds no resources), or in one the engine forks
for it. Tasks of one shape and placement-group bundle queue for one
dispatcher thread (``muster-dispatch``) that starts them in submission order
and alone waits for their resources: no thread per queued task.

The pool works under the engine's lock, so a worker's death (the engine drops
it from the pool) and its return to the pool after a task never interleave.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Callable

from muster.core import resources as res
from muster.core.local.reservations import BUNDLE_FIX
from muster.core.local.slots import TASK_FIX, BusyWarning, on_this_node
from muster.core.runtime import BundleRef, EventHandler, removed_error
from muster.exceptions import ActorDiedError, RuntimeNotStartedError, TaskError, WorkerCrashedError

if TYPE_CHECKING:
    from muster.core.local.actor import LocalActor
    from muster.core.local.engine import LocalRuntime


class TaskPool:
    """The task side of one :class:`LocalRuntime`: its idle workers by shape, and one queue per shape and bundle."""

    def __init__(self, runtime: "LocalRuntime"):
        self._runtime = runtime
        self._lock = runtime._lock  # the engine's: see the module docstring
        self._slots, self._reservations = runtime.slots, runtime.reservations
        self.idle: dict[frozenset, list[LocalActor]] = {}  # warm workers by resource shape, holding nothing
        self._queues: dict[tuple[frozenset, BundleRef | None], queue.SimpleQueue] = {}  # by shape, bundle
        self._closed = False

    def submit(
        self, fn: Callable[..., Any], args: tuple, kwargs: dict, resources: dict[str, float],
        on_event: EventHandler | None, label: str, bundle: BundleRef | None,
        on_wait: Callable[[str], None] | None = None,
    ) -> Future:
        """Queue ``fn`` for a pooled worker of the same resource shape (see :meth:`LocalRuntime.submit`)."""
        request = on_this_node(res.normalize({"CPU": 1.0} if resources is None else resources, what="task resources"))
        self._slots.check_feasible(request, 1)
        out: Future = Future()
        key = (frozenset(request.items()), bundle)
        with self._lock:
            if self._closed:
                out.set_exception(RuntimeNotStartedError("This muster runtime was shut down; call muster.init()."))
                return out
            if bundle is not None and not self._reservations.holds(bundle.group):
                out.set_exception(removed_error(bundle.group))
                return out
            q = self._queues.get(key)
            if q is None:
                q = self._queues[key] = queue.SimpleQueue()
                threading.Thread(
                    target=self._dispatch_forever, args=(request, bundle, q), name="muster-dispatch", daemon=True
                ).start()
            q.put((fn, args, kwargs, on_event, label, on_wait, out))  # under the lock: never behind the queue's end
        return out

    def close(self) -> None:
        """The engine shuts down: each dispatcher fails what is still queued, then ends."""
        with self._lock:
            self._closed = True
            for q in self._queues.values():
                q.put(None)

    def drop_group(self, group: str, error: BaseException | None) -> None:
        """Placement group ``group`` was removed: its bundles' dispatchers fail what is queued with ``error``."""
        with self._lock:
            for key in [k for k in self._queues if k[1] is not None and k[1].group == group]:
                self._queues.pop(key).put(error)

    def forget(self, actor: "LocalActor") -> None:
        """``actor`` is gone: never hand it out again. The caller holds the engine's lock."""
        for pool in self.idle.values():
            if actor in pool:
                pool.remove(actor)

    def retire_idle(self) -> int:
        """End the warm task workers that are idle (they hold no resources); return how many."""
        with self._lock:
            idle = [a for pool in self.idle.values() for a in pool]
            self.idle.clear()
        for actor in idle:
            self._runtime._terminate(actor, 0.0)
        return len(idle)

    def _dispatch_forever(self, request: dict[str, float], bundle: BundleRef | None, q: queue.SimpleQueue) -> None:
        warned = False  # a task of this backlog was warned about (BusyWarning): those queued behind it are not
        while True:
            if q.empty():
                warned = False  # the backlog has drained: a wait from here on is a new one
            item = q.get()
            if item is None or isinstance(item, BaseException):  # shut down, or its placement group removed
                break
            warned = self._start_task(request, bundle, *item, warn=not warned) or warned
            del item  # idle, this thread must not keep the last task's arguments and result alive
        error = item if item is not None else RuntimeNotStartedError("muster was shut down before this task started.")
        while not q.empty():  # what never started fails (this thread alone takes from ``q``)
            item = q.get_nowait()
            if isinstance(item, tuple):
                item[-1].set_exception(error)

    def _start_task(
        self, request: dict[str, float], bundle: BundleRef | None, fn: Callable[..., Any], args: tuple,
        kwargs: dict, on_event: EventHandler | None, label: str, on_wait: Callable[[str], None] | None,
        out: Future, warn: bool = True,
    ) -> bool:
        """Start one queued task once its resources are free; True if it was warned about waiting for them (a
        task given no ``on_wait`` gets one :class:`BusyWarning` when ``warn``; in a placement group's bundle, one
        that waits for room in it)."""
        busy = BusyWarning(label, fix=BUNDLE_FIX if bundle else TASK_FIX) if on_wait is None and warn else None
        try:
            actor = self._task_worker(request, label, bundle, on_wait or busy)
            actor._on_event = on_event
            inner = actor.call("__task__", fn, *args, **kwargs)
            inner.add_done_callback(lambda f: self._task_done(actor, request, f, out, label))
        except BaseException as exc:  # noqa: BLE001
            if bundle is not None and not self._reservations.holds(bundle.group):  # its group went as it started
                exc = removed_error(bundle.group)
            out.set_exception(exc)
        return busy is not None and busy.told

    def _task_worker(self, request: dict[str, float], label: str, bundle: BundleRef | None,
                     on_wait: Callable[[str], None] | None = None) -> "LocalActor":
        """Hold ``request`` (``on_wait`` told while other work holds it), then reuse an idle worker of that
        shape (or fork one)."""
        key = frozenset(request.items())
        if "GPU" in request and bundle is None:  # a pooled worker's CUDA_VISIBLE_DEVICES is fixed: reuse on its GPUs
            with self._lock:
                pool = self.idle.setdefault(key, [])
                actor = next((a for a in pool if self._slots.try_acquire_exact(a.allocation)), None)
                if actor is not None:
                    pool.remove(actor)
                    actor._holds_slots = True  # it holds the slots try_acquire_exact just took
            if actor is None:
                (actor,) = self._runtime._launch(1, None, (), {}, request, None, on_wait, None, [label])
        else:
            said = None if on_wait is None else self._runtime.naming_holders(on_wait, request, bundle)
            alloc = self._reservations.take(request, bundle, on_wait=said)
            with self._lock:
                pool = self.idle.setdefault(key, [])
                same_gpus = [a for a in pool if a.allocation.gpu_ids == alloc.gpu_ids]
                actor = same_gpus[-1] if same_gpus else None
                if actor is not None:
                    pool.remove(actor)  # it now holds ``alloc``: a death from here on frees it
                    actor.allocation, actor._holds_slots = alloc, True
            if actor is None:
                (actor,) = self._runtime._launch(
                    1, None, (), {}, request, None, None, None, [label], allocations=[alloc]
                )
            actor.allocation = alloc
        actor.label = label
        return actor

    def _task_done(
        self, actor: "LocalActor", request: dict[str, float], inner: Future, out: Future, label: str
    ) -> None:
        exc = inner.exception()
        with self._lock:
            # A call that failed with ActorDiedError (e.g. the send hit a dead socket) means the worker
            # is gone even if its reader has not seen EOF yet: never hand it out again.
            pooled = (
                not isinstance(exc, ActorDiedError)
                and not actor.retiring  # it exits now: its slots are freed when it is gone
                and actor.is_alive()
                and actor.worker_id in self._runtime._actors
                and actor._holds_slots
            )
            if pooled:
                actor._holds_slots = False
                self.idle.setdefault(frozenset(request.items()), []).append(actor)
        if pooled:
            actor.allocation.give_back()
        if exc is None:
            out.set_result(inner.result())
        elif isinstance(exc, ActorDiedError):
            out.set_exception(WorkerCrashedError(label, exc.pid, exc.exitcode, exc.host, reason=actor.death_reason))
        elif isinstance(exc, TaskError) and exc.label != label:  # the pooled worker was forked for another task
            out.set_exception(exc.relabelled(label))
        else:
            out.set_exception(exc)
