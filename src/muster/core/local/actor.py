"""The driver's handle on one local worker process: calls out, results and events in.

One reader thread per actor reads its link in order: results complete
futures, events go to the handler (whose reply, or future, goes back), and
EOF means the process died -- after every event it sent was handled.
"""

from __future__ import annotations

import itertools
import sys
import threading
from concurrent.futures import Future
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from muster.core.local import wire
from muster.core.local.slots import Allocation
from muster.core.runtime import DeathHandler, EventHandler, RuntimeActor, unserved
from muster.exceptions import ActorDiedError, MusterError

if TYPE_CHECKING:
    from muster.core.local.engine import LocalRuntime


class LocalActor(RuntimeActor):
    """Driver-side handle to one worker process."""

    def __init__(self, runtime: "LocalRuntime", worker_id: int, label: str, allocation: Allocation):
        self._runtime, self.worker_id, self.label, self.allocation = runtime, worker_id, label, allocation
        self.pid: int | None = None
        self.node_id = runtime.node_id
        self.exitcode: int | None = None
        self._conn: Connection | None = None
        self._send_lock = threading.Lock()
        self._ids = itertools.count()
        self._pending: dict[int, Future] = {}
        self._alive = True
        self._holds_slots = True  # False while idle in the task pool
        self.waiting = 0  # how many of its threads wait on other work (``LocalRuntime.blocked``) ...
        self.lent: dict[str, float] = {}  # ... and what of its allocation they lent out meanwhile
        self.lending = threading.Lock()
        self._expected_exit = False
        self.retiring = False  # it ends after its answer (Ray's max_calls): never handed out again
        self.death_reason = ""  # why the engine killed it, when it did on purpose (its placement group went)
        self._on_event: EventHandler | None = None
        self._on_death: DeathHandler | None = None
        self.connected = threading.Event()
        self.exited = threading.Event()
        self._death_lock = threading.Lock()

    # -- RuntimeActor -------------------------------------------------------
    @property
    def gpu_ids(self) -> list[int]:
        return list(self.allocation.gpu_ids)

    def is_alive(self) -> bool:
        return self._alive

    def set_handlers(self, on_event: EventHandler | None, on_death: DeathHandler | None) -> None:
        self._on_event, self._on_death = on_event, on_death

    def call(self, method: str, *args: Any, **kwargs: Any) -> Future:
        fut: Future = Future()
        with self._send_lock:
            if not self._alive or self._conn is None:
                fut.set_exception(self._death_error())
                return fut
            call_id = next(self._ids)
            self._pending[call_id] = fut
            try:
                wire.send(self._conn, ("call", call_id, method, args, kwargs))
            except (OSError, EOFError):
                self._pending.pop(call_id, None)
                fut.set_exception(self._death_error())
            except Exception as exc:  # arguments that do not pickle
                self._pending.pop(call_id, None)
                fut.set_exception(
                    MusterError(f"Could not send the arguments of {method}() to {self.label}: {exc}")
                )
        return fut

    def notify(self, notice: Any) -> bool:
        try:
            self._send(("notice", notice))
        except (OSError, EOFError):  # it is dying: its death says the rest
            return False
        return True

    def __repr__(self) -> str:
        return f"LocalActor({self.label!r}, pid={self.pid}, alive={self._alive})"

    # -- engine internals --------------------------------------------------
    def _send(self, msg: tuple) -> None:
        with self._send_lock:
            if self._conn is not None:
                wire.send(self._conn, msg)

    def _death_error(self) -> ActorDiedError:
        return ActorDiedError(self.label, self.pid, self.exitcode, self.node_id, reason=self.death_reason)

    def _read_forever(self) -> None:
        assert self._conn is not None
        while True:
            try:
                msg = wire.recv(self._conn)
            except (EOFError, OSError):
                break
            except wire.Unreadable as bad:  # its waiter gets the error instead of waiting forever
                self._unreadable(bad)
                continue
            self._dispatch(msg)
            del msg  # while it waits, this reader must not keep the last result alive
        self._died()

    def _dispatch(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == "result":
            if len(msg) > 4 and msg[4]:  # known before the answer's future completes (and the worker is pooled)
                self.retiring = self._expected_exit = True
            if len(msg) > 5 and msg[5]:  # a task's user metrics: counted before its caller has the result
                self._runtime.user_metrics.update(self.worker_id, *msg[5])
            fut = self._pending.pop(msg[1], None)
            if fut is not None:
                (fut.set_result if msg[2] else fut.set_exception)(msg[3])
        elif kind == "event":
            self._handle_event(msg[1], msg[2], msg[3])
        elif kind == "metrics":  # user metrics it recorded (changed series, cumulative)
            self._runtime.user_metrics.update(self.worker_id, *msg[1])

    def _unreadable(self, bad: wire.Unreadable) -> None:
        if bad.kind == "result":
            fut = self._pending.pop(bad.msg_id, None)
            if fut is not None:
                fut.set_exception(MusterError(bad.explain(f"The value {self.label} sent back")))
        elif bad.kind == "event":  # a worker that waits for a reply gets this one; others ignore it
            self._reply(bad.msg_id, False, MusterError(bad.explain(f"A request from {self.label}")))
        else:
            print(f"muster: could not read a message from {self.label}: {bad.error!r}", file=sys.stderr)

    def _handle_event(self, event_id: int, wants_reply: bool, payload: Any) -> None:
        ok, value = True, None
        try:
            value = self._on_event(self, payload) if self._on_event else unserved(self.label, payload)
        except BaseException as exc:  # noqa: BLE001 - the worker gets the error
            ok, value = False, exc
        if not wants_reply:
            return
        if ok and isinstance(value, Future):  # the handler answers later (a get() on pending work)
            value.add_done_callback(lambda f: self._reply(event_id, f.exception() is None,
                                                          f.exception() or f.result()))
            return
        self._reply(event_id, ok, value)

    def _reply(self, event_id: int, ok: bool, value: Any) -> None:
        try:
            self._send(("reply", event_id, ok, value))
        except Exception as exc:  # noqa: BLE001 - e.g. a value that does not pickle
            if ok:
                try:
                    self._send(("reply", event_id, False, MusterError(f"could not send the reply: {exc}")))
                except Exception:
                    pass

    def _died(self) -> None:
        with self._death_lock:
            if not self._alive:
                return
            self._alive = False
        self.exited.wait(0.5)  # the zygote's exit status usually lands within ms
        err = self._death_error()
        with self._send_lock:
            pending, self._pending = self._pending, {}
            if self._conn is not None:
                wire.close(self._conn)
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(err)
        self._runtime._release(self)
        self._runtime.user_metrics.process_ended(self.worker_id)
        if not self._expected_exit and self._on_death is not None:
            self._on_death(self, err)
