"""What runs inside Ray's worker processes: one actor class and one task function.

Ray only ever moves *bytes* here: the driver cloudpickles calls with muster's
serializer and the worker unpickles them after it has put the driver's
``sys.path`` on its own, so functions and classes from the user's modules
resolve on every node just as they do in the local engine's workers.

Each process installs an event channel (``core.context``): an event is a
call on the driver's hub actor (``hub.py``), made and *completed* before
``send_event`` returns, so an event that left a worker is in the hub before
the worker can die.

Ray shows workers' output on the driver's console itself (``log_to_driver``);
for the runtime's log sinks each process also tees what Python writes to
``sys.stdout``/``sys.stderr`` into ``LogLines`` events on the same channel,
sent every ``_LOG_FLUSH_S`` and at the end of every call, so the lines a
call printed reach the driver before its result.  Output written below
Python (C libraries writing to fd 1 directly) reaches only Ray's console.

User metrics (``muster.util.metrics``) travel the same channel as ``UserMetrics``
events: a task's go just before its result (so the driver has them first), an
actor's every ``MUSTER_METRICS_REPORT_INTERVAL_MS``.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import socket
import sys
import threading
from typing import Any, Callable, TextIO, cast

import cloudpickle
import ray

from muster.core import context, settings
from muster.core.local.wire import capture_error, returned_by, unsendable
from muster.core.serialization import dumps
from muster.core.ray.errors import from_ray, reason
from muster.exceptions import RuntimeNotStartedError


def pack(obj: Any) -> bytes:
    """muster's pickling (cloudpickle, protocol 5), flattened to bytes for Ray."""
    body, _ = dumps(obj, out_of_band_min=sys.maxsize)  # every buffer in the stream
    return bytes(body)


def unpack(data: bytes) -> Any:
    return cloudpickle.loads(data)


