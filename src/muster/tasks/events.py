"""Messages a task or actor process sends its owner (the driver), one frozen dataclass each.

The driver's :func:`muster.tasks.owner.handle_event` dispatches on their
type.  (The older requests - ``get``, ``put``, ``submit``... - are dicts with
a ``"kind"``; these newer ones are types.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TaskStarted:
    """A task began running in this worker (lets ``cancel`` find the process)."""

    task_id: str


@dataclass(frozen=True)
class ActorCallDone:
    """A call on an async or threaded actor finished (its reply travels as an event)."""

    actor_id: int
    token: int
    ok: bool
    value: Any


@dataclass(frozen=True)
class Cancel:
    """``muster.cancel(ref)`` called inside a worker."""

    ref_id: int
    force: bool


@dataclass(frozen=True)
class GetActor:
    """``muster.get_actor(name)`` inside a worker: the actor's id, or None."""

    name: str
    namespace: str | None


@dataclass(frozen=True)
class ListNamedActors:
    """``list_named_actors()`` inside a worker."""

    all_namespaces: bool
