"""Driver-side handles on the Ray engine: one mailbox per sender, actors and tasks.

A sender's mailbox is a queue with one thread: events run the handler in
the order they arrived, and the sender's end (a death, a task's result)
is queued behind them, so it is handled last.
"""

from __future__ import annotations

import itertools
import queue
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Callable

import ray

from muster.core.ray.errors import from_ray
from muster.core.ray.worker import LogLines, UserMetrics, metrics_process, pack, unpack
from muster.core.runtime import KILLED_BY_MUSTER, DeathHandler, EventHandler, RuntimeActor, unserved
from muster.exceptions import ActorDiedError, MusterError, RuntimeNotStartedError

if TYPE_CHECKING:
    from muster.core.ray.engine import RayRuntime

_START_TIMEOUT_S = 600.0  # an actor waits this long for a node to take it


def ray_options(request: dict[str, float]) -> dict[str, Any]:
    """muster's resource dict as Ray's ``num_cpus`` / ``num_gpus`` / ``resources`` options."""
    custom = {k: v for k, v in request.items() if k not in ("CPU", "GPU")}
    out: dict[str, Any] = {"num_cpus": request.get("CPU", 0.0), "num_gpus": request.get("GPU", 0.0)}
    if custom:
        out["resources"] = custom
    return out


class RaySender(RuntimeActor):
    """Anything whose code may send events: a Ray actor or a running Ray task."""

    def __init__(self, runtime: "RayRuntime", key: str, label: str, on_event: EventHandler | None):
        self._runtime, self.key, self.label = runtime, key, label
        self._on_event = on_event
        self._on_death: DeathHandler | None = None
        self.pid: int | None = None
        self.node_id = ""
        self.node_ip = ""
        self._gpu_ids: list[int] = []
        self.mailbox: "queue.SimpleQueue[tuple]" = queue.SimpleQueue()
        threading.Thread(target=self._serve_mailbox, name=f"muster-mailbox-{key}", daemon=True).start()

    @property
    def gpu_ids(self) -> list[int]:
        return list(self._gpu_ids)

    def set_handlers(self, on_event: EventHandler | None, on_death: DeathHandler | None) -> None:
        self._on_event, self._on_death = on_event, on_death

    def _serve_mailbox(self) -> None:
        while True:
            item = self.mailbox.get()
            if item[0] == "event":
                self._handle_event(item[1], item[2], item[3])
            else:  # ("end", fn): the sender is done; nothing follows (no fn: the engine is shutting down)
                if item[1] is not None:
                    item[1]()
                return
            del item

    def _handle_event(self, event_id: int, wants_reply: bool, data: bytes) -> None:
        ok, value = True, None
        try:
            payload = unpack(data)
            if isinstance(payload, LogLines):  # the worker's output: for the log sinks only
                self._runtime.emit_logs(self.label, self.pid, list(payload.lines))
                return
            if isinstance(payload, UserMetrics):  # for the driver's table only
                self._runtime.user_metrics.update(payload.process, *payload.batch)
                if self._runtime.metrics_processes is not None:  # when Ray reports it dead, its gauges go
                    self._runtime.metrics_processes.track(payload.process, payload.worker_id)
                return
            value = self._on_event(self, payload) if self._on_event else unserved(self.label, payload)
        except BaseException as exc:  # noqa: BLE001 - the worker gets the error
            ok, value = False, exc
        if not wants_reply:
            return
        if ok and isinstance(value, Future):  # answered later (a get() on pending work)
            value.add_done_callback(
                lambda f: self._runtime.answer(self.key, event_id, f.exception() is None, f.exception() or f.result())
            )
            return
        self._runtime.answer(self.key, event_id, ok, value)

    def end(self, fn: Callable[[], None]) -> None:
        self.mailbox.put(("end", fn))

    def stop(self) -> None:
        """End the mailbox's thread after what it holds now (the engine is shutting down)."""
        self.mailbox.put(("end", None))


