"""An actor handle inside a worker (``WorkerActorHandle``), and what a handle knows of its actor's class.

The driver owns every actor (:mod:`muster.tasks.actor`); a worker's handle sends its calls and kills
there as events. Handles pickle to their actor's id, and become the driver's ``ActorHandle`` or a
worker's ``WorkerActorHandle`` where they land.
"""

from __future__ import annotations

from typing import Any

from muster.core import context as core_context
from muster.exceptions import methods_of, no_such_method
from muster.tasks import events, worker_side
from muster.tasks.actor_method import ActorMethod

#: what a handle sent to a worker knows of its actor's class: its name and its public methods
Shape = tuple[str, tuple[str, ...]]


def shape_of(cls: type) -> Shape:
    return cls.__name__, tuple(methods_of(cls))


def no_method(shape: Shape, name: str) -> AttributeError:
    """Ray's AttributeError for ``handle.name`` that the actor's class lacks, naming the methods it has."""
    cls_name, methods = shape
    return AttributeError(f"Actor {cls_name} has no method {name!r}; {no_such_method(name, list(methods))}. "
                          f"Fix: call one of them (handle.<method>.remote(...)) or define {name!r} in {cls_name}.")


class WorkerActorHandle:
    """An actor handle inside a worker: calls go through the driver, which owns the actor."""

    def __init__(self, actor_id: int, cls: type | None = None, shape: Shape | None = None):
        self._id, self._cls = actor_id, cls
        self._shape = shape_of(cls) if shape is None and cls is not None else shape  # None: not known here

    def __getattr__(self, name: str) -> ActorMethod:
        builtin = name in worker_side.RAY_BUILTINS  # every actor has them, as in Ray
        if name.startswith("_") and not builtin:
            raise AttributeError(name)
        if self._shape is not None and name not in self._shape[1] and not builtin:  # else Ray's has its methods only
            raise no_method(self._shape, name)
        return ActorMethod(self, name)

    def _call(self, method: str, args: tuple, kwargs: dict, options: dict[str, Any] | None = None) -> Any:
        from muster.tasks.generators import shaped

        return shaped(core_context.send_event(
            events.ActorCall(self._id, method, args, kwargs, options or {}, worker_side.current_task_id())))

    def _kill(self, no_restart: bool = True) -> None:
        core_context.send_event(events.Kill(self._id, no_restart))

    def __reduce__(self) -> Any:
        from muster.tasks.actor import _handle_from_id  # (it gives the driver its ActorHandle)

        return (_handle_from_id, (self._id, self._shape))

    def __repr__(self) -> str:
        return f"ActorHandle(id={self._id})"
