"""Publishing a pass's per-operator counters while it runs.

* In the driver (a user iterating a dataset), ``observe.data_progress``
  shows them in the terminal, when ``DataContext.enable_progress_bars``.
* In a training worker, every system sample the worker sends to the driver
  carries them (``figures["data"]``), so the run store records them
  (``data_ops``) and the training view shows them; a pass that ends sends a
  sample at once, so short passes are recorded too.

Each pass gets a number (``execution``), counted per process.
"""

from __future__ import annotations

import itertools
import threading
from typing import Callable

from muster.data.stats import Stats
from muster.observe.data_progress import OpSample

_ids = itertools.count(1)
_lock = threading.Lock()
_passes: dict[int, Stats] = {}  # passes a training worker has not yet sent the driver in their final state
_hooked = False


def _drain() -> list[OpSample]:
    """Counters of every pass running or ended since the last sample (ended ones are then forgotten)."""
    with _lock:
        items = list(_passes.items())
        for n, stats in items:
            if stats.done:
                del _passes[n]
    return [op for n, stats in items for op in stats.snapshot(n)]


def start(stats: Stats, every_s: float, terminal: bool) -> Callable[[], None]:
    """Publish ``stats`` while its pass runs; returns what to call when the pass ends."""
    from muster.core import context
    from muster.observe import sampler

    global _hooked
    if sampler.current() is not None:  # a training worker: ride on its samples
        with _lock:
            _passes[next(_ids)] = stats
            if not _hooked:
                sampler.add_figures("data", _drain)
                _hooked = True

        def ended() -> None:
            current = sampler.current()
            if current is not None:
                current.send_now()

        return ended
    if terminal and not context.in_worker():
        from muster.observe.data_progress import DataProgress

        view = DataProgress(stats.snapshot, every_s)
        view.start()
        return view.stop
    return lambda: None
