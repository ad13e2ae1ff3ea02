"""Ray's warning for a remote function or actor class that pickles big: it likely captured a large
object (an array, a model) from its closure or module globals, which then travels with every task
(Ray's "closure capturing large objects" anti-pattern). Each is measured once."""

from __future__ import annotations

import warnings
import weakref
from typing import Any, Callable

LARGE_DEFINITION = 10_000_000  # bytes: a pickled function or actor class this big likely captured data
_sized: "weakref.WeakSet[Any]" = weakref.WeakSet()  # the functions and classes measured already


def check_function(fn: Callable[..., Any]) -> None:
    """Warn once per function when it pickles to more than :data:`LARGE_DEFINITION` bytes, as Ray
    does: it travels to a worker with every task, so a big array its closure or module globals hold
    (Ray's "closure capturing large objects" anti-pattern) is copied again and again."""
    try:
        if fn in _sized:
            return
        _sized.add(fn)
    except TypeError:  # not weakly referable (a callable object): not measured
        return
    from muster.core import serialization

    try:
        body, buffers = serialization.dumps(fn)
    except Exception:  # noqa: BLE001 - submitting it reports that, with the task's name
        return
    size = body.nbytes + sum(b.raw().nbytes for b in buffers)
    _warn_if_large(f"The remote function {getattr(fn, '__qualname__', fn)}", size, stacklevel=4)


def check_class(cls: type, size: int) -> None:
    """Warn once per actor class that pickles (``size`` bytes) to more than :data:`LARGE_DEFINITION`."""
    if cls not in _sized:
        _sized.add(cls)
        _warn_if_large(f"The actor class {cls.__name__}", size, stacklevel=7)


def _warn_if_large(what: str, size: int, stacklevel: int) -> None:
    if size > LARGE_DEFINITION:
        warnings.warn(
            f"{what} is very large ({size / 2**20:.0f} MiB pickled): it likely captures a big object (an array, "
            "a model) from its closure or module globals, which then travels with it. Create the object inside "
            "it, or muster.put() it once and pass the ref as an argument.", UserWarning, stacklevel=stacklevel)
