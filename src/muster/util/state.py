"""Ray's state API (``ray.util.state``) over the engine this process runs: actors, tasks, placement groups, nodes.

``list_actors``, ``list_tasks``, ``list_placement_groups`` and ``list_nodes`` return rows with Ray's columns
(attribute and ``row["key"]`` access), filtered as Ray filters them: ``(column, "=" or "!=", value)``, string
values compared without case, only Ray's filterable columns, sorted by id, at most ``limit`` rows; with
``detail=False`` the detail-only columns are None. ``get_*`` find one row by id; ``summarize_actors`` and
``summarize_tasks`` count actors per class and tasks per name, by state. Objects, workers, jobs and logs are
not kept (see ``muster._unsupported``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, TypeVar

from muster.exceptions import InvalidArgumentError

DEFAULT_LIMIT = 100  # Ray's defaults
DEFAULT_RPC_TIMEOUT = 30
_Filters = Optional[list[tuple[str, str, Any]]]


def _col(*, filterable: bool, detail: bool = False) -> Any:
    return field(default=None, metadata={"filterable": filterable, "detail": detail})


@dataclass
class StateSchema:
    """Ray's row: a dataclass whose fields are read as attributes or as ``row["name"]``/``row.get``."""

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)

    def asdict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def list_columns(cls, detail: bool = True) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)
                if detail or not f.metadata.get("detail", False)]

    @classmethod
    def filterable_columns(cls) -> set[str]:
        return {f.name for f in dataclasses.fields(cls) if f.metadata.get("filterable")}


@dataclass
class ActorState(StateSchema):
    """An actor, as Ray's ``ActorState``: ``state`` is PENDING_CREATION, ALIVE, RESTARTING or DEAD."""

    actor_id: Optional[str] = _col(filterable=True)
    class_name: Optional[str] = _col(filterable=True)
    state: Optional[str] = _col(filterable=True)
    job_id: Optional[str] = _col(filterable=True)
    name: Optional[str] = _col(filterable=True)
    node_id: Optional[str] = _col(filterable=True)
    pid: Optional[int] = _col(filterable=True)
    ray_namespace: Optional[str] = _col(filterable=True)
    serialized_runtime_env: Optional[str] = _col(filterable=False, detail=True)
    required_resources: Optional[dict] = _col(filterable=False, detail=True)
    death_cause: Optional[dict] = _col(filterable=False, detail=True)
    is_detached: Optional[bool] = _col(filterable=False, detail=True)
    placement_group_id: Optional[str] = _col(filterable=True, detail=True)
    repr_name: Optional[str] = _col(filterable=True, detail=True)
    num_restarts: Optional[int] = _col(filterable=False, detail=True)
    num_restarts_due_to_lineage_reconstruction: Optional[int] = _col(filterable=False, detail=True)
    num_restarts_due_to_node_preemption: Optional[int] = _col(filterable=False, detail=True)
    call_site: Optional[str] = _col(filterable=False, detail=True)
    label_selector: Optional[dict] = _col(filterable=False, detail=True)
    fallback_strategy: Optional[dict] = _col(filterable=False, detail=True)


@dataclass
class TaskState(StateSchema):
    """A task or actor call, as Ray's ``TaskState`` (``type`` NORMAL_TASK or ACTOR_TASK; ``state``
    PENDING_ARGS_AVAIL, PENDING_NODE_ASSIGNMENT, SUBMITTED_TO_WORKER, RUNNING, FINISHED or FAILED)."""

    task_id: Optional[str] = _col(filterable=True)
    attempt_number: Optional[int] = _col(filterable=True)
    name: Optional[str] = _col(filterable=True)
    state: Optional[str] = _col(filterable=True)
    job_id: Optional[str] = _col(filterable=True)
    actor_id: Optional[str] = _col(filterable=True)
    type: Optional[str] = _col(filterable=True)
    func_or_class_name: Optional[str] = _col(filterable=True)
    parent_task_id: Optional[str] = _col(filterable=True)
    node_id: Optional[str] = _col(filterable=True)
    worker_id: Optional[str] = _col(filterable=True)
    worker_pid: Optional[int] = _col(filterable=True)
    error_type: Optional[str] = _col(filterable=True)
    language: Optional[str] = _col(filterable=True, detail=True)
    required_resources: Optional[dict] = _col(filterable=False, detail=True)
    runtime_env_info: Optional[dict] = _col(filterable=False, detail=True)
    placement_group_id: Optional[str] = _col(filterable=True, detail=True)
    events: Optional[list] = _col(filterable=False, detail=True)
    profiling_data: Optional[dict] = _col(filterable=False, detail=True)
    creation_time_ms: Optional[int] = _col(filterable=False, detail=True)
    start_time_ms: Optional[int] = _col(filterable=False, detail=True)
    end_time_ms: Optional[int] = _col(filterable=False, detail=True)
    task_log_info: Optional[dict] = _col(filterable=False, detail=True)
    error_message: Optional[str] = _col(filterable=False, detail=True)
    is_debugger_paused: Optional[bool] = _col(filterable=True, detail=True)
    call_site: Optional[str] = _col(filterable=False, detail=True)
    label_selector: Optional[dict] = _col(filterable=False, detail=True)
    fallback_strategy: Optional[dict] = _col(filterable=False, detail=True)