class _HubChannel:
    """Worker side of the event channel: one hub call per event, in order."""

    engine = "ray"

    def __init__(self, hub: Any, key: str):
        self.hub, self.key = hub, key
        self._ids = itertools.count()
        self._lock = threading.Lock()  # one event in flight per process: order is send order
        self.sent = 0
        ctx = ray.get_runtime_context()
        self.process = metrics_process(ctx.get_node_id(), os.getpid())
        self.worker_id = ctx.get_worker_id()  # Ray's id of this process: the driver watches it while it has series

    def send_metrics(self, batch: context.MetricsBatch) -> None:
        """Ship the user metrics this process changed (``muster.util.metrics``) to the driver's table."""
        if not ray.is_initialized():  # Ray's atexit disconnected it: a call now would connect anew (and crash)
            return
        try:
            self.send_event(UserMetrics(self.process, batch, self.worker_id), False, None)
        except Exception as exc:  # noqa: BLE001 - metrics never fail the task or call
            print(f"muster: sending user metrics to the driver failed: {exc!r}", file=sys.stderr)

    def send_event(self, payload: Any, wait: bool, timeout: float | None) -> Any:
        data = pack(payload)
        try:
            with self._lock:
                event_id = next(self._ids)
                self.sent += 1
                if not wait:
                    ray.get(self.hub.push.remote(self.key, event_id, data))
                    return None
                ref = self.hub.request.remote(self.key, event_id, data)
            # ray.get in a worker lends its CPUs while it waits (nested tasks never deadlock).
            ok, value = ray.get(ref, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise TimeoutError(f"the driver did not answer within {timeout} s") from None
        except ray.exceptions.RayActorError as exc:
            raise RuntimeNotStartedError(
                f"{self.key}: the driver's muster engine is gone (its event hub died: {reason(exc)}), so nothing "
                "this worker asks or sends reaches it. Run the driver again (muster.init(address=...))."
            ) from None
        except ray.exceptions.RayError as exc:
            raise from_ray(exc, f"{self.key}'s request to the driver") from None
        value = unpack(value)
        if not ok:
            raise value
        return value


def metrics_process(node_id: str, pid: int | None) -> str:
    """The key of a Ray worker process in the driver's user-metrics table (its series merge per key)."""
    return f"{node_id}:{pid}"


@dataclasses.dataclass(frozen=True)
class UserMetrics:
    """User metrics a Ray worker process changed (cumulative series, numbered), on their way to the
    driver's ``Runtime.user_metrics`` (never to ``on_event``)."""

    process: str  # metrics_process() of the sender
    batch: context.MetricsBatch
    worker_id: str = ""  # Ray's id of the sender's process (its death ends its series' process)


_LOG_FLUSH_S = 0.2
_LOG_MAX_LINE = 65_536  # characters held for an unfinished line before it is sent as one
_LOG_MAX_PENDING = 10_000  # lines kept while no channel can take them (older ones dropped)


@dataclasses.dataclass(frozen=True)
class LogLines:
    """Lines a Ray worker printed, on their way to the driver's log sinks (never to ``on_event``)."""

    lines: tuple[str, ...]


class _TeeStream:
    """A text stream that writes through to ``target`` and hands whole lines to ``forwarder``."""

    def __init__(self, target: TextIO, forwarder: "_LogForwarder"):
        self._target, self._forwarder, self._tail = target, forwarder, ""
        self.encoding: str = getattr(target, "encoding", None) or "utf-8"

    def write(self, text: str) -> int:
        n = self._target.write(text)
        if "\n" in text:
            *lines, self._tail = (self._tail + text).split("\n")
            self._forwarder.add(lines)
        else:
            self._tail += text
            if len(self._tail) > _LOG_MAX_LINE:  # a progress bar redrawn with \r: never one endless line
                self._forwarder.add([self.take_tail()])
        return n if n is not None else len(text)

    def take_tail(self) -> str:
        tail, self._tail = self._tail, ""
        return tail

    def flush(self) -> None:
        self._target.flush()

    def fileno(self) -> int:
        return self._target.fileno()

    def isatty(self) -> bool:
        return self._target.isatty()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


class _LogForwarder:
    """One per Ray worker process: batches the tee'd lines into ``LogLines`` events."""

    def __init__(self) -> None:
        self.channel: _HubChannel | None = None
        self._pending: list[str] = []
        self._lock = threading.Lock()  # guards _pending
        self._send_lock = threading.Lock()  # one batch on the wire at a time: lines stay in order
        self._streams = [_TeeStream(sys.stdout, self), _TeeStream(sys.stderr, self)]
        sys.stdout, sys.stderr = (cast(TextIO, stream) for stream in self._streams)
        threading.Thread(target=self._run, name="muster-log-forward", daemon=True).start()

    def add(self, lines: list[str]) -> None:
        with self._lock:
            self._pending.extend(lines)
            if len(self._pending) > _LOG_MAX_PENDING:
                del self._pending[: len(self._pending) - _LOG_MAX_PENDING]

    def flush(self, tails: bool = False) -> None:
        """Send what is pending (``tails``: also an unfinished last line) on the current channel."""
        with self._send_lock:
            if tails:
                self.add([t for t in (s.take_tail() for s in self._streams) if t])
            channel = self.channel
            if channel is None:
                return
            with self._lock:
                lines, self._pending = self._pending, []
            if not lines:
                return
            try:
                channel.send_event(LogLines(tuple(lines)), False, None)
            except Exception:  # noqa: BLE001 - the driver is gone: the lines went to Ray's log files anyway
                pass

    def detach(self) -> None:
        """Send nothing more on the current channel (its task is done)."""
        with self._send_lock:
            self.channel = None

    def _run(self) -> None:
        stop = threading.Event()
        while not stop.wait(_LOG_FLUSH_S):
            self.flush()


_forwarder: _LogForwarder | None = None
_forwarder_lock = threading.Lock()


def _no_forwarding_in_child() -> None:
    """A process that user code forks here (a DataLoader's workers) writes straight to the real
    streams: the forwarder's thread is not in it, its channel is the parent's connection, and its
    locks may have been held at the fork (a print would then wait forever)."""
    global _forwarder, _forwarder_lock
    _forwarder_lock = threading.Lock()
    if _forwarder is not None:
        tee_out, tee_err = _forwarder._streams
        if sys.stdout is tee_out:
            sys.stdout = tee_out._target
        if sys.stderr is tee_err:
            sys.stderr = tee_err._target
        _forwarder = None


os.register_at_fork(after_in_child=_no_forwarding_in_child)


def _forward_logs(channel: "_HubChannel | None") -> _LogForwarder:
    """This process's forwarder (started on first use), now sending on ``channel``."""
    global _forwarder
    with _forwarder_lock:
        if _forwarder is None:
            _forwarder = _LogForwarder()
        _forwarder.channel = channel
        return _forwarder


def _adopt_driver_paths(sys_path: list[str]) -> None:
    for entry in reversed(sys_path):
        if entry and entry not in sys.path and os.path.isdir(entry):
            sys.path.insert(1, entry)


def _describe_node() -> dict[str, Any]:
    ctx = ray.get_runtime_context()
    ip = ray.util.get_node_ip_address()
    node_id = ctx.get_node_id()
    settings.set_node_identity(node_id, ip)
    try:
        gpus = [int(g) for g in ray.get_gpu_ids()]
    except Exception:  # noqa: BLE001 - ids that are not integers (MIG UUIDs): report none
        gpus = []
    return {"pid": os.getpid(), "node_id": node_id, "ip": ip, "host": socket.gethostname(), "gpu_ids": gpus}


class RayWorker:
    """The body of every muster actor on Ray (wrapped with ``ray.remote`` by the engine).

    Calls in the default concurrency group run one at a time, in order;
    ``watch`` runs in its own group and never returns, so the driver learns
    of the process's death from its failed reference.
    """

    def __init__(self, hub: Any, key: str, label: str, sys_path: list[str], env: dict[str, str]):
        _adopt_driver_paths(sys_path)
        os.environ.update(env)
        self.label, self.host = label, socket.gethostname()
        self._obj: Any = None
        self._stop = threading.Event()
        channel = _HubChannel(hub, key)
        context.install_channel(channel)
        self._logs = _forward_logs(channel)

    def meta(self) -> dict[str, Any]:
        return _describe_node()

    def call(self, method: str, data: bytes) -> bytes:
        """Run ``method`` on the hosted object (``__init__`` builds it); reply with pickled (ok, value)."""
        try:
            args, kwargs = unpack(data)
            if method == "__init__":
                cls = args[0]
                self._obj, value = cls(*args[1:], **kwargs), None
            else:
                value = getattr(self._obj, method)(*args, **kwargs)
            out: tuple[bool, Any] = (True, value)
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the caller
            out = (False, capture_error(exc, self.label, os.getpid(), self.host))
        self._logs.flush(tails=True)  # what the call printed reaches the driver before its result
        try:
            return pack(out)
        except Exception as exc:  # noqa: BLE001
            err = unsendable(returned_by(method, args, self._obj), exc)
            return pack((False, capture_error(err, self.label, os.getpid(), self.host)))

    @ray.method(concurrency_group="watch")
    def watch(self) -> None:
        self._stop.wait()


def run_task(
    hub: Any, key: str, label: str, sys_path: list[str], env: dict[str, str], data: bytes
) -> tuple[int, bytes]:
    """Body of every muster task on Ray: unpickle, install the channel, run.

    Returns how many events the task sent (the driver handles them all before
    the result) and the pickled ``(ok, value)``.
    """
    _adopt_driver_paths(sys_path)
    os.environ.update(env)
    host = socket.gethostname()
    channel = _HubChannel(hub, key)
    context.install_channel(channel)
    logs = _forward_logs(channel)
    try:
        fn, args, kwargs = unpack(data)
        out: tuple[bool, Any] = (True, fn(*args, **kwargs))
    except BaseException as exc:  # noqa: BLE001
        out = (False, capture_error(exc, label, os.getpid(), host))
    finally:
        context.flush()  # the user metrics it changed: counted in channel.sent, as the lines below
        logs.flush(tails=True)  # counted in channel.sent: the driver routes them before the result
        logs.detach()
        context.install_channel(None)
    try:
        return channel.sent, pack(out)
    except Exception as exc:  # noqa: BLE001
        err = unsendable(label, exc)
        return channel.sent, pack((False, capture_error(err, label, os.getpid(), host)))


def task_runner(function: str) -> Callable[..., tuple[int, bytes]]:
    """:func:`run_task` under a name of its own, for the muster function ``function`` (its
    ``module.qualname``): Ray tells its functions apart by name and pickled body, and counts
    ``max_calls`` per function, so a function declared with ``max_calls`` runs as one of these."""

    def run(hub: Any, key: str, label: str, sys_path: list[str], env: dict[str, str], data: bytes) -> tuple[int, bytes]:
        return run_task(hub, key, label, sys_path, env, data)

    run.__name__ = run.__qualname__ = f"run_task[{function}]"
    return run
