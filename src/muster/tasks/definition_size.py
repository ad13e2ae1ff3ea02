"""Ray's checks on a remote function or actor class that pickles big: it likely captured a large
object (an array, a model) from its closure or module globals, which then travels with every task
(Ray's "closure capturing large objects" anti-pattern). Over 10 MB is warned about once; from 100 MB
(``FUNCTION_SIZE_ERROR_THRESHOLD`` in the environment, as in Ray) it is refused at ``.remote()``."""

from __future__ import annotations

import os
import warnings
import weakref
from typing import Any, Callable

from muster.exceptions import InvalidArgumentError

LARGE_DEFINITION = 10_000_000  # bytes: a pickled function or actor class this big likely captured data
TOO_LARGE_DEFAULT = 100_000_000  # bytes: Ray refuses a definition this big, unless told otherwise
_sized: "weakref.WeakSet[Any]" = weakref.WeakSet()  # the functions and classes measured already


def check_function(fn: Callable[..., Any]) -> None:
    """Measure a function once, as Ray does: it travels to a worker with every task, so a big array its
    closure or module globals hold (Ray's "closure capturing large objects" anti-pattern) is copied
    again and again. Over :data:`LARGE_DEFINITION` bytes it is warned about; too large, it is refused
    (and measured again at its next ``.remote()``).

    Raises:
        InvalidArgumentError: it pickles to the refusal threshold or more.
    """
    try:
        if fn in _sized:
            return
    except TypeError:  # not weakly referable (a callable object): not measured
        return
    from muster.core import serialization

    try:
        body, buffers = serialization.dumps(fn)
    except Exception:  # noqa: BLE001 - submitting it reports that, with the task's name
        return
    size = body.nbytes + sum(b.raw().nbytes for b in buffers)
    _check(f"The remote function {getattr(fn, '__qualname__', fn)}", size, stacklevel=4)
    _sized.add(fn)


def check_class(cls: type, size: int) -> None:
    """Measure an actor class that pickles to ``size`` bytes, once, as :func:`check_function` does."""
    if cls not in _sized:
        _check(f"The actor class {cls.__name__}", size, stacklevel=7)
        _sized.add(cls)


def _check(what: str, size: int, stacklevel: int) -> None:
    advice = ("it likely captures a big object (an array, a model) from its closure or module globals, which "
              "then travels with it. Create the object inside it, or muster.put() it once and pass the ref as an "
              "argument.")
    limit = _too_large()
    if size >= limit:
        raise InvalidArgumentError(
            f"{what} is too large to send ({size / 2**20:.0f} MiB pickled, the limit is {limit / 2**20:.0f} MiB, "
            f"FUNCTION_SIZE_ERROR_THRESHOLD={limit}): {advice}")
    if size > LARGE_DEFINITION:
        warnings.warn(f"{what} is very large ({size / 2**20:.0f} MiB pickled): {advice}", UserWarning,
                      stacklevel=stacklevel)


def _too_large() -> int:
    """The refusal threshold in bytes: Ray's ``FUNCTION_SIZE_ERROR_THRESHOLD`` from the environment, or 100 MB."""
    raw = os.environ.get("FUNCTION_SIZE_ERROR_THRESHOLD", "")
    try:
        return int(raw) if raw else TOO_LARGE_DEFAULT
    except ValueError:
        raise InvalidArgumentError(
            f"FUNCTION_SIZE_ERROR_THRESHOLD={raw!r} in the environment is not a whole number of bytes: set it to "
            f"one (Ray's default is {TOO_LARGE_DEFAULT}) or unset it.") from None
