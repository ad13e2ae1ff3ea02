"""The actors of the running engine as rows of Ray's state API (``ray.util.state.list_actors``).

The driver keeps every actor handle it made (an actor a task or actor starts is made there too), dead ones
included, so the table lists them all, as Ray's GCS does; a worker asks the driver (``events.ListActors``).
"""

from __future__ import annotations

from typing import Any

from muster.core import context as core_context
from muster.core.api import is_current
from muster.tasks import events
from muster.tasks import runtime_context as rc


def actor_rows() -> list[dict[str, Any]]:
    """One dict per actor of the running engine, with the columns of Ray's ``ActorState``, by actor id."""
    if core_context.in_worker():
        return list(core_context.send_event(events.ListActors()))
    from muster.tasks.actor import _actors, _lock

    with _lock:
        handles = [h for h in _actors.values() if is_current(h._engine)]
    return sorted((_row(h) for h in handles), key=lambda row: row["actor_id"])


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
        "actor_id": rc.actor_hex_id(rc.driver_job_id(), handle._id),
        "class_name": handle._cls.__name__,
        "state": state,
        "job_id": rc.driver_job_id(),
        "name": handle._name or "",
        # on a Ray cluster the node Ray placed it on; the embedded engine's one node otherwise
        "node_id": None if core is None else (core.node_id if handle._engine.name == "ray" else rc.node_id()),
        "pid": (getattr(core, "pid", None) or 0) if core is not None else 0,
        "ray_namespace": handle._namespace,
        "serialized_runtime_env": None,
        "required_resources": {k: v for k, v in handle._resources.items() if v},
        "death_cause": death,
        "is_detached": handle._detached,
        "placement_group_id": None if group is None else group.id,
        "repr_name": "",
        "num_restarts": handle._attempt,
        "num_restarts_due_to_lineage_reconstruction": 0,
        "num_restarts_due_to_node_preemption": 0,
        "call_site": None,
        "label_selector": None,
        "fallback_strategy": None,
    }
