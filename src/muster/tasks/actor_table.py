"""The actors of the running engine as rows of Ray's state API (``ray.util.state.list_actors``).

The driver keeps every actor handle it made (an actor a task or actor starts is made there too), dead ones
included, so the table lists them all, as Ray's GCS does; a worker asks the driver (``events.ListActors``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from muster.core import context as core_context
from muster.core.api import is_current
from muster.tasks import events
from muster.tasks import runtime_context as rc

_KEEP_DEAD = 1000  # the library actors that ended, kept for the table (Ray's GCS keeps dead actors too)


@dataclass
class _LibraryActor:
    """A library's actor that is no muster actor (a training worker): what its row shows."""

    identity: rc.WorkerIdentity
    class_name: str
    handle: Any  # the engine's RuntimeActor; None once its library stopped it (its handlers hold the run)
    engine: Any
    resources: dict[str, float]
    namespace: str
    pid: int
    node_id: str
    stopped: str | None = None  # why it was stopped, when its library stopped it

    def alive(self) -> bool:
        return self.handle is not None and self.handle.is_alive()


_library: dict[str, _LibraryActor] = {}
_library_lock = threading.Lock()


def add_library_actor(identity: rc.WorkerIdentity, class_name: str, handle: Any, engine: Any,
                      resources: dict[str, float]) -> None:
    """List a library's worker (``RayTrainWorker``, as Ray names its Train workers) among the actors."""
    from muster.core.init_options import current_namespace

    node = handle.node_id if engine.name == "ray" else rc.node_id()
    with _library_lock:
        _library[identity.actor_id] = _LibraryActor(identity, class_name, handle, engine,
                                                    {k: float(v) for k, v in resources.items() if v},
                                                    current_namespace(), handle.pid or 0, node)
        dead = [k for k, a in _library.items() if a.handle is None]
        for k in dead[: max(0, len(dead) - _KEEP_DEAD)]:
            del _library[k]


def library_actor_stopped(actor_id: str, why: str) -> None:
    """Its library stopped it (the run ended): its row is DEAD and says why. The handle is let go, so a
    finished run is not kept alive by its rows."""
    with _library_lock:
        if actor_id in _library:
            _library[actor_id].stopped, _library[actor_id].handle = why, None


def actor_rows() -> list[dict[str, Any]]:
    """One dict per actor of the running engine, with the columns of Ray's ``ActorState``, by actor id."""
    if core_context.in_worker():
        return list(core_context.send_event(events.ListActors()))
    from muster.tasks.actor import _actors, _lock

    with _lock:
        handles = [h for h in _actors.values() if is_current(h._engine)]
    with _library_lock:
        library = [a for a in _library.values() if is_current(a.engine)]
    return sorted([_row(h) for h in handles] + [_library_row(a) for a in library], key=lambda row: row["actor_id"])


def _library_row(actor: _LibraryActor) -> dict[str, Any]:
    alive = actor.alive()
    why = actor.stopped or "its process exited"
    return {
        **_BLANK,
        "actor_id": actor.identity.actor_id,
        "class_name": actor.class_name,
        "state": "ALIVE" if alive else "DEAD",
        "job_id": actor.identity.job_id,
        "node_id": actor.node_id,
        "pid": actor.pid,
        "ray_namespace": actor.namespace,
        "required_resources": actor.resources,
        "death_cause": None if alive else {"actor_died_error_context": {"error_message": why,
                                                                        "class_name": actor.class_name}},
    }


def _state(handle: Any) -> str:
    if handle._dead is not None:
        return "DEAD"
    if handle._core.done():
        return "ALIVE"
    return "RESTARTING" if handle._attempt > 0 else "PENDING_CREATION"


def _row(handle: Any) -> dict[str, Any]:
    state = _state(handle)
    core = handle._core.result() if handle._core.done() and handle._core.exception() is None else None
    death = None
    if handle._dead is not None:
        death = {"actor_died_error_context": {"error_message": str(handle._dead),
                                              "class_name": handle._cls.__name__}}
    group = handle._placement_group
    return {
        **_BLANK,
        "actor_id": rc.actor_hex_id(rc.driver_job_id(), handle._id),
        "class_name": handle._cls.__name__,
        "state": state,
        "job_id": rc.driver_job_id(),
        "name": handle._name or "",
        # on a Ray cluster the node Ray placed it on; the embedded engine's one node otherwise
        "node_id": None if core is None else (core.node_id if handle._engine.name == "ray" else rc.node_id()),
        "pid": (getattr(core, "pid", None) or 0) if core is not None else 0,
        "ray_namespace": handle._namespace,
        "required_resources": {k: v for k, v in handle._resources.items() if v},
        "death_cause": death,
        "is_detached": handle._detached,
        "placement_group_id": None if group is None else group.id,
        "num_restarts": handle._attempt,
    }


# the columns every row has, with the value of an actor that sets none of them
_BLANK: dict[str, Any] = {
    "name": "", "serialized_runtime_env": None, "is_detached": False, "placement_group_id": None, "repr_name": "",
    "num_restarts": 0, "num_restarts_due_to_lineage_reconstruction": 0, "num_restarts_due_to_node_preemption": 0,
    "call_site": None, "label_selector": None, "fallback_strategy": None,
}
