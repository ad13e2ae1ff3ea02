"""What code running *inside* a worker process may ask of its engine.

The engine that started the process installs a channel here; libraries
(``train``'s session, for one) call :func:`send_event` to reach the driver
without knowing which engine they run on.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol


class EventChannel(Protocol):
    def send_event(self, payload: Any, wait: bool, timeout: float | None) -> Any: ...


_channel: EventChannel | None = None
_lock = threading.Lock()


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
