"""The loop a forked worker process runs: host one object, serve its calls in order.

A daemon thread reads the driver's socket.  When the driver goes away (EOF)
the process exits at once, even if its main thread is stuck in a collective:
that is what makes orphans impossible.
"""

from __future__ import annotations

import itertools
import os
import queue
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any

from muster.core import context, setup_hook
from muster.core.local import wire
from muster.exceptions import MusterError


class _Channel:
    """Worker side of one driver connection (also the ``context`` event channel)."""

    engine = "local"
    delivers_notices = True  # what the driver's ``notify`` sends reaches context.on_notice's handler

    def __init__(self, conn: Connection, label: str, host: str):
        self.conn, self.label, self.host = conn, label, host
        self.pid = os.getpid()
        self.calls: queue.Queue[tuple] = queue.Queue()
        self._send_lock = threading.Lock()
        self._ids = itertools.count()
        self._waiting: dict[int, list[Any]] = {}

    def send(self, msg: tuple) -> None:
        with self._send_lock:
            wire.send(self.conn, msg)

    def read_forever(self) -> None:
        while True:
            try:
                msg = wire.recv(self.conn)
            except (EOFError, OSError):
                _exit_now(0)  # the driver is gone: so are we
            except wire.Unreadable as bad:
                msg = self._unreadable(bad)
                if msg is None:
                    continue
            if msg[0] == "reply":
                slot = self._waiting.get(msg[1])
                if slot is not None:
                    slot[1:] = [msg[2], msg[3]]
                    slot[0].set()
            elif msg[0] == "notice":  # beside the running call, on this thread
                context.deliver_notice(msg[1])
            else:
                self.calls.put(msg)

    def send_metrics(self, batch: context.MetricsBatch) -> None:
        try:
            self.send(("metrics", batch))
        except (OSError, EOFError):  # the driver is gone: nobody to tell
            pass

    def _unreadable(self, bad: wire.Unreadable) -> tuple | None:
        """Turn a message that will not unpickle into the answer its waiter needs (or drop it)."""
        if bad.kind == "call":  # the serve loop raises it as that call's error
            err = MusterError(bad.explain(f"The arguments the driver sent to {self.label}"))
            return ("unreadable", bad.msg_id, err)
        if bad.kind == "reply":
            return ("reply", bad.msg_id, False, MusterError(bad.explain("The driver's answer")))
        print(f"muster: {self.label} could not read a message from the driver: {bad.error!r}", file=sys.stderr)
        return None

    def send_event(self, payload: Any, wait: bool, timeout: float | None) -> Any:
        event_id = next(self._ids)
        if not wait:
            self.send(("event", event_id, False, payload))
            return None
        slot: list[Any] = [threading.Event(), None, None]
        self._waiting[event_id] = slot
        try:
            self.send(("event", event_id, True, payload))
            if not slot[0].wait(timeout):
                raise TimeoutError(f"the driver did not answer within {timeout} s")
        finally:
            self._waiting.pop(event_id, None)
        ok, value = slot[1], slot[2]
        if not ok:
            raise value
        return value


def _exit_now(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


def _reseed_library_rngs() -> None:
    """Give this freshly forked worker its own numpy and torch random streams.

    Python's ``random`` reseeds itself at fork; numpy's and torch's global
    generators do not, so without this every worker forked from the zygote
    would draw the same "random" numbers (DDP ranks generating identical data,
    retries replaying the same draw).  Seeds come from the OS, distinct per
    process; code that wants reproducible runs seeds explicitly afterwards
    (``muster.train.torch.enable_reproducibility(seed)``, ``np.random.seed``).
    """
    seed = int.from_bytes(os.urandom(4), "little")
    np_random = sys.modules.get("numpy.random")
    if np_random is not None:  # not imported yet (numpy imports it lazily): it seeds itself from the OS on import
        np_random.seed(seed)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.random.default_generator.manual_seed(seed)


def serve(conn: Connection, label: str, host: str) -> None:
    """Run calls from the driver until told to exit. Never returns."""
    _reseed_library_rngs()
    if not setup_hook.run_in_worker():  # Ray's worker_process_setup_hook, before the first call
        _exit_now(1)
    channel = _Channel(conn, label, host)
    context.install_channel(channel)
    threading.Thread(target=channel.read_forever, name="muster-driver-link", daemon=True).start()
    obj: Any = None
    while True:
        msg = channel.calls.get()
        if msg[0] == "exit":
            context.flush()
            _exit_now(0)
        if msg[0] == "unreadable":
            msg = ("call", msg[1], "__unreadable__", (msg[2],), {})
        _, call_id, method, args, kwargs = msg
        value: Any = None
        fn: Any = None
        try:
            if method == "__unreadable__":
                raise args[0]
            if method == "__init__":
                cls = args[0]
                obj, value = cls(*args[1:], **kwargs), None
            elif method == "__task__":
                fn = args[0]
                value = fn(*args[1:], **kwargs)
            else:
                value = getattr(obj, method)(*args, **kwargs)
            reply: tuple = ("result", call_id, True, value, context.retiring())
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the caller
            if isinstance(exc, SystemExit) and getattr(type(obj), "exits_on_system_exit", False):
                context.exit_process(exc.code)  # sys.exit() in an actor ends the actor, as in Ray
            reply = ("result", call_id, False, wire.capture_error(exc, channel.label, channel.pid, host),
                     context.retiring())
        batch = context.take_metrics() if method == "__task__" else None
        if batch is not None:  # what a task recorded goes with its result: the driver has it first
            reply += (batch,)
        try:
            channel.send(reply)
        except Exception as exc:  # the value would not pickle: say so instead of dying
            err = wire.unsendable(wire.returned_by(method, args, obj), exc)
            channel.send(("result", call_id, False, wire.capture_error(err, channel.label, channel.pid, host),
                          context.retiring(), *reply[5:]))
        if context.retiring():  # the driver read "retiring" with the answer: it sends this worker nothing more
            _exit_now(0)
        # An idle worker must not keep the last call's arguments and result alive.
        del msg, args, kwargs, reply, value, fn, batch
