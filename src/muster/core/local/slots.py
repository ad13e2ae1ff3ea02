"""Resource slots on one machine: what it has, all-or-nothing acquisition, GPUs by id.

The engine has one :class:`SlotTable` for the machine; a placed placement group holds
its bundles out of it, and each bundle is a small table of its own (``reservations.py``).
A pending group (``take_when_free``) goes before new work: while it waits, new work may
not take what it still lacks, so a stream of small tasks cannot keep it out for good."""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from muster.core import resources as res
from muster.exceptions import GetTimeoutError, InvalidArgumentError

#: A wait for resources other work holds is told (``on_wait``) once it has lasted this long, then every
#: twice as long; work the user started gets one warning then (:class:`BusyWarning`), never for a prompt start.
_WAIT_NOTICE_S = 5.0
#: A pending placement group keeps its priority over new work while something was given back this
#: recently; when nothing has been for this long (what holds the slots may be waiting for new work
#: itself), new work may take them again.
_GROUP_PRIORITY_S = 5.0


_OBJECT_STORE_SHARE = 0.3  # Ray's default share of a node's free memory for its object store
_OBJECT_STORE_MAX = 200e9  # ... and its cap, in bytes
_SHM_FLOOR = 1e10  # Ray never caps the object store below 10 GB for a small /dev/shm


def node_memory() -> dict[str, float]:
    """Ray's "memory" and "object_store_memory" entries for this machine, in bytes, sized as a Ray
    node sizes them at its start: 30% of the memory free now (at most 200 GB, nor much more than
    /dev/shm holds) for the object store, the rest for tasks and actors. muster reserves neither:
    they are shown, never counted down."""
    import psutil

    free = float(psutil.virtual_memory().available)
    store = min(free * _OBJECT_STORE_SHARE, _OBJECT_STORE_MAX)
    try:
        store = min(store, max(_SHM_FLOOR, 0.95 * shutil.disk_usage("/dev/shm").total))
    except OSError:  # no /dev/shm (not Linux)
        pass
    return {"memory": float(int(free - store)), "object_store_memory": float(int(store))}


@dataclass
class Allocation:
    resources: dict[str, float]
    gpu_ids: list[int] = field(default_factory=list)
    gpu_share: float = 0.0  # per GPU id
    table: "SlotTable | None" = field(default=None, repr=False, compare=False)  # where it goes back

    def give_back(self) -> None:
        """Return it to the table it was taken from (the machine's, or a placement group bundle's)."""
        assert self.table is not None, "an allocation never taken from a table"
        self.table.release(self)


#: The fix a :class:`BusyWarning` gives for a task or actor that waits for the machine's resources.
TASK_FIX = ("let that work finish, ask for less (num_cpus= / num_gpus= / resources= in .options()), or oversubscribe "
            "this machine with muster.init(num_cpus=N) (num_gpus=, resources= for the others).")


class BusyWarning:
    """``on_wait`` for work the user started (a task, an actor, a placement group) that waits for resources
    other work holds: one warning on muster's logger the first time it is told (after ``_WAIT_NOTICE_S``),
    silent after.

    ``what`` names it ("task f", "actor A"); ``goal`` is what it waits to do ("start", "be placed"); ``fix``
    says what the user can do. The message it is told says what it asks for, what is free and what holds
    the rest (``LocalRuntime.naming_holders``). ``told``: whether it has warned.
    """

    def __init__(self, what: str, goal: str = "start", fix: str = TASK_FIX):
        self.what, self.goal, self.fix = what, goal, fix
        self.told, self._since = False, time.monotonic()

    def __call__(self, message: str) -> None:
        if self.told:
            return
        self.told = True
        logging.getLogger("muster").warning("muster: %s has waited %.0f s to %s. %s Fix: %s", self.what,
                                            time.monotonic() - self._since, self.goal, message, self.fix)


class NoticeClock:
    """When a wait is told (``on_wait``): once it has lasted ``_WAIT_NOTICE_S``, then every twice as long."""

    def __init__(self) -> None:
        self._next = time.monotonic() + _WAIT_NOTICE_S

    def due(self) -> bool:
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + _WAIT_NOTICE_S * 2
        return True