@dataclass
class PlacementGroupState(StateSchema):
    """A placement group this process made, as Ray's ``PlacementGroupState`` (state PENDING, CREATED, REMOVED
    or INFEASIBLE; ``bundles``: each bundle's id, ``unit_resources`` and ``node_id``)."""

    placement_group_id: Optional[str] = _col(filterable=True)
    name: Optional[str] = _col(filterable=True)
    creator_job_id: Optional[str] = _col(filterable=True)
    state: Optional[str] = _col(filterable=True)
    bundles: Optional[list] = _col(filterable=False, detail=True)
    is_detached: Optional[bool] = _col(filterable=True, detail=True)
    stats: Optional[dict] = _col(filterable=False, detail=True)
    topology_strategy: Optional[dict] = _col(filterable=False, detail=True)
    topology_assignments: Optional[dict] = _col(filterable=False, detail=True)


@dataclass
class NodeState(StateSchema):
    """A node, as Ray's ``NodeState`` (the one node of the embedded engine; Ray's own on a Ray cluster)."""

    node_id: Optional[str] = _col(filterable=True)
    node_ip: Optional[str] = _col(filterable=True)
    is_head_node: Optional[bool] = _col(filterable=True)
    state: Optional[str] = _col(filterable=True)
    state_message: Optional[str] = _col(filterable=False)
    node_name: Optional[str] = _col(filterable=True)
    resources_total: Optional[dict] = _col(filterable=False)
    labels: Optional[dict] = _col(filterable=False)
    start_time_ms: Optional[int] = _col(filterable=False, detail=True)
    end_time_ms: Optional[int] = _col(filterable=False, detail=True)


_Row = TypeVar("_Row", bound=StateSchema)


def _matches(value: Any, predicate: str, wanted: Any) -> bool:
    if isinstance(wanted, str) and isinstance(value, str):  # Ray compares strings without case
        value, wanted = value.lower(), wanted.lower()
    elif isinstance(wanted, str) and isinstance(value, (bool, int)):  # a CLI-style "1234" / "true"
        wanted = wanted.lower() in ("true", "1") if isinstance(value, bool) else _as_int(wanted)
    return (value == wanted) if predicate == "=" else (value != wanted)


