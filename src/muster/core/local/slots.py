"""Resource slots on one machine: all-or-nothing acquisition, GPUs by id."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from muster.core import resources as res
from muster.exceptions import GetTimeoutError

_WAIT_NOTICE_S = 5.0


@dataclass
class Allocation:
    resources: dict[str, float]
    gpu_ids: list[int] = field(default_factory=list)
    gpu_share: float = 0.0  # per GPU id


class SlotTable:
    """Counts what is free; hands out GPU ids. Thread-safe."""

    def __init__(self, total: dict[str, float]):
        self._total = dict(total)
        self._free = dict(total)
        self._gpu_free = [1.0] * int(total.get("GPU", 0))
        self._cond = threading.Condition()

    def total(self) -> dict[str, float]:
        return dict(self._total)

    def free(self) -> dict[str, float]:
        with self._cond:
            return {k: round(v, 6) for k, v in self._free.items()}

    def check_feasible(self, request: dict[str, float], count: int) -> None:
        """Raise at once if ``count`` x ``request`` can never fit on this machine."""
        res.ensure_feasible(request, count, self._total)

    def acquire(
        self,
        request: dict[str, float],
        count: int,
        on_wait: Callable[[str], None] | None = None,
        timeout_s: float | None = None,
    ) -> list[Allocation]:
        """Take ``count`` allocations at once, waiting while the machine is busy."""
        start = time.monotonic()
        next_notice = start + _WAIT_NOTICE_S
        with self._cond:
            while True:
                got = self._try_take(request, count)
                if got is not None:
                    return got
                now = time.monotonic()
                if timeout_s is not None and now - start >= timeout_s:
                    raise GetTimeoutError(
                        f"Waited {timeout_s:.0f} s for {count} x {{{res.fmt(request)}}}; "
                        f"free now: {res.fmt(self._free)}."
                    )
                if now >= next_notice:
                    next_notice = now + _WAIT_NOTICE_S * 2
                    msg = (
                        f"Waiting for resources: {count} worker(s) x {{{res.fmt(request)}}}; free now: "
                        f"{res.fmt(self._free)} of {res.fmt(self._total)}. Other work holds the rest."
                    )
                    if on_wait is not None:
                        on_wait(msg)
                self._cond.wait(0.5)

    def acquire_exact(self, alloc: Allocation) -> None:
        """Re-take a previous allocation (same GPU ids), waiting until it is free."""
        with self._cond:
            while not self._fits_exact(alloc):
                self._cond.wait(0.5)
            self._apply(alloc, -1)

    def try_acquire_exact(self, alloc: Allocation) -> bool:
        """Re-take a previous allocation (same GPU ids) if it is free now."""
        with self._cond:
            if not self._fits_exact(alloc):
                return False
            self._apply(alloc, -1)
            return True

    def release(self, alloc: Allocation) -> None:
        with self._cond:
            self._apply(alloc, +1)
            self._cond.notify_all()

    # -- internals (hold the lock) -----------------------------------------
    def _try_take(self, request: dict[str, float], count: int) -> list[Allocation] | None:
        taken: list[Allocation] = []
        for _ in range(count):
            alloc = self._take_one(request)
            if alloc is None:
                for a in taken:
                    self._apply(a, +1)
                return None
            taken.append(alloc)
        return taken

    def _take_one(self, request: dict[str, float]) -> Allocation | None:
        if not res.fits(request, self._free):
            return None
        gpu = request.get("GPU", 0.0)
        alloc = Allocation(dict(request))
        if gpu >= 1:
            ids = [i for i, f in enumerate(self._gpu_free) if f >= 1.0 - 1e-9][: int(gpu)]
            if len(ids) < int(gpu):
                return None
            alloc.gpu_ids, alloc.gpu_share = ids, 1.0
        elif gpu > 0:
            ids = [i for i, f in enumerate(self._gpu_free) if f + 1e-9 >= gpu][:1]
            if not ids:
                return None
            alloc.gpu_ids, alloc.gpu_share = ids, gpu
        self._apply(alloc, -1)
        return alloc

    def _fits_exact(self, alloc: Allocation) -> bool:
        return res.fits(alloc.resources, self._free) and all(
            self._gpu_free[i] + 1e-9 >= alloc.gpu_share for i in alloc.gpu_ids
        )

    def _apply(self, alloc: Allocation, sign: int) -> None:
        for k, v in alloc.resources.items():
            self._free[k] = self._free.get(k, 0.0) + sign * v
        for i in alloc.gpu_ids:
            self._gpu_free[i] += sign * alloc.gpu_share

