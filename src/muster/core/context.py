"""What code running *inside* a worker process may ask of its engine.

The engine that started the process installs a channel here; libraries
(``train``'s session, for one) call :func:`send_event` to reach the driver
without knowing which engine they run on.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, Callable, NoReturn, Protocol

from muster.exceptions import RuntimeNotStartedError


class EventChannel(Protocol):
    def send_event(self, payload: Any, wait: bool, timeout: float | None) -> Any: ...


# An engine's channel that collects user metrics also has ``send_metrics(batch: MetricsBatch) -> None``:
# it ships them to the driver without waiting, in order with the process's results.


_channel: EventChannel | None = None
_lock = threading.Lock()


class _ForkedChild:
    """The channel of a process that user code forked from a worker (a DataLoader's workers, a
    multiprocessing pool). The worker's own channel is its connection to the driver: a write from
    here would interleave with the worker's, and the reply would go to the worker, so the call
    would wait forever. It says so instead."""

    def __init__(self, engine: str | None):
        self.engine = engine

    def send_event(self, payload: Any, wait: bool, timeout: float | None) -> Any:
        raise RuntimeNotStartedError(
            f"muster cannot serve this call ({type(payload).__name__}) in process {os.getpid()}: it was "
            "forked from a muster worker by user code (a DataLoader worker, a multiprocessing pool), and "
            "only the worker's own process is connected to the engine. Make the call in the worker's "
            "process (the training function, the task) and hand the child what it needs, or read the "
            "dataset shard in the training function instead of inside a DataLoader worker."
        )


def _forked_child_channel() -> None:
    global _channel, _lock
    _lock = threading.Lock()
    if _channel is not None:
        _channel = _ForkedChild(getattr(_channel, "engine", None))


os.register_at_fork(after_in_child=_forked_child_channel)


def install_channel(channel: EventChannel | None) -> None:
    global _channel
    with _lock:
        _channel = channel


def in_worker() -> bool:
    return _channel is not None


def worker_engine() -> str | None:
    """The engine whose worker this process is ("local" or "ray"), or None outside a worker."""
    return getattr(_channel, "engine", None) if _channel is not None else None


def send_event(payload: Any, *, wait: bool = True, timeout: float | None = None) -> Any:
    """Send ``payload`` to the driver's handler for this actor.

    With ``wait=True`` block until the handler has run and return its reply.

    Raises:
        RuntimeError: called outside a worker process started by muster.
    """
    if _channel is None:
        raise RuntimeError(
            "This function only works inside a muster worker (for example inside "
            "train_loop_per_worker passed to TorchTrainer); it was called in the driver."
        )
    return _channel.send_event(payload, wait, timeout)


def collects_metrics() -> bool:
    """Whether this worker's engine takes its user metrics (:func:`send_metrics`); the local engine's does."""
    return callable(getattr(_channel, "send_metrics", None))


MetricsBatch = tuple[int, list[dict[str, Any]]]  # (sequence number, changed series): a later batch wins
_metrics_source: Callable[[], MetricsBatch | None] | None = None


def set_metrics_source(source: Callable[[], MetricsBatch | None] | None) -> None:
    """Where this process's changed user metrics come from (``muster.util.metrics`` sets it at the first
    record): ``source()`` returns the series changed since its last call, numbered, or None."""
    global _metrics_source
    _metrics_source = source


def take_metrics() -> MetricsBatch | None:
    """For engines: the user metrics changed since the last take (None: none), e.g. to go with a task's
    result so the driver has them before the caller does."""
    source = _metrics_source
    if source is None:
        return None
    try:
        return source()
    except Exception as exc:  # noqa: BLE001 - metrics never fail the task
        print(f"muster: reading this process's user metrics failed: {exc!r}", file=sys.stderr)
        return None


def send_metrics(batch: MetricsBatch) -> None:
    """Ship a batch of changed user-metric series (cumulative) to the driver, without waiting. Nothing
    happens where the engine does not collect them."""
    send = getattr(_channel, "send_metrics", None)
    if callable(send):
        send(batch)


def flush() -> None:
    """Send what :func:`take_metrics` has now (before a worker exits on purpose)."""
    batch = take_metrics()
    if batch is not None:
        send_metrics(batch)


def _forked_child_metrics() -> None:
    set_metrics_source(None)  # the parent's: a forked child sets its own at its first record


os.register_at_fork(after_in_child=_forked_child_metrics)


_notice_handler: Callable[[Any], None] | None = None


def on_notice(handler: Callable[[Any], None] | None) -> None:
    """Have ``handler(notice)`` take what the driver sends this process with ``RuntimeActor.notify``.
    It runs on the thread that reads the driver's link, beside the call running now: keep it short."""
    global _notice_handler
    _notice_handler = handler


def receives_notices() -> bool:
    """Whether this worker's engine delivers the driver's notices (the local engine's do)."""
    return bool(getattr(_channel, "delivers_notices", False))


def deliver_notice(notice: Any) -> None:
    """For engines: hand one notice from the driver to this process's handler (none set: dropped)."""
    handler = _notice_handler
    if handler is not None:
        handler(notice)


_retiring = False  # set once this worker is to end after the call it runs now


def retire_after_call() -> None:
    """End this worker once the call it runs now has answered, giving it no more work (Ray's
    ``max_calls``). An engine that reuses its workers honours it; one whose workers are another
    system's (Ray's) ignores it and hands the limit to that system (``Runtime.submit``'s ``max_calls``)."""
    global _retiring
    _retiring = True


def retiring() -> bool:
    """Whether :func:`retire_after_call` was called in this process."""
    return _retiring


def exit_process(code: int | str | None) -> NoReturn:
    """End this worker process as ``sys.exit(code)`` would end a program (an actor's ``sys.exit()``
    ends its actor, as in Ray): output flushed, a text ``code`` printed, then the exit status."""
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    flush()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed or odd stream: nothing to flush
            pass
    os._exit(code or 0)