class SlotTable:
    """Counts what is free; hands out GPU ids. Thread-safe.

    ``gpus``: the share of each GPU id this table may hand out (default: all of GPUs 0..n-1).
    ``cond``: the lock to share with other tables (a placement group's bundles share one).
    Once :meth:`close` d, waiting for it raises the error it was closed with.
    """

    def __init__(self, total: dict[str, float], gpus: dict[int, float] | None = None,
                 cond: threading.Condition | None = None):
        self._total = dict(total)
        self._free = dict(total)
        self._gpu_total = dict(gpus) if gpus is not None else {i: 1.0 for i in range(int(total.get("GPU", 0)))}
        self._gpu_free = dict(self._gpu_total)
        self._cond = cond or threading.Condition()
        self._closed: BaseException | None = None
        self._groups_waiting: list[dict[str, float]] = []  # what each pending placement group needs, oldest first
        self._last_release = time.monotonic()

    def total(self) -> dict[str, float]:
        return dict(self._total)

    def free(self) -> dict[str, float]:
        with self._cond:
            return {k: round(v, 6) for k, v in self._free.items()}

    def check_feasible(self, request: dict[str, float], count: int, what: str = "") -> None:
        """Raise at once if ``count`` x ``request`` can never fit on this machine (the error names ``what``);
        the machine has Ray's node resources too, that no table counts (see :func:`on_this_node`)."""
        res.ensure_feasible(request, count, {**self._total, **node_resources()}, what=what)

    def acquire(
        self,
        request: dict[str, float],
        count: int,
        on_wait: Callable[[str], None] | None = None,
        timeout_s: float | None = None,
    ) -> list[Allocation]:
        """Take ``count`` allocations at once, waiting while the machine is busy."""
        start, clock = time.monotonic(), NoticeClock()
        with self._cond:
            while True:
                if self._closed is not None:
                    raise self._closed
                got = self._try_take_new([request] * count)
                if got is not None:
                    return got
                if timeout_s is not None and time.monotonic() - start >= timeout_s:
                    raise GetTimeoutError(
                        f"Waited {timeout_s:.0f} s for {count} x {{{res.fmt(request)}}}; "
                        f"free now: {res.fmt(self._free)}."
                    )
                if on_wait is not None and clock.due():
                    many = f"{count} worker(s) x " if count > 1 else ""
                    on_wait(self.waiting_message(f"{many}{{{res.fmt(request)}}}"))
                self._cond.wait(0.5)

    def waiting_message(self, asked: str) -> str:
        """What a wait for ``asked`` from this table is told (the caller holds the lock)."""
        return (f"Waiting for resources: {asked}; free now: {res.fmt(self._free)} of "
                f"{res.fmt(self._total)}. Other work holds the rest.")

    def acquire_exact(self, alloc: Allocation) -> None:
        """Re-take a previous allocation (same GPU ids), waiting until it is free."""
        with self._cond:
            while not self._fits_exact(alloc):
                if self._closed is not None:
                    raise self._closed
                self._cond.wait(0.5)
            self._apply(alloc, -1)

    def try_take(self, requests: list[dict[str, float]]) -> list[Allocation] | None:
        """One allocation for each of ``requests``, all taken now, or None (nothing taken)."""
        with self._cond:
            return None if self._closed is not None else self._try_take_new(requests)

    def take_when_free(self, requests: list[dict[str, float]], stop: threading.Event,
                       on_wait: Callable[[str], None] | None = None) -> list[Allocation] | None:
        """:meth:`try_take` for a pending placement group, waiting until they fit together (meanwhile new
        work may not take what it lacks, see :meth:`_yields`; ``on_wait`` is told as by :meth:`acquire`);
        None once ``stop`` is set."""
        need, clock = res.summed(requests), NoticeClock()
        with self._cond:
            self._groups_waiting.append(need)
            self._last_release = time.monotonic()
            try:
                while not stop.is_set():
                    got = self._try_take(requests)
                    if got is not None:
                        return got
                    if on_wait is not None and clock.due():
                        on_wait(self.waiting_message(f"{len(requests)} bundle(s) {{{res.fmt(need)}}} together"))
                    self._cond.wait(0.5)
            finally:
                self._groups_waiting.remove(need)
                self._cond.notify_all()  # new work held back for it may go now
        return None

    def could_hold(self, requests: list[dict[str, float]]) -> bool:
        """Whether ``requests`` fit together in this table when nothing else holds any of it."""
        return SlotTable(self._total, self._gpu_total)._try_take(requests) is not None

    def close(self, error: BaseException) -> None:
        """Refuse every wait from now on with ``error`` (those waiting now raise it)."""
        with self._cond:
            self._closed = error
            self._cond.notify_all()

    def try_acquire_exact(self, alloc: Allocation) -> bool:
        """Re-take a previous allocation (same GPU ids) for new work if it is free now."""
        with self._cond:
            if not self._fits_exact(alloc) or self._yields([alloc.resources]):
                return False
            self._apply(alloc, -1)
            return True

    def release(self, alloc: Allocation) -> None:
        with self._cond:
            self._apply(alloc, +1)
            self._last_release = time.monotonic()
            self._cond.notify_all()

    # -- internals (hold the lock) -----------------------------------------
    def _yields(self, requests: list[dict[str, float]]) -> bool:
        """Whether new work asking for ``requests`` waits for the oldest pending placement group: it
        would take some of what the group still lacks. The group keeps this priority while slots are
        being given back (at most ``_GROUP_PRIORITY_S`` since the last), so what holds them while
        waiting for new work itself is never stuck behind it."""
        if not self._groups_waiting or time.monotonic() - self._last_release > _GROUP_PRIORITY_S:
            return False
        need, asked = self._groups_waiting[0], res.summed(requests)
        return any(need.get(k, 0.0) > 0 and self._free.get(k, 0.0) - v < need[k] - 1e-9 for k, v in asked.items())

    def _try_take_new(self, requests: list[dict[str, float]]) -> list[Allocation] | None:
        """:meth:`_try_take` for new work, which leaves a pending placement group what it lacks."""
        return None if self._yields(requests) else self._try_take(requests)

    def _try_take(self, requests: list[dict[str, float]]) -> list[Allocation] | None:
        taken: list[Allocation] = []
        for request in requests:
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
        gpus = sorted(self._gpu_free.items())
        if gpu >= 1:
            ids = [i for i, f in gpus if f >= 1.0 - 1e-9][: int(gpu)]
            if len(ids) < int(gpu):
                return None
            alloc.gpu_ids, alloc.gpu_share = ids, 1.0
        elif gpu > 0:
            ids = [i for i, f in gpus if f + 1e-9 >= gpu][:1]
            if not ids:
                return None
            alloc.gpu_ids, alloc.gpu_share = ids, gpu
        self._apply(alloc, -1)
        return alloc

    def _fits_exact(self, alloc: Allocation) -> bool:
        return res.fits(alloc.resources, self._free) and all(
            self._gpu_free.get(i, -1.0) + 1e-9 >= alloc.gpu_share for i in alloc.gpu_ids
        )

    def _apply(self, alloc: Allocation, sign: int) -> None:
        for k, v in alloc.resources.items():
            self._free[k] = self._free.get(k, 0.0) + sign * v
        for i in alloc.gpu_ids:
            self._gpu_free[i] += sign * alloc.gpu_share
        if sign < 0:
            alloc.table = self