class RayActor(RaySender):
    """One Ray actor hosting one object; calls run in order (its default concurrency group)."""

    def __init__(self, runtime: "RayRuntime", key: str, label: str, ray_actor: Any, on_event: EventHandler | None):
        super().__init__(runtime, key, label, on_event)
        self.ray_actor = ray_actor
        self.gang: str | None = None
        self._ids = itertools.count()
        self._pending: dict[int, Future] = {}
        self._lock = threading.Lock()
        self._alive = True
        self._dying = False
        self._expected_exit = False
        self._death: ActorDiedError | None = None

    def wait_started(self) -> None:
        """Block until Ray has placed and started the actor; record where it runs."""
        try:
            with self._runtime.gate:
                meta = ray.get(self.ray_actor.meta.remote(), timeout=_START_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            raise MusterError(
                f"{self.label} was not started by the Ray cluster within {_START_TIMEOUT_S:.0f} s; "
                "`ray status` shows what the cluster is short of."
            ) from None
        except ray.exceptions.RayActorError as exc:
            raise self._died_error(str(exc)) from None
        except ray.exceptions.RayError as exc:  # e.g. its node went away, or Ray cannot place it
            raise from_ray(exc, self.label) from None
        self.pid, self.node_id, self.node_ip = meta["pid"], meta["node_id"], meta["ip"]
        self._gpu_ids = meta["gpu_ids"]
        with self._runtime.gate:
            watch = self.ray_actor.watch.remote()
        watch.future().add_done_callback(lambda f: self._runtime.in_background(lambda: self._died(f.exception())))

    def is_alive(self) -> bool:
        return self._alive

    def call(self, method: str, *args: Any, **kwargs: Any) -> Future:
        fut: Future = Future()
        try:
            data = pack((args, kwargs))
        except Exception as exc:  # noqa: BLE001 - arguments that do not pickle
            fut.set_exception(MusterError(f"Could not send the arguments of {method}() to {self.label}: {exc}"))
            return fut
        with self._lock:
            if self._dying or not self._alive:
                fut.set_exception(self._death or self._died_error("it is no longer running"))
                return fut
            call_id = next(self._ids)
            try:
                with self._runtime.gate:
                    ref = self.ray_actor.call.remote(method, data)
            except RuntimeNotStartedError as exc:  # muster was shut down meanwhile
                fut.set_exception(exc)
                return fut
            self._pending[call_id] = fut
        ref.future().add_done_callback(lambda f: self._call_done(call_id, f))
        return fut

    def _call_done(self, call_id: int, raw: Future) -> None:
        exc = raw.exception()
        if isinstance(exc, ray.exceptions.RayActorError):
            self._runtime.in_background(lambda: self._died(exc))  # the death path fails this call
            return
        with self._lock:
            fut = self._pending.pop(call_id, None)
        if fut is None:
            return
        if exc is not None:
            fut.set_exception(from_ray(exc, f"{self.label}'s call"))
            return
        ok, value = unpack(raw.result())
        (fut.set_result if ok else fut.set_exception)(value)

    def _died_error(self, why: str) -> ActorDiedError:
        where = f"node {self.node_id[:12]} ({self.node_ip})" if self.node_id else ""
        reason = KILLED_BY_MUSTER if self._expected_exit else f"its Ray actor died: {why}"
        return ActorDiedError(self.label, self.pid, None, where, reason=reason)

    def _died(self, exc: BaseException | None) -> None:
        """The watch call ended: the actor is gone. Report it after every event it sent."""
        with self._lock:
            if self._dying:
                return
            self._dying = True
        lines = [ln.strip() for ln in str(exc or "").splitlines() if ln.strip()]
        self._death = self._died_error(" ".join(lines[:2])[:300] or "unknown cause")
        self._runtime.flush()
        self.end(self._finish_death)

    def _finish_death(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
            self._alive = False
        err = self._death or self._died_error("unknown cause")
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(err)
        self._runtime.forget(self)
        if self.pid is not None:  # its counters and histograms stay counted; its gauges go
            self._runtime.user_metrics.process_ended(metrics_process(self.node_id, self.pid))
        if not self._expected_exit and self._on_death is not None:
            self._on_death(self, err)

    def __repr__(self) -> str:
        return f"RayActor({self.label!r}, pid={self.pid}, node={self.node_id[:8]}, alive={self._alive})"


class RayTask(RaySender):
    """A running Ray task, seen as a sender (its events reach ``on_event`` through this)."""

    def __init__(self, runtime: "RayRuntime", key: str, label: str, on_event: EventHandler | None):
        super().__init__(runtime, key, label, on_event)
        self._done = False
        self.ref: ray.ObjectRef | None = None  # Ray's ref of the task's run, for a forced cancel

    def is_alive(self) -> bool:
        return not self._done

    def call(self, method: str, *args: Any, **kwargs: Any) -> Future:
        raise MusterError(f"{self.label} is a task; it takes no calls.")

    def finish(self, raw: Future, out: Future) -> None:
        """The Ray task ended: once its events are handled, settle ``out``."""
        ok, value, sent = self._runtime.task_result(self, raw)
        if sent:
            self._runtime.flush(self.key, sent)

        def settle() -> None:
            self._done = True
            self._runtime.forget(self)
            (out.set_result if ok else out.set_exception)(value)

        self.end(settle)
