"""In a replica: Ray's custom autoscaling metrics, a deployment class's ``record_autoscaling_stats()``.

As in Ray, a replica of an autoscaling deployment calls the method (sync or async, bounded by :data:`TIMEOUT_S`)
every ``min(look_back_period_s * RECORD_INTERVAL_FACTOR, metrics_interval_s)`` seconds (:func:`sample_period`), so
a look-back window holds several samples, and keeps each ``{name: number}`` with its time until the controller's
next stats round takes it; the controller keeps them for the policy (``AutoscalingContext.aggregated_metrics`` /
``raw_metrics``, see ``autoscaling.record_custom``). A call that raises or times out is logged and skipped, and
one that returns anything but a dict of numbers turns the method off for the replica's life.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import sys
import threading
import time
from typing import Any

from muster.serve._internal import eventloop
from muster.serve._internal.metrics import Unacked

METHOD = "record_autoscaling_stats"
#: how long one call may take (Ray's RAY_SERVE_RECORD_AUTOSCALING_STATS_TIMEOUT_S); it runs on its own thread,
#: so a slow one holds back no stats round
TIMEOUT_S = 10.0
#: Ray's RAY_SERVE_AUTOSCALING_METRIC_RECORD_INTERVAL_FACTOR: a fifth of the look-back window between samples
RECORD_INTERVAL_FACTOR = 0.2
_MAX_PENDING = 10_000  # samples the controller has not taken yet (it takes them every metrics_interval_s)


def sample_period(look_back_period_s: float, metrics_interval_s: float) -> float:
    """Seconds between two calls of the method, as Ray's replica records its autoscaling metrics."""
    return min(look_back_period_s * RECORD_INTERVAL_FACTOR, metrics_interval_s)


class AutoscalingStats:
    """The replica's user object's ``record_autoscaling_stats``, if it has one, and its samples."""

    def __init__(self, obj: Any, where: str):
        fn = getattr(obj, METHOD, None) if not inspect.isfunction(obj) else None
        self.fn = fn if callable(fn) else None
        self.where = where
        self.pool: concurrent.futures.ThreadPoolExecutor | None = None  # a sync method's thread, its own: busy
        # request threads never hold it back
        self.samples: Unacked[tuple[float, dict[str, float]]] = Unacked(maxlen=_MAX_PENDING)
        self._stop = threading.Event()

    def start(self, period_s: float) -> None:
        """Call the method every ``period_s`` on a thread of its own, until :meth:`stop` (none: nothing starts)."""
        if self.fn is not None:
            threading.Thread(target=self._sample_every, args=(period_s,), daemon=True,
                             name="muster-autoscaling-stats").start()

    def stop(self) -> None:
        self._stop.set()

    def _sample_every(self, period_s: float) -> None:
        while self.fn is not None and not self._stop.is_set():
            got = self.read()
            if got is not None:
                self.samples.add((time.monotonic(), got))
            self._stop.wait(period_s)

    def take(self, ack: int) -> tuple[list[tuple[float, dict[str, float]]], int]:
        """The samples after those numbered up to ``ack`` (see :class:`Unacked`), each as ``(its age in seconds,
        values)`` (the controller dates them on its own clock), with the ``ack`` that covers them."""
        got, ack = self.samples.read(ack)
        now = time.monotonic()
        return [(now - t, values) for t, values in got], ack

    def read(self) -> dict[str, float] | None:
        """What the method returns now; None when there is none, or this call failed (said on stderr)."""
        if self.fn is None:
            return None
        fn = self.fn
        try:
            if inspect.iscoroutinefunction(fn):
                got = eventloop.run_sync(asyncio.wait_for(fn(), TIMEOUT_S))
            else:
                if self.pool is None:
                    self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="muster-autoscaling-stats")
                got = self.pool.submit(fn).result(TIMEOUT_S)
        except (TimeoutError, asyncio.TimeoutError):
            self._say(f"{METHOD}() took more than {TIMEOUT_S:g} s; this sample is skipped")
            return None
        except Exception as exc:  # noqa: BLE001 - user code: the replica serves on, as Ray's
            self._say(f"{METHOD}() raised {type(exc).__name__}: {exc}; this sample is skipped")
            return None
        bad = _bad(got)
        if bad is not None:
            self.fn = None
            self._say(f"{METHOD}() returned {bad}; return a dict of metric name -> int or float. Custom "
                      "autoscaling metrics are off for this replica")
            return None
        return {str(k): float(v) for k, v in got.items()}

    def _say(self, what: str) -> None:
        print(f"[serve] {self.where}: {what}.", file=sys.stderr, flush=True)


def _bad(got: Any) -> str | None:
    """What is wrong with a return value, or None."""
    if not isinstance(got, dict):
        return f"a {type(got).__name__} ({got!r})"
    for key, value in got.items():
        if not isinstance(value, (int, float)):
            return f"{type(value).__name__} {value!r} for {key!r}"
    return None
