"""Peak memory of a process tree, sampled from a background thread.

Every ``interval_s`` (50 ms) the sampler sums the RSS of the root process and
all its descendants (``/proc/<pid>/statm``: cheap).  It re-lists the tree every
``tree_interval_s`` (200 ms; a full scan of /proc costs about 2 ms), and keeps
counting a process it has seen until it exits, even if it is re-parented.

PSS needs ``/proc/<pid>/smaps_rollup``, which the kernel answers by walking the
process's page tables: 3-7 ms for a process that has imported torch.  At
50 ms for every process that would take a large share of one of this
machine's two cores away from the job being measured (and far more for Ray's
~27 processes than for torchrun's 3), so PSS is summed every
``pss_interval_s`` (1 s), plus whenever the RSS sum has grown more than 5 %
since the last PSS sum (at most every 250 ms), so a rising peak is caught.
Pass ``pss_interval_s=interval_s`` to sample PSS at the full rate.

The sampler's own CPU time is recorded so its cost is visible in the results,
and so is the CPU time of every process in the tree (from /proc/<pid>/stat,
as last seen: a process's final < 50 ms can be missed).
"""

from __future__ import annotations

import threading
import time

import psutil


class TreeMemorySampler:
    def __init__(self, root_pid: int, interval_s: float = 0.05, pss_interval_s: float = 1.0,
                 tree_interval_s: float = 0.2):
        self.root_pid = root_pid
        self.interval_s = interval_s
        self.pss_interval_s = pss_interval_s
        self.tree_interval_s = tree_interval_s
        self.peak_rss = 0
        self.peak_pss = 0
        self.peak_procs = 0
        self.samples = 0
        self.pss_samples = 0
        self.cpu_s = 0.0  # the sampler's own CPU time
        self._tree_cpu: dict[tuple[int, float], float] = {}  # (pid, create time) -> last seen user+sys
        self.timeline: list[tuple[float, int, int | None, int]] = []  # (t, rss, pss or None, nprocs)
        self._stop = threading.Event()
        self._procs: dict[int, psutil.Process] = {}
        self._thread = threading.Thread(target=self._run, name="tree-memory-sampler", daemon=True)
        self._t0 = time.monotonic()

    def start(self) -> "TreeMemorySampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def tree_cpu_s(self) -> float:
        """CPU seconds used by the tree's processes, as last sampled (at most one interval short each)."""
        return sum(self._tree_cpu.values())

    # -- internals ---------------------------------------------------------------
    def _tree(self) -> list[psutil.Process]:
        found: list[psutil.Process] = []
        try:
            root = self._procs.get(self.root_pid) or psutil.Process(self.root_pid)
            found = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
        # Reuse Process objects (psutil's pid-reuse check stays cheap), and keep
        # counting a process seen before that has since been re-parented away.
        procs = {p.pid: self._procs.get(p.pid, p) for p in found}
        for pid, p in self._procs.items():
            if pid not in procs and p.is_running():
                procs[pid] = p
        self._procs = procs
        return list(procs.values())

    def _run(self) -> None:
        cpu0 = time.thread_time()
        next_tick = time.monotonic()
        last_pss_t = last_tree_t = -1e9
        rss_at_last_pss = 0
        procs: list[psutil.Process] = []
        while not self._stop.is_set():
            now = time.monotonic()
            if now - last_tree_t >= self.tree_interval_s or not procs:
                procs, last_tree_t = self._tree(), now
            rss = 0
            for p in procs:
                try:
                    rss += p.memory_info().rss
                    t = p.cpu_times()
                    self._tree_cpu[(p.pid, p.create_time())] = t.user + t.system
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    pass
            pss: int | None = None
            due = now - last_pss_t >= self.pss_interval_s
            rising = rss > rss_at_last_pss * 1.05 and now - last_pss_t >= min(0.25, self.pss_interval_s)
            if procs and (due or rising):
                pss = 0
                for p in procs:
                    try:
                        pss += p.memory_full_info().pss
                    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                        pass
                last_pss_t, rss_at_last_pss = now, rss
                self.pss_samples += 1
                self.peak_pss = max(self.peak_pss, pss)
            if procs:
                self.samples += 1
                self.peak_rss = max(self.peak_rss, rss)
                self.peak_procs = max(self.peak_procs, len(procs))
                self.timeline.append((round(now - self._t0, 3), rss, pss, len(procs)))
            next_tick += self.interval_s
            delay = next_tick - time.monotonic()
            if delay < 0:  # fell behind (a slow PSS sample): do not try to catch up
                next_tick, delay = time.monotonic(), 0.0
            self._stop.wait(delay)
        self.cpu_s = time.thread_time() - cpu0
