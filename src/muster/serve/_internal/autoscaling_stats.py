"""In a replica: Ray's custom autoscaling metrics, a deployment class's ``record_autoscaling_stats()``.

Each stats round of an autoscaling deployment (every ``metrics_interval_s``) the replica calls the method (sync
or async, bounded by :data:`TIMEOUT_S`) and hands the ``{name: number}`` it returns to the controller with its
other stats; the controller keeps them for the policy (``AutoscalingContext.aggregated_metrics`` /
``raw_metrics``, see ``autoscaling.record_custom``). As in Ray, a call that raises or times out is logged and
skipped, and one that returns anything but a dict of numbers turns the method off for the replica's life.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import sys
from typing import Any

from muster.serve._internal import eventloop

METHOD = "record_autoscaling_stats"
#: how long one call may take: under the controller's wait for a stats round (state.STATS_LATE_S), so a slow one
#: does not hold back the round's other figures (Ray's RAY_SERVE_RECORD_AUTOSCALING_STATS_TIMEOUT_S is 10 s)
TIMEOUT_S = 4.0


class AutoscalingStats:
    """The replica's user object's ``record_autoscaling_stats``, if it has one."""

    def __init__(self, obj: Any, where: str):
        fn = getattr(obj, METHOD, None) if not inspect.isfunction(obj) else None
        self.fn = fn if callable(fn) else None
        self.where = where
        self.pool: concurrent.futures.ThreadPoolExecutor | None = None  # a sync method's thread, its own: busy
        # request threads never hold it back

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
            self._say(f"{METHOD}() took more than {TIMEOUT_S:g} s; this round has no custom metrics")
            return None
        except Exception as exc:  # noqa: BLE001 - user code: the replica serves on, as Ray's
            self._say(f"{METHOD}() raised {type(exc).__name__}: {exc}; this round has no custom metrics")
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
