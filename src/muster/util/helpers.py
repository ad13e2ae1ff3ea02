"""Ray's ``ray.util.as_completed`` and ``map_unordered``: results as their tasks finish, with a bound on
the tasks in flight (the "limit pending tasks" pattern), instead of ``get`` in a loop."""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Sequence

from muster.exceptions import InvalidArgumentError

DEFAULT_CHUNK_SIZE = 10
DEFAULT_BACKPRESSURE_SIZE = 100


def _check(chunk_size: int, wait_args: dict[str, Any], where: str) -> None:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise InvalidArgumentError(f"{where}(chunk_size={chunk_size!r}): pass an integer >= 1, the results "
                                   "waited for at a time.")
    if "num_returns" in wait_args:
        raise InvalidArgumentError(f"{where}(num_returns=...): pass chunk_size= instead (as Ray asks).")


def _next_batch(refs: list[Any], chunk_size: int, yield_obj_refs: bool, wait_args: dict[str, Any]
                ) -> tuple[list[Any], list[Any]]:
    """(the results, or refs, of the next ``chunk_size`` finished tasks; the refs still running)."""
    from muster.tasks.objects import get, wait

    ready, rest = wait(refs, num_returns=min(chunk_size, len(refs)), **wait_args)
    return (ready if yield_obj_refs else get(ready)) if ready else [], rest


def as_completed(refs: Sequence[Any], *, chunk_size: int = DEFAULT_CHUNK_SIZE, yield_obj_refs: bool = False,
                 **wait_args: Any) -> Iterator[Any]:
    """Yield the results of ``refs`` (or the refs, with ``yield_obj_refs=True``) as their tasks finish,
    ``chunk_size`` at a time; ``wait_args`` (``timeout``, ``fetch_local``) go to each ``wait``."""
    _check(chunk_size, wait_args, "as_completed")
    pending = list(refs)
    while pending:
        results, pending = _next_batch(pending, chunk_size, yield_obj_refs, wait_args)
        yield from results


def map_unordered(fn: Any, items: Iterable[Any], *, backpressure_size: int | None = DEFAULT_BACKPRESSURE_SIZE,
                  chunk_size: int = DEFAULT_CHUNK_SIZE, yield_obj_refs: bool = False,
                  **wait_args: Any) -> Iterator[Any]:
    """``fn.remote(item)`` for each item, at most ``backpressure_size`` running at once (None: no bound),
    yielding the results as they finish (in no set order)."""
    _check(chunk_size, wait_args, "map_unordered")
    if backpressure_size is not None and (isinstance(backpressure_size, bool) or
                                          not isinstance(backpressure_size, int) or backpressure_size < 1):
        raise InvalidArgumentError(f"map_unordered(backpressure_size={backpressure_size!r}): pass a positive "
                                   "number of tasks in flight, or None for no bound.")
    bound = float("inf") if backpressure_size is None else backpressure_size
    pending: list[Any] = []
    for item in items:
        pending.append(fn.remote(item))
        if len(pending) >= bound:
            results, pending = _next_batch(pending, chunk_size, yield_obj_refs, wait_args)
            yield from results
    yield from as_completed(pending, chunk_size=chunk_size, yield_obj_refs=yield_obj_refs, **wait_args)


_logged: set[str] = set()


def log_once(key: str) -> bool:
    """True the first time it is called with ``key`` in this process, False after (Ray's helper)."""
    if key in _logged:
        return False
    _logged.add(key)
    return True
