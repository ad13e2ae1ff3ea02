"""Ray Data's compute strategies, the older spelling of ``concurrency=``.

``map_batches(fn, compute=ActorPoolStrategy(size=2))`` is ``concurrency=2``;
``ActorPoolStrategy(min_size=1, max_size=4)`` is ``concurrency=(1, 4)``;
``TaskPoolStrategy(size=n)`` limits a function's tasks to ``n`` at once.
"""

from __future__ import annotations

import difflib
import os
from typing import Any, Iterable

from muster.exceptions import InvalidArgumentError, InvalidTypeError


def _count(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidArgumentError(f"{what}={value!r}: use a positive integer.")
    return value


class ActorPoolStrategy:
    """A pool of actors for a callable class: ``size`` of them, or between ``min_size`` and ``max_size``
    (no ``max_size``: up to the machine's CPUs)."""

    def __init__(self, *, size: int | None = None, min_size: int | None = None, max_size: int | None = None,
                 **_ray_only: Any):
        _count(size, "ActorPoolStrategy(size")
        _count(min_size, "ActorPoolStrategy(min_size")
        _count(max_size, "ActorPoolStrategy(max_size")
        if size is not None and (min_size is not None or max_size is not None):
            raise InvalidArgumentError("ActorPoolStrategy: pass size=, or min_size= and max_size=, not both.")
        if size is None and min_size is not None and max_size is not None and min_size > max_size:
            raise InvalidArgumentError(f"ActorPoolStrategy(min_size={min_size}, max_size={max_size}): "
                                       "min_size > max_size.")
        self.size, self.min_size, self.max_size = size, min_size, max_size

    @property
    def concurrency(self) -> int | tuple[int, int]:
        if self.size is not None:
            return self.size
        low = self.min_size or 1
        return (low, self.max_size if self.max_size is not None else max(low, os.cpu_count() or 1))

    def __repr__(self) -> str:
        return f"ActorPoolStrategy(concurrency={self.concurrency!r})"


class TaskPoolStrategy:
    """Tasks for a function, at most ``size`` at once (no limit when None)."""

    def __init__(self, size: int | None = None):
        self.size = _count(size, "TaskPoolStrategy(size")

    @property
    def concurrency(self) -> int | None:
        return self.size

    def __repr__(self) -> str:
        return f"TaskPoolStrategy(size={self.size!r})"


def check_range_is_for_a_class(fn: Any, concurrency: Any, where: str) -> None:
    """Refuse a ``(min, max)`` concurrency for a function, as Ray does: a range sizes an actor pool.

    Raises:
        InvalidArgumentError: naming the range and the fix (an int: the function's tasks at once).
    """
    if isinstance(concurrency, tuple) and not isinstance(fn, type):
        raise InvalidArgumentError(
            f"{where}(concurrency={concurrency!r}): a (min, max) range sizes an actor pool, but fn "
            f"{getattr(fn, '__name__', fn)!r} is a function, not a callable class. Pass an int for a function "
            f"(at most that many of its tasks at once, e.g. concurrency={concurrency[1]}), or make fn a callable "
            "class.")


def concurrency_of(compute: Any, concurrency: Any, where: str) -> Any:
    """``concurrency=``, or what Ray's older ``compute=`` strategy says; checked."""
    if compute is not None:
        if concurrency is not None:
            raise InvalidArgumentError(f"{where}(compute=..., concurrency=...): pass one of the two (concurrency=).")
        if not isinstance(compute, (ActorPoolStrategy, TaskPoolStrategy)):
            raise InvalidTypeError(
                f"{where}(compute={compute!r}): pass muster.data.ActorPoolStrategy(size=n) or "
                "TaskPoolStrategy(size=n), or concurrency=n."
            )
        concurrency = compute.concurrency
    ok = concurrency is None or (isinstance(concurrency, int) and concurrency >= 1) or (
        isinstance(concurrency, tuple) and len(concurrency) == 2 and all(isinstance(c, int) for c in concurrency)
        and 1 <= concurrency[0] <= concurrency[1])
    if not ok:
        raise InvalidArgumentError(f"{where}(concurrency={concurrency!r}): use a positive int or a (min, max) tuple.")
    return concurrency


def task_options(where: str, compute: Any = None, concurrency: Any = None, num_cpus: Any = None,
                 num_gpus: Any = None, memory: Any = None) -> Any:
    """Ray's task options of a map (``map_batches``, the row and column operations), checked: the
    concurrency they give (``concurrency=``, or ``compute=``'s), ``num_cpus``/``num_gpus``/``memory`` numbers
    >= 0 or None."""
    for name, value in (("num_cpus", num_cpus), ("num_gpus", num_gpus), ("memory", memory)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
            raise InvalidArgumentError(f"{where}({name}={value!r}): use a number >= 0.")
    return concurrency_of(compute, concurrency, where)


#: the keywords a map takes besides Ray's task and actor options (its ``**ray_remote_args``, which Ray hands
#: to ``ray.remote``): Ray Data's own map options
_MAP_OPTIONS = {"compute", "concurrency", "num_cpus", "num_gpus", "memory", "fn_constructor_args",
                "fn_constructor_kwargs", "zero_copy_batch", "batch_size", "batch_format", "udf_modifying_row_count",
                "ray_remote_args_fn", "label_selector", "fallback_strategy", "max_calls", "resources",
                "accelerator_type", "runtime_env"}


def check_remote_args(where: str, options: dict[str, Any], named: Iterable[str] = (),
                      only: Iterable[str] | None = None) -> None:
    """Refuse keywords of ``where`` that are none of Ray's task options (nor a map's own options), as Ray's
    ``ray.remote`` refuses them: a misspelt ``batchsize=`` was taken and dropped. ``named``: the call's own
    parameters (for a "did you mean"); ``only``: the extra keywords it takes instead (a call that hands none
    to Ray, such as ``groupby``).

    Raises:
        InvalidTypeError: naming the unknown keywords, and the closest known name of each.
    """
    from muster.tasks import options as task_options

    known = set(only) if only is not None else task_options.TASK_OPTIONS | task_options.ACTOR_OPTIONS | _MAP_OPTIONS
    unknown = sorted(set(options) - known)
    if not unknown:
        return
    names = sorted(known | set(named))
    hints = [f"{u!r}: did you mean {close[0]!r}?" for u in unknown
             for close in [difflib.get_close_matches(u, names, n=1)] if close]
    takes = ("Ray's task options (num_cpus=, memory=, resources=, ...)" if only is None
             else f"only {sorted(known)}" if known else "no other keyword")
    raise InvalidTypeError(f"{where}() got unexpected keyword argument(s) {unknown}: beside its own parameters it "
                           f"takes {takes}, as in Ray. {' '.join(hints)}".rstrip())
