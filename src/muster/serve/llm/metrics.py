"""What one ``LLMServer`` counts of its traffic, for Serve's metrics and the run store.

:class:`LLMMeter` counts requests, prompt and completion tokens exactly as the
``usage`` the clients get back, and keeps each request's time to first token
(from the request reaching the server to its first generated text). Serve's
replica reads :meth:`LLMMeter.snapshot` with its other stats about once a
second (the controller folds it into the deployment's metrics); each time to
first token sample is read until the controller acknowledges it.
"""

from __future__ import annotations

import threading
from typing import Any

from muster.serve._internal.metrics import LLM_METRICS_HOOK, Unacked

_MAX_PENDING = 10000  # time-to-first-token samples not yet read (the oldest go first)

__all__ = ["LLM_METRICS_HOOK", "LLMMeter"]


class LLMMeter:
    """Counters of one model's requests. Thread-safe: Serve reads it from the replica's control thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self._ttft_ms: Unacked[float] = Unacked(maxlen=_MAX_PENDING)

    def started(self, prompt_tokens: int, ttft_s: float) -> None:
        """A request got its first tokens after ``ttft_s`` seconds; its prompt held ``prompt_tokens`` (as in usage)."""
        with self._lock:
            self.requests += 1
            self.prompt_tokens += prompt_tokens
            self._ttft_ms.add(ttft_s * 1e3)

    def generated(self, tokens: int) -> None:
        """``tokens`` more completion tokens reached a client's stream."""
        if tokens > 0:
            with self._lock:
                self.completion_tokens += tokens

    def counts(self) -> dict[str, int]:
        """Requests, prompt and completion tokens since the server started."""
        with self._lock:
            return {"requests": self.requests, "prompt_tokens": self.prompt_tokens,
                    "completion_tokens": self.completion_tokens}

    def snapshot(self, running: int, waiting: int, ack: int = 0) -> dict[str, Any]:
        """The counters, the engine's queue (``running`` + ``waiting``) and the time to first token samples
        (ms) after those numbered up to ``ack``, with the ``ack`` that covers them (:class:`Unacked`)."""
        with self._lock:
            ttft, ack = self._ttft_ms.read(ack)
            return {"requests": self.requests, "prompt_tokens": self.prompt_tokens,
                    "completion_tokens": self.completion_tokens, "ttft_ms": ttft,
                    "running": running, "waiting": waiting, "ack": ack}
