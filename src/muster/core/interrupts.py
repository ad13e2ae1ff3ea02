"""Ctrl-C at a safe point of a driver's loop.

Python raises ``KeyboardInterrupt`` wherever the main thread happens to be. Inside the
condition wait of ``queue.Queue.get`` that can leave the queue's lock released, and the loop
then dies of ``RuntimeError: release unlocked lock`` instead: the interrupt, and the line
saying how to resume, are lost. While a loop runs under :class:`SafeInterrupts`, the first
signal only sets a flag that the loop checks between its waits (:meth:`SafeInterrupts.check`);
a second one raises at once, for a loop that does not come round. :func:`sigterm_as_interrupt`
makes SIGTERM stop a driver as Ctrl-C does (a trainer's ``fit``, a Tuner's).
"""

from __future__ import annotations

import signal
import threading
from typing import Any, Callable


class SafeInterrupts:
    """A context manager for a loop in the main thread (elsewhere it does nothing)."""

    def __init__(self, *signals: signal.Signals):
        self._signals = signals or (signal.SIGINT,)
        self._previous: dict[signal.Signals, Any] = {}
        self.received: str | None = None

    def __enter__(self) -> "SafeInterrupts":
        if threading.current_thread() is threading.main_thread():
            for sig in self._signals:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.received is not None:
            raise KeyboardInterrupt(f"{name} again")
        self.received = name

    def check(self) -> None:
        """Raise the ``KeyboardInterrupt`` a signal asked for, here, where it is safe."""
        if self.received is not None:
            raise KeyboardInterrupt(self.received)


def sigterm_as_interrupt() -> Callable[[], None]:
    """While fit() runs in the main thread, SIGTERM stops it like Ctrl-C: workers down, checkpoint kept."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, handler)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous)

    return restore
