"""User functions handed to ``ray.data``, wrapped to fail the way they fail on muster's own engine.

On the embedded engine a user function that raises becomes ``UserFunctionError``
naming the operator, the function and the failing batch's first row, and a
``map`` that returns a non-dict is a ``DataTypeError`` saying what came back.
Ray reports both as its own ``UserCodeException`` around a remote traceback.
These wrappers raise muster's errors inside Ray's workers, and
:func:`reraise` unwraps them again on the consumer, so a script gets the same
error on either engine.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable, Iterator, TypeVar

from muster.data import block as blk
from muster.data.exceptions import DataError, DataTypeError, UserFunctionError
from muster.data.plan import fn_name

T = TypeVar("T")

#: ``ray.data`` methods whose first argument is a user function, and the operator name muster's errors use.
GUARDED = {"map": "Map", "flat_map": "FlatMap", "filter": "Filter", "map_batches": "MapBatches"}


def guard(method: str, fn: Any) -> Any:
    """``fn`` as ``ray.data.Dataset.<method>`` should receive it: raising muster's errors."""
    op = GUARDED[method]
    if isinstance(fn, type):
        return _guarded_class(fn, op)
    return _guarded_function(fn, op, method)


def _failed(op: str, fn: Any, exc: Exception, first_row: str) -> UserFunctionError:
    return UserFunctionError(f"{op} failed in {fn_name(fn)}: {type(exc).__name__}: {exc}. "
                             f"The failing batch's first row: {first_row}")


def _first_row_of_batch(batch: Any) -> str:
    try:
        return blk.first_row(blk.from_batch(batch, "batch"))
    except Exception:  # noqa: BLE001 - a batch we cannot show: say so rather than hide the real error
        return f"(a {type(batch).__name__} muster cannot show)"


def _guarded_function(fn: Callable, op: str, method: str) -> Callable:
    rows = method != "map_batches"

    @functools.wraps(fn)
    def call(item: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            out = fn(item, *args, **kwargs)
        except DataError:
            raise
        except Exception as exc:
            raise _failed(op, fn, exc, blk._short(item) if rows else _first_row_of_batch(item)) from exc
        if method == "map":
            blk.rows_to_block([out], f"map({fn_name(fn)})")  # a non-dict: DataTypeError saying what came back
        return out

    return call


def _guarded_class(cls: type, op: str) -> type:
    """A subclass-free stand-in for ``cls`` (Ray builds it once per actor): same name, guarded calls."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            self._inner = cls(*args, **kwargs)
        except Exception as exc:
            raise _failed(f"{op} (constructor)", cls, exc, "(empty batch)") from exc

    def __call__(self: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._inner(batch, *args, **kwargs)
        except DataError:
            raise
        except Exception as exc:
            raise _failed(op, cls, exc, _first_row_of_batch(batch)) from exc

    return type(cls.__name__, (), {"__init__": __init__, "__call__": __call__})


_CARRIED = re.compile(r"muster\.data\.exceptions\.(UserFunctionError|DataTypeError): (.+)")


def reraise(exc: BaseException) -> None:
    """Raise the muster data error that ``exc`` (a Ray error) carries, if it carries one.

    Ray hands back a ``RayTaskError(UserCodeException)`` whose pickled cause has
    lost its ``__cause__`` (exceptions pickle their arguments only), so after the
    chain the error is found in the remote traceback's text, which names it.
    """
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, DataError):
            raise cur.with_traceback(None) from None
        seen.add(id(cur))
        nxt = getattr(cur, "cause", None)
        cur = nxt if isinstance(nxt, BaseException) else (cur.__cause__ or cur.__context__)
    found = _CARRIED.search(str(exc))
    if found is not None:
        kind = UserFunctionError if found.group(1) == "UserFunctionError" else DataTypeError
        raise kind(found.group(2).strip()) from exc


def unwrapped(items: Iterator[T]) -> Iterator[T]:
    """``items`` (produced by Ray), with a Ray error that carries a muster data error raised as that error."""
    try:
        yield from items
    except DataError:
        raise
    except Exception as exc:
        reraise(exc)
        raise