def _as_int(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        return text  # matches no int


def _select(schema: type[_Row], rows: list[dict[str, Any]], filters: _Filters, limit: int, detail: bool,
            address: Optional[str], call: str) -> list[_Row]:
    if address not in (None, "auto"):
        raise InvalidArgumentError(
            f"{call}(address={address!r}): muster's state API reads the engine this process runs (the one "
            "muster.init() started or connected to); drop address=.")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise InvalidArgumentError(f"{call}(limit={limit!r}): pass a whole number >= 0 of rows to return.")
    checked = []
    for item in filters or []:
        if not isinstance(item, (tuple, list)) or len(item) != 3:
            raise InvalidArgumentError(
                f"{call}(filters=[..., {item!r}, ...]): each filter is a (column, predicate, value) tuple, "
                "e.g. ('state', '=', 'ALIVE').")
        column, predicate, wanted = item
        column = str(column).lower()
        if column not in schema.filterable_columns():
            raise InvalidArgumentError(
                f"{call}: the filter column {column!r} is not supported; filter on one of "
                f"{sorted(schema.filterable_columns())}.")
        if predicate not in ("=", "!="):
            raise InvalidArgumentError(f"{call}: the filter predicate {predicate!r} is not supported; use '=' or '!='.")
        checked.append((column, predicate, wanted))
    kept = [row for row in rows if all(_matches(row.get(c), p, w) for c, p, w in checked)]
    columns = schema.list_columns(detail=detail)
    return [schema(**{c: row.get(c) for c in columns}) for row in kept[:limit]]


def _actor_rows() -> list[dict[str, Any]]:
    from muster.tasks.actor_table import actor_rows

    return actor_rows()


def _task_rows() -> list[dict[str, Any]]:
    """The recorded tasks and actor calls, and each actor's creation task (its constructor), by task id."""
    from muster.tasks.task_table import task_rows

    actors = _actor_rows()
    where = {actor["actor_id"]: actor for actor in actors}
    rows = task_rows()
    for row in rows:  # an actor call ran in its actor's process
        actor = where.get(row["actor_id"]) if row["actor_id"] and row["state"] != "PENDING_ARGS_AVAIL" else None
        if actor is not None and actor["pid"]:
            row.update(worker_pid=actor["pid"], node_id=actor["node_id"])
    return sorted(rows + [_creation_row(actor) for actor in actors], key=lambda r: r["task_id"])


def _creation_row(actor: dict[str, Any]) -> dict[str, Any]:
    started = actor["pid"] != 0  # an actor whose constructor raised never had a process to show
    state = {"ALIVE": "FINISHED", "DEAD": "FINISHED" if started else "FAILED"}.get(actor["state"],
                                                                                   "PENDING_NODE_ASSIGNMENT")
    failed = state == "FAILED" and actor["death_cause"] is not None
    name = f"{actor['class_name']}.__init__"
    from muster.tasks.task_table import actor_task_id

    number = int(actor["actor_id"][-16:], 16)  # the hex id ends with the actor's number (16 digits)
    return {"task_id": actor_task_id(number, 0),
            "attempt_number": actor["num_restarts"], "name": name, "state": state, "job_id": actor["job_id"],
            "actor_id": actor["actor_id"], "type": "ACTOR_CREATION_TASK", "func_or_class_name": name,
            "node_id": actor["node_id"], "worker_pid": actor["pid"] or None, "language": "PYTHON",
            "error_type": "TASK_EXECUTION_EXCEPTION" if failed else None,
            "error_message": actor["death_cause"]["actor_died_error_context"]["error_message"] if failed else None,
            "required_resources": actor["required_resources"], "placement_group_id": actor["placement_group_id"],
            "is_debugger_paused": False, "_ref": None}


def _group_rows() -> list[dict[str, Any]]:
    from muster.tasks.runtime_context import driver_job_id
    from muster.util.placement_group import _made

    rows = []
    for pg in _made.values():
        row = pg._row()
        nodes = row["bundles_to_node_id"]
        rows.append({
            "placement_group_id": row["placement_group_id"], "name": row["name"], "creator_job_id": driver_job_id(),
            "state": row["state"], "is_detached": pg.lifetime == "detached", "stats": row["stats"],
            "bundles": [{"bundle_id": {"placement_group_id": pg.id, "bundle_index": i}, "unit_resources": spec,
                         "node_id": nodes.get(i) or None} for i, spec in row["bundles"].items()],
        })
    return sorted(rows, key=lambda r: r["placement_group_id"])


def _node_rows() -> list[dict[str, Any]]:
    import muster

    rows = []
    for i, node in enumerate(muster.nodes()):
        alive = bool(node.get("Alive", True))
        rows.append({
            "node_id": node["NodeID"], "node_ip": node.get("NodeManagerAddress"),
            "is_head_node": bool(node.get("IsHeadNode", i == 0)), "state": "ALIVE" if alive else "DEAD",
            "state_message": None, "node_name": node.get("NodeName", node.get("NodeManagerHostname")),
            "resources_total": dict(node.get("Resources", {})), "labels": dict(node.get("Labels", {})),
            "start_time_ms": node.get("StartTimeMs"), "end_time_ms": node.get("EndTimeMs"),
        })
    return sorted(rows, key=lambda r: r["node_id"])


def _lister(schema: type[_Row], rows: Callable[[], list[dict[str, Any]]], call: str) -> Callable[..., list[_Row]]:
    def listing(address: Optional[str] = None, filters: _Filters = None, limit: int = DEFAULT_LIMIT,
                timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
                _explain: bool = False) -> list[_Row]:
        return _select(schema, rows(), filters, limit, detail, address, call)

    listing.__name__ = listing.__qualname__ = call
    return listing


def _getter(schema: type[_Row], rows: Callable[[], list[dict[str, Any]]], key: str,
            call: str) -> Callable[..., Optional[_Row]]:
    def get(id: str, address: Optional[str] = None, timeout: int = DEFAULT_RPC_TIMEOUT,
            _explain: bool = False) -> Optional[_Row]:
        found = _select(schema, rows(), [(key, "=", id)], 1, True, address, call)
        return found[0] if found else None

    get.__name__ = get.__qualname__ = call
    return get


list_actors = _lister(ActorState, _actor_rows, "list_actors")
list_actors.__doc__ = """Every actor of the running engine, dead ones included, as :class:`ActorState` rows.

    Args:
        address: None or "auto" (the engine this process runs).
        filters: ``(column, "=" | "!=", value)`` tuples, e.g. ``[("state", "=", "ALIVE")]``.
        limit: the most rows returned (sorted by actor id).
        timeout: accepted (the table is in this process).
        detail: fill the detail-only columns (``required_resources``, ``death_cause``, ``num_restarts``, ...).
        raise_on_missing_output: accepted (nothing is ever truncated).

    Raises:
        InvalidArgumentError: a column Ray does not filter on, a predicate other than = or !=, an address.
    """
get_actor = _getter(ActorState, _actor_rows, "actor_id", "get_actor")
get_actor.__doc__ = "The actor with this hex id (``get_runtime_context().get_actor_id()``), every column; None if none."
list_tasks = _lister(TaskState, _task_rows, "list_tasks")
list_tasks.__doc__ = """The tasks and actor calls of the running engine (the latest 10,000), as :class:`TaskState` rows;
    the arguments are :func:`list_actors`'s."""


def get_task(id: Any, address: Optional[str] = None, timeout: int = DEFAULT_RPC_TIMEOUT,
             _explain: bool = False) -> Optional[TaskState]:
    """The task with this id (``get_runtime_context().get_task_id()`` in it), or whose ``ObjectRef`` this is,
    every column; None if none is recorded."""
    from muster.tasks.objects import ObjectRef

    rows = [row for row in _task_rows() if row["_ref"] == id.id] if isinstance(id, ObjectRef) else _task_rows()
    key = None if isinstance(id, ObjectRef) else [("task_id", "=", id)]
    found = _select(TaskState, rows, key, 1, True, address, "get_task")
    return found[0] if found else None


def summarize_tasks(address: Optional[str] = None, timeout: int = DEFAULT_RPC_TIMEOUT,
                    raise_on_missing_output: bool = True, _explain: bool = False) -> dict[str, Any]:
    """Tasks per name and state, as Ray's: ``{"cluster": {"summary": {name: {"func_or_class_name": ...,
    "type": ..., "state_counts": {state: n}}}, "total_tasks": n, "total_actor_tasks": n,
    "total_actor_scheduled": n, "summary_by": "func_name"}}`` (an actor's constructor is its creation task)."""
    summary: dict[str, Any] = {}
    totals = {"NORMAL_TASK": 0, "ACTOR_TASK": 0, "ACTOR_CREATION_TASK": 0}
    for row in _select(TaskState, _task_rows(), None, 1 << 62, False, address, "summarize_tasks"):
        key = str(row.name or row.func_or_class_name)
        entry = summary.setdefault(key, {"func_or_class_name": key, "type": row.type, "state_counts": {}})
        entry["state_counts"][row.state] = entry["state_counts"].get(row.state, 0) + 1
        totals[str(row.type)] = totals.get(str(row.type), 0) + 1
    return {"cluster": {"summary": summary, "total_tasks": totals["NORMAL_TASK"],
                        "total_actor_tasks": totals["ACTOR_TASK"],
                        "total_actor_scheduled": totals["ACTOR_CREATION_TASK"], "summary_by": "func_name"}}


list_placement_groups = _lister(PlacementGroupState, _group_rows, "list_placement_groups")
list_placement_groups.__doc__ = "The placement groups this process made, as :class:`PlacementGroupState` rows."
get_placement_group = _getter(PlacementGroupState, _group_rows, "placement_group_id", "get_placement_group")
get_placement_group.__doc__ = "The placement group with this id, every column; None if this process made none."
list_nodes = _lister(NodeState, _node_rows, "list_nodes")
list_nodes.__doc__ = "The nodes of ``muster.nodes()`` as :class:`NodeState` rows."
get_node = _getter(NodeState, _node_rows, "node_id", "get_node")
get_node.__doc__ = "The node with this id, every column; None if none has it."


def summarize_actors(address: Optional[str] = None, timeout: int = DEFAULT_RPC_TIMEOUT,
                     raise_on_missing_output: bool = True, _explain: bool = False) -> dict[str, Any]:
    """Actors per class and state, as Ray's: ``{"cluster": {"summary": {class_name: {"class_name": ...,
    "state_counts": {state: n}}}, "total_actors": n, "summary_by": "class"}}``."""
    summary: dict[str, Any] = {}
    rows = _select(ActorState, _actor_rows(), None, 1 << 62, False, address, "summarize_actors")
    for row in rows:
        entry = summary.setdefault(str(row.class_name), {"class_name": row.class_name, "state_counts": {}})
        entry["state_counts"][row.state] = entry["state_counts"].get(row.state, 0) + 1
    return {"cluster": {"summary": summary, "total_actors": len(rows), "summary_by": "class"}}


def __getattr__(name: str) -> Any:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.util.state", name)


__all__ = [
    "ActorState",
    "NodeState",
    "PlacementGroupState",
    "TaskState",
    "get_actor",
    "get_node",
    "get_placement_group",
    "get_task",
    "list_actors",
    "list_nodes",
    "list_placement_groups",
    "list_tasks",
    "summarize_actors",
    "summarize_tasks",
]
