"""Ray's actor concurrency groups: ``@muster.remote(concurrency_groups={"io": 2})`` gives an actor
named groups, each with a limit of its own on how many of its calls run at once.

A method joins a group with ``@muster.method(concurrency_group="io")``, and one call can pick
another with ``actor.m.options(concurrency_group="compute").remote()``; every other call is in the
default group, whose limit is the actor's ``max_concurrency`` (1000 for an async actor, else 1).
Calls of one group never wait for another group's: in a threaded actor each group is a thread
pool of its size; in an async actor each group has an event loop of its own, on a thread of its
own, and a semaphore of its size on it (as in Ray), so a call that blocks its group's loop (a
``time.sleep`` in an ``async def``) holds up only that group. The default group's loop is the one
the constructor ran on.

Ray's system groups (:data:`SYSTEM_GROUPS`, size 1 each), which Ray's own libraries pick with
``actor.__ray_call__.options(concurrency_group="_ray_system")``, are accepted on every actor: a
concurrent actor runs their calls where it runs Ray's built-in methods beside its groups, on a
thread of its own (one call at a time); a plain actor runs every call in order anyway.

The driver checks the groups (:func:`declared`, :func:`check`); the actor's process keeps their
limits (:func:`limits`, and :class:`Places` in an async actor).
"""

from __future__ import annotations

import asyncio
import collections
import threading
from typing import Any, Callable, TypeVar

from muster.exceptions import InvalidArgumentError
from muster.tasks import actor_method

T = TypeVar("T")
#: Ray's own groups, which its libraries name on any actor (Ray declares them with tensor transport)
SYSTEM_GROUPS = ("_ray_system", "_ray_system_error")


def method_groups(cls: type) -> dict[str, str]:
    """The methods of ``cls`` that ``@muster.method(concurrency_group=...)`` put in a group -> that group."""
    out: dict[str, str] = {}
    for name in dir(cls):
        options = actor_method.declared(cls, name)
        if options.get("concurrency_group") is not None:
            out[name] = options["concurrency_group"]
    return out


def declared(cls: type, groups: Any) -> dict[str, int]:
    """The actor's ``concurrency_groups`` (none: ``{}``), checked with the groups its methods name.

    Raises:
        InvalidArgumentError: not a dict of group name -> limit >= 1, or a method names a group
            that is not one of them (Ray fails the actor then too).
    """
    if not groups:
        groups = {}
    if not isinstance(groups, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 1 for k, v in groups.items()
    ):
        raise InvalidArgumentError(
            f"actor {cls.__name__}: concurrency_groups={groups!r}; pass a dict of group name -> max concurrency "
            "(an int >= 1), e.g. concurrency_groups={'io': 2, 'compute': 4}."
        )
    for method, group in sorted(method_groups(cls).items()):
        check(cls.__name__, group, groups, f"@muster.method(concurrency_group={group!r}) on {method}")
    return dict(groups)


def check(actor: str, group: str | None, groups: dict[str, int], where: str) -> None:
    """Raise unless ``group`` (None: the default group) is one of the actor's ``groups`` or Ray's system ones."""
    if group is None or group in groups or group in SYSTEM_GROUPS:
        return
    have = f"its groups are {sorted(groups)}" if groups else "it declares none"
    raise InvalidArgumentError(
        f"actor {actor}: {where} names the concurrency group {group!r}, which the actor does not have ({have}); "
        f"name one of its groups, or declare it: @muster.remote(concurrency_groups={{{group!r}: N}})."
    )


def limits(max_concurrency: int, groups: dict[str, int], make: Callable[[int, str | None], T]) -> dict[str | None, T]:
    """One limiter per group, made by ``make(size, name)``: the default group's (name and key None) has
    ``max_concurrency``."""
    out: dict[str | None, T] = {None: make(max_concurrency, None)}
    for name, size in groups.items():
        out[name] = make(size, name)
    return out



class Places:
    """The places of one group of an async actor: its coroutines take one on the group's event loop
    (:meth:`take`), and a built-in method run beside the loop takes one from any thread
    (:meth:`try_take`), so both count against the group's size. Thread-safe."""

    def __init__(self, size: int, loop: asyncio.AbstractEventLoop):
        self._free, self._loop = size, loop
        self._lock = threading.Lock()
        self._waiters: collections.deque[asyncio.Future] = collections.deque()  # on ``loop``, oldest first

    def try_take(self) -> bool:
        """Take a place if one is free and no coroutine waits for one."""
        with self._lock:
            if self._free > 0 and not self._waiters:
                self._free -= 1
                return True
            return False

    async def take(self) -> None:
        """Wait for a place (on the group's loop) and take it."""
        while True:
            with self._lock:
                if self._free > 0:
                    self._free -= 1
                    return
                waiter = self._loop.create_future()
                self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                with self._lock:
                    if waiter in self._waiters:
                        self._waiters.remove(waiter)
                    elif self._free > 0:  # woken for a place it will not take: wake the next
                        self._wake_next()
                raise

    def give_back(self) -> None:
        """Free a place (from any thread) and wake the oldest coroutine waiting for one."""
        with self._lock:
            self._free += 1
            self._wake_next()

    def _wake_next(self) -> None:  # holds the lock
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._loop.call_soon_threadsafe(_wake, waiter)
                return


def _wake(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)