def detect_total(num_cpus: float | None, num_gpus: float | None, custom: dict[str, float] | None) -> dict[str, float]:
    """This machine's resources: what ``muster.init`` was given, else every CPU and visible GPU."""
    if num_cpus is None:
        num_cpus = float(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    if num_gpus is None:
        num_gpus = float(_count_gpus())
    total = {"CPU": num_cpus, "GPU": num_gpus}
    for k, v in (custom or {}).items():
        if k in ("CPU", "GPU"):
            raise InvalidArgumentError(f"muster.init(resources={{{k!r}: ...}}): pass num_cpus=/num_gpus= for {k}.")
        total[k] = v
    return res.normalize(total, what="muster.init", spelled=res.ARGUMENT_NAMES)


def node_resources() -> dict[str, float]:
    """The resources Ray gives every node, one unit each: ``node:<its IP>``, and on the head node
    ``node:__internal_head__``. The embedded engine's one node is the head. Ray's users ask for a little
    of one (``resources={"node:10.0.0.5": 0.01}``) to run work on that node."""
    return dict(_node_resources())


@functools.cache
def _node_resources() -> tuple[tuple[str, float], ...]:
    """Found once per process, as a Ray node finds its IP when it starts (finding it opens a socket, and every
    task's feasibility check reads these)."""
    from muster.core.settings import node_ip_address

    return (f"node:{node_ip_address()}", 1.0), ("node:__internal_head__", 1.0)


def on_this_node(request: dict[str, float]) -> dict[str, float]:
    """``request`` less what it asks of this node's :func:`node_resources` (up to their one unit): it is
    the only node, so they never hold work back, and no table counts them (nor shows them in its
    messages). More than one unit of one stays, and is refused as infeasible, as in Ray."""
    if not any(k.startswith("node:") for k in request):
        return request
    ours = node_resources()
    return {k: v for k, v in request.items() if not (k in ours and v <= ours[k])}


def _count_gpus() -> int:
    """The GPUs this process may use, counted without starting CUDA or NVML here: a driver that
    has started either cannot be forked into the zygote (see ``zygote.fork_blocker``)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    try:  # one device node per NVIDIA GPU this machine (or container) was given
        nodes = [n for n in os.listdir("/dev") if re.fullmatch(r"nvidia\d+", n)]
        if nodes:
            return len(nodes)
        if os.path.isdir("/proc/driver/nvidia/gpus"):
            return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        pass
    smi = shutil.which("nvidia-smi")  # no device nodes, e.g. under WSL: ask in another process
    if smi is not None:
        try:
            listing = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10).stdout
            return sum(1 for line in listing.splitlines() if line.startswith("GPU "))
        except (OSError, subprocess.SubprocessError):
            pass
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch.version, "hip", None):  # AMD: torch asks ROCm's own library
        try:
            return int(torch.cuda.device_count())
        except Exception:
            return 0
    return 0
