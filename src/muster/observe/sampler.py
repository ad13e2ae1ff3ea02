"""A training worker's own figures: CPU, memory, GPU, and data wait vs compute.

Runs inside each worker. A daemon thread samples the process (and its
children, e.g. DataLoader workers) every couple of seconds and sends one
small event to the driver; ``PreparedDataLoader`` adds the time each
``next(batch)`` waited; every ``report()`` carries the step time since the
rank's previous report and how much of it was spent waiting on data.
GPU figures come from NVML (``pip install nvidia-ml-py``, part of
``muster[dashboard]``) when the worker has a GPU; without it they are left out.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

import psutil

SAMPLE_EVERY_S = 2.0

_current: "WorkerSampler | None" = None
_providers: dict[str, Callable[[], Any]] = {}  # extra figures each sample carries (muster.data's operators)


def add_figures(name: str, provider: Callable[[], Any]) -> None:
    """Make every later sample carry ``figures[name] = provider()`` (left out when it returns nothing)."""
    _providers[name] = provider


def note_data_wait(seconds: float) -> None:
    """Add time this worker spent waiting for its next batch (no-op outside a training worker)."""
    sampler = _current
    if sampler is not None:
        sampler.add_data_wait(seconds)


def current() -> "WorkerSampler | None":
    return _current


class WorkerSampler:
    """Per-worker figures. ``send(figures)`` is called from the sampling thread."""

    def __init__(self, send: Callable[[dict[str, Any]], None] | None, every_s: float = SAMPLE_EVERY_S):
        self._send, self._every = send, every_s
        self._proc = psutil.Process()
        self._children: dict[int, psutil.Process] = {}
        self._lock = threading.Lock()
        self._data_wait = 0.0
        self._last_report = time.monotonic()
        self._last_sent = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._gpu = _Nvml.open()
        self._proc.cpu_percent(None)  # primes the counter: the next call measures from here

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> None:
        global _current
        _current = self
        if self._send is not None:
            self._thread = threading.Thread(target=self._loop, name="muster-sampler", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        global _current
        if _current is self:
            _current = None
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self._every)
        self._gpu.close()

    def _loop(self) -> None:
        wait = min(0.5, self._every)  # a first sample soon, so short runs show their figures too
        while not self._stop.wait(wait):
            wait = self._every
            try:
                assert self._send is not None
                self._send(self.sample())
            except Exception:  # noqa: BLE001 - the driver may be gone; training decides, not the sampler
                return

    def send_now(self, min_gap_s: float = 0.5) -> None:
        """Send a sample now (e.g. a dataset pass just ended), unless one went less than ``min_gap_s`` ago."""
        now = time.monotonic()
        with self._lock:
            if self._send is None or now - self._last_sent < min_gap_s:
                return
            self._last_sent = now
        try:
            self._send(self.sample())
        except Exception:  # noqa: BLE001 - the driver may be gone
            pass

    # -- figures ---------------------------------------------------------------------
    def add_data_wait(self, seconds: float) -> None:
        with self._lock:
            self._data_wait += seconds

    def on_report(self) -> dict[str, float]:
        """Step time since this rank's previous report, and the part spent waiting on data."""
        now = time.monotonic()
        with self._lock:
            step, wait = now - self._last_report, self._data_wait
            self._last_report, self._data_wait = now, 0.0
        return {"step_s": step, "data_wait_s": min(wait, step)}

    def sample(self) -> dict[str, Any]:
        cpu, rss = self._proc.cpu_percent(None), self._proc.memory_info().rss
        for child in self._live_children():
            try:
                cpu += child.cpu_percent(None)
                rss += child.memory_info().rss
            except psutil.Error:
                pass
        figures: dict[str, Any] = {"time": time.time(), "cpu_percent": cpu, "rss_bytes": rss}
        figures.update(self._gpu.read(os.getpid()))
        for name, provider in list(_providers.items()):
            try:
                extra = provider()
            except Exception:  # noqa: BLE001 - a broken provider must not cost the system figures
                continue
            if extra:
                figures[name] = extra
        return figures

    def _live_children(self) -> list[psutil.Process]:
        try:
            now = {p.pid: p for p in self._proc.children(recursive=True)}
        except psutil.Error:
            return []
        for pid, proc in now.items():
            if pid not in self._children:
                self._children[pid] = proc
                try:
                    proc.cpu_percent(None)
                except psutil.Error:
                    pass
        self._children = {pid: self._children[pid] for pid in now}
        return list(self._children.values())


class _Nvml:
    """GPU utilisation and this process's GPU memory, for the worker's first visible GPU."""

    def __init__(self, nvml: Any, handle: Any):
        self._nvml, self._handle = nvml, handle

    @classmethod
    def open(cls) -> "_Nvml":
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        if not visible or visible == "-1":
            return cls(None, None)
        try:
            import pynvml  # nvidia-ml-py

            pynvml.nvmlInit()
            if visible.isdigit():
                handle = pynvml.nvmlDeviceGetHandleByIndex(int(visible))
            else:
                handle = pynvml.nvmlDeviceGetHandleByUUID(visible)
            return cls(pynvml, handle)
        except Exception:  # noqa: BLE001 - no NVML, no driver, or no such device: no GPU figures
            return cls(None, None)

    def read(self, pid: int) -> dict[str, Any]:
        if self._nvml is None:
            return {}
        nvml = self._nvml
        try:
            util = float(nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)
            used = None
            for p in nvml.nvmlDeviceGetComputeRunningProcesses(self._handle):
                if p.pid == pid and p.usedGpuMemory is not None:
                    used = int(p.usedGpuMemory)
            if used is None:  # in a container NVML may not see our pid: report the device's use
                used = int(nvml.nvmlDeviceGetMemoryInfo(self._handle).used)
            return {"gpu_util": util, "gpu_mem_bytes": used}
        except Exception:  # noqa: BLE001
            return {}

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass
            self._nvml = None
