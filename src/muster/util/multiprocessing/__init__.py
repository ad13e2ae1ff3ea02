"""Ray's ``ray.util.multiprocessing`` on muster: ``Pool``, a drop-in for Python's ``multiprocessing.Pool``
whose processes are muster actors. ``TimeoutError`` and ``JoinableQueue`` are Python's, as Ray exports them."""

from __future__ import annotations

from multiprocessing import JoinableQueue, TimeoutError

from muster.util.multiprocessing.pool import Pool
from muster.util.multiprocessing.results import AsyncResult, IMapIterator, PoolTimeoutError

__all__ = ["AsyncResult", "IMapIterator", "JoinableQueue", "Pool", "PoolTimeoutError", "TimeoutError"]
