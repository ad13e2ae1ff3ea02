"""Messages a task or actor process sends its owner (the driver), one frozen dataclass each.

The driver's :func:`muster.tasks.owner.handle_event` dispatches on their
type; every request a worker makes of the tasks layer is listed here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Resources:
    """``cluster_resources()`` (or, with ``available``, ``available_resources()``) inside a worker."""

    available: bool


@dataclass(frozen=True)
class Put:
    """``muster.put(value)`` inside a worker: the new ref's id (``failed``: a ref whose get raises ``value``)."""

    value: Any
    failed: bool = False


@dataclass(frozen=True)
class Streamed:
    """The owner's reply to a Submit or ActorCall that streams: the id of the ref to the items' list."""

    ref: int


@dataclass(frozen=True)
class Yielded:
    """A streaming generator task yielded its ``index``-th item (sent as it is yielded)."""

    task_id: str
    index: int
    value: Any


@dataclass(frozen=True)
class StreamEnd:
    """What a streaming generator task returns: how many items it sent (the last may be a
    ``GeneratorRaised``). The owner ends the stream once it holds that many."""

    count: int


@dataclass(frozen=True)
class Get:
    """``muster.get(refs)``: one ``(ok, value or error)`` per id."""

    ids: list[int]
    timeout: float | None


@dataclass(frozen=True)
class Wait:
    """``muster.wait(refs)``: the ids that are ready."""

    ids: list[int]
    num_returns: int
    timeout: float | None


@dataclass(frozen=True)
class Submit:
    """``f.remote(...)`` inside a worker: the ref id(s)."""

    fn: Any
    args: tuple
    kwargs: dict
    options: dict
    parent: str | None = None  # the id of the task or actor call that submitted it (Ray's parent task)


@dataclass(frozen=True)
class CreateActor:
    """``Cls.remote(...)`` inside a worker: the actor's id."""

    cls: type
    args: tuple
    kwargs: dict
    options: dict


@dataclass(frozen=True)
class ActorCall:
    """``handle.method.remote(...)`` inside a worker: the ref id(s)."""

    actor: int
    method: str
    args: tuple
    kwargs: dict
    options: dict  # the call's .options(...) (num_returns, concurrency_group, max_task_retries, ...)
    parent: str | None = None  # the id of the task or actor call that made it


@dataclass(frozen=True)
class Kill:
    """``muster.kill(handle)`` inside a worker."""

    actor: int
    no_restart: bool


@dataclass(frozen=True)
class ExitActor:
    """``muster.actor.exit_actor()`` in an actor: it ends on purpose (no restart); its process exits next."""

    actor: int


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
    recursive: bool = True


@dataclass(frozen=True)
class IsCanceled:
    """``get_runtime_context().is_canceled()`` in a worker: whether ``muster.cancel`` was called on the
    task ``task_id``, or (``task_id`` None) on the call ``token`` of actor ``actor``."""

    task_id: str | None
    actor: int
    token: int


@dataclass(frozen=True)
class CallCancelled:
    """The other way: the owner tells a plain actor's process, beside the call it runs, that
    ``muster.cancel`` reached its call ``token`` (``RuntimeActor.notify``)."""

    token: int


@dataclass(frozen=True)
class GetActor:
    """``muster.get_actor(name)`` inside a worker: the actor's id, or None."""

    name: str
    namespace: str | None


@dataclass(frozen=True)
class ListNamedActors:
    """``list_named_actors()`` inside a worker."""

    all_namespaces: bool


@dataclass(frozen=True)
class ListActors:
    """``muster.util.state.list_actors()`` (or ``get_actor``/``summarize_actors``) inside a worker."""


@dataclass(frozen=True)
class TaskOfRef:
    """``ref.task_id()`` inside a worker: the id of the task that returned ref ``ref_id`` (None: none known)."""

    ref_id: int


@dataclass(frozen=True)
class ListTasks:
    """``muster.util.state.list_tasks()`` (or ``get_task``/``summarize_tasks``) inside a worker."""
