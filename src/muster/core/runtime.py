"""The runtime seam: the one interface every library above ``core/`` uses.

Two engines implement it: the embedded local engine (``core/local``) and,
for clusters, an adapter onto Ray.  Nothing above ``core/`` may import
``multiprocessing`` or ``ray``; it asks the ``Runtime`` instead.

Contract, for implementers:

* Resources are plain dicts of floats: ``{"CPU": 1, "GPU": 1, "my_tag": 2}``.
* ``create_gang`` is all or nothing: it returns ``n`` live actors holding
  their resources, or raises.  If the request can *never* be satisfied it
  raises ``ResourcesUnavailableError`` at once; if it is only busy it waits
  (calling ``on_wait`` with a sentence saying what it waits for).
* An ``ActorHandle``'s calls run one at a time, in submission order, in the
  actor's own process.  A call returns a ``concurrent.futures.Future``.
  When the process dies, every pending and later call fails with
  ``ActorDiedError``.
* Actors may send *events* to the driver while a call runs (training
  reports use this).  A handler may return a ``Future``: the actor gets
  the reply when it completes.  Events from one actor reach ``on_event`` in the order
  they were sent, and always before the actor's death is reported: a
  report that left the worker is never lost behind the failure it preceded.
* All methods are thread-safe.
"""

from __future__ import annotations

import abc
import contextlib
from concurrent.futures import Future
from typing import Any, Callable, ContextManager

Resources = dict[str, float]
EventHandler = Callable[["ActorHandle", Any], Any]
DeathHandler = Callable[["ActorHandle", BaseException], None]


class ActorHandle(abc.ABC):
    """A live actor: one process (or Ray actor) running one object."""

    pid: int | None
    node_id: str
    label: str

    @abc.abstractmethod
    def call(self, method: str, *args: Any, **kwargs: Any) -> Future:
        """Run ``obj.method(*args, **kwargs)`` in the actor; return its future."""

    @abc.abstractmethod
    def set_handlers(self, on_event: EventHandler | None, on_death: DeathHandler | None) -> None:
        """Route this actor's events and its death notice to the given callbacks.

        ``on_event``'s return value is sent back to the actor when it asked
        for a reply.  ``on_death`` runs once, after every event sent before
        the death has been handled.
        """

    @abc.abstractmethod
    def is_alive(self) -> bool: ...

    @property
    @abc.abstractmethod
    def gpu_ids(self) -> list[int]:
        """GPU ids this actor holds (what it sees as CUDA_VISIBLE_DEVICES)."""


class Runtime(abc.ABC):
    """An engine that runs functions and actors under resource limits."""

    name: str

    @abc.abstractmethod
    def resources(self) -> Resources:
        """Everything the engine has, free or not."""

    @abc.abstractmethod
    def available(self) -> Resources:
        """What is free now."""

    @abc.abstractmethod
    def submit(
        self,
        fn: Callable[..., Any],
        args: tuple,
        kwargs: dict,
        resources: Resources,
        on_event: EventHandler | None = None,
        label: str = "task",
    ) -> Future:
        """Run ``fn(*args, **kwargs)`` once its resources are free; its events go to ``on_event``."""

    @abc.abstractmethod
    def create_actor(
        self,
        cls: type,
        args: tuple,
        kwargs: dict,
        resources: Resources,
        label: str = "",
        on_event: EventHandler | None = None,
    ) -> ActorHandle:
        """Start one actor of ``cls`` holding ``resources`` (``on_event`` is live during ``__init__``)."""

    def capacity(self, request: Resources) -> int:
        """How many more actors holding ``request`` would fit in what is free now."""
        free = self.available()
        counts = [int(free.get(k, 0.0) / v + 1e-9) for k, v in request.items() if v > 0]
        return min(counts) if counts else 0

    def blocked(self, handle: ActorHandle) -> ContextManager[None]:
        """Context for an actor that waits on other work: its CPUs may be lent out meanwhile."""
        return contextlib.nullcontext()

    @abc.abstractmethod
    def create_gang(
        self,
        n: int,
        cls: type,
        resources_per_member: Resources,
        strategy: str = "PACK",
        env: dict[str, str] | None = None,
        on_wait: Callable[[str], None] | None = None,
        timeout_s: float | None = None,
    ) -> list[ActorHandle]:
        """Start ``n`` actors of ``cls`` together, all or nothing."""

    @abc.abstractmethod
    def kill(self, handle: ActorHandle, grace_s: float = 0.0) -> None:
        """End an actor's process and free its resources (force after ``grace_s``)."""

    @abc.abstractmethod
    def exit_status(self, handle: ActorHandle, timeout_s: float = 0.5) -> int | None:
        """The dead actor's exit code (negative: signal), waiting up to ``timeout_s``."""

    @abc.abstractmethod
    def shutdown(self) -> None:
        """Stop every process the engine started. Idempotent."""
