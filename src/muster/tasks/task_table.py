"""The tasks and actor calls of the running engine, as rows of Ray's state API (``ray.util.state.list_tasks``).

The driver submits every task and sends every actor call (a worker's go through it), so it records each here:
its state (PENDING_ARGS_AVAIL while its arguments are computed, PENDING_NODE_ASSIGNMENT until a worker takes
it, RUNNING, FINISHED or FAILED; an actor call is SUBMITTED_TO_WORKER until it ended: which of an actor's
calls runs and which waits in its queue is not tracked), the process that ran a task and its error. The
latest :data:`MAX_ROWS` are kept, as Ray's GCS keeps a bounded number; a worker asks the driver
(``events.ListTasks``). Recording is on every call's path, so a record is a small slotted object, turned
into Ray's columns only when listed.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any

from muster.core import context as core_context
from muster.core.api import get_runtime
from muster.tasks import events
from muster.tasks import runtime_context as rc
from muster.tasks.objects import ObjectRef, split

MAX_ROWS = 10_000


class _Task:
    __slots__ = ("task_id", "ref_id", "parts", "name", "function", "kind", "resources", "actor_id", "group", "state",
                 "attempt", "pid", "ray_node", "created", "started", "ended", "error_type", "error_message",
                 "parent")

    def __init__(self, task_id: str, ref_id: int, name: str, function: str, kind: str,
                 resources: dict[str, float], actor_id: str | None, group: str | None, state: str):
        self.task_id, self.ref_id, self.name, self.function, self.kind = task_id, ref_id, name, function, kind
        self.resources, self.actor_id, self.group, self.state = resources, actor_id, group, state
        self.parts: tuple[int, ...] = ()  # the refs of its values when it has several (num_returns=n)
        self.attempt = 0
        self.pid: int | None = None
        self.ray_node: str | None = None
        self.created = time.time()
        self.started: float | None = None
        self.ended: float | None = None
        self.error_type: str | None = None
        self.error_message: str | None = None
        self.parent: str | None = None  # the task or actor call that submitted it (None: the driver)

    def row(self, here: str) -> dict[str, Any]:
        """Ray's ``TaskState`` columns (``here``: this node's id, for work that ran on the embedded engine)."""
        return {"task_id": self.task_id, "attempt_number": self.attempt, "name": self.name,
                "state": self.state, "job_id": rc.driver_job_id(), "actor_id": self.actor_id, "type": self.kind,
                "func_or_class_name": self.function, "parent_task_id": self.parent,
                "node_id": self.ray_node or (here if self.pid is not None else None), "worker_id": None,
                "worker_pid": self.pid, "error_type": self.error_type,
                "language": "PYTHON", "required_resources": {k: v for k, v in self.resources.items() if v},
                "placement_group_id": self.group, "creation_time_ms": _ms(self.created),
                "start_time_ms": _ms(self.started), "end_time_ms": _ms(self.ended),
                "error_message": self.error_message, "is_debugger_paused": False,
                "_ref": self.ref_id}


_tasks: OrderedDict[str, _Task] = OrderedDict()
_by_ref: dict[int, str] = {}  # the ids of the recorded tasks' refs (parts too) -> the task's id
_engine: Any = None  # the engine the recorded tasks ran on: a new one starts an empty table
_lock = threading.Lock()


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else int(seconds * 1000)


def actor_task_id(actor: int, token: int) -> str:
    """The id of an actor's call number ``token`` (the one ``get_runtime_context().get_task_id()`` gives in it;
    0: its constructor, the actor's creation task)."""
    return f"{rc.driver_job_id()}{actor:08x}{token:08x}"


def submitted(task_id: str, ref_id: int, *, name: str, function: str, kind: str, resources: dict[str, float],
              actor_id: str | None = None, group: Any = None, waits: bool = False) -> None:
    """A task (``kind`` NORMAL_TASK) or actor call (ACTOR_TASK) whose ref is ``ref_id`` was submitted;
    ``waits``: for its arguments."""
    global _engine
    ready = "SUBMITTED_TO_WORKER" if kind == "ACTOR_TASK" else "PENDING_NODE_ASSIGNMENT"  # an actor's queue
    task = _Task(task_id, ref_id, name, function, kind, resources, actor_id, None if group is None else group.id,
                 "PENDING_ARGS_AVAIL" if waits else ready)
    engine = get_runtime()
    with _lock:
        if engine is not _engine:
            _tasks.clear()
            _by_ref.clear()
            _engine = engine
        _tasks[task_id] = task
        _by_ref[ref_id] = task_id
        if len(_tasks) > MAX_ROWS:
            _, old = _tasks.popitem(last=False)
            for ref in (old.ref_id, *old.parts):
                _by_ref.pop(ref, None)


def adopted(parent: str, ref_ids: list[int]) -> None:
    """The work behind ``ref_ids`` was submitted by the task or actor call ``parent``."""
    with _lock:
        for ref_id in ref_ids:
            task = _tasks.get(_by_ref.get(ref_id, ""))
            if task is not None:
                task.parent = parent


def split_refs(ref: ObjectRef, n: int) -> list[ObjectRef]:
    """``objects.split``: ``n`` refs to the values of the task behind ``ref``, each known as that task's."""
    parts = split(ref, n)
    with _lock:
        task = _tasks.get(_by_ref.get(ref.id, ""))
        if task is not None:
            task.parts = tuple(part.id for part in parts)
            _by_ref.update((part, task.task_id) for part in task.parts)
    return parts


def task_of(ref_id: int) -> str | None:
    """The id of the task or actor call whose value ``ref_id`` is (Ray's ``ObjectRef.task_id()``); None for a
    ref no recorded task returned (``put``, a generator's items, a task whose row is no longer kept)."""
    if core_context.in_worker():
        reply = core_context.send_event(events.TaskOfRef(ref_id))
        return None if reply is None else str(reply)
    with _lock:
        return _by_ref.get(ref_id)


def pending(task_id: str, attempt: int) -> None:
    """Attempt ``attempt`` (from 0) of the task waits for a worker."""
    task = _tasks.get(task_id)
    if task is not None:
        task.state, task.attempt = "PENDING_NODE_ASSIGNMENT", attempt


def started(task_id: str, worker: Any, state: str = "RUNNING") -> None:
    """``task_id`` runs in (or, ``state``, was handed to) the process ``worker`` (an engine's handle)."""
    task = _tasks.get(task_id)
    if task is not None:
        task.state, task.started, task.pid = state, time.time(), getattr(worker, "pid", None)
        if getattr(worker, "node_ip", None) is not None:  # a Ray actor: the node Ray placed it on
            task.ray_node = worker.node_id


def ended(task_id: str, error: BaseException | None) -> None:
    task = _tasks.get(task_id)
    if task is not None:
        task.state, task.ended = ("FINISHED" if error is None else "FAILED"), time.time()
        if error is not None:  # kept as text: an exception would keep its traceback's frames alive
            task.error_type, task.error_message = _error_type(error), str(error)


def _error_type(error: BaseException) -> str:
    """Ray's ErrorType name of a failure (an exception the task raised: TASK_EXECUTION_EXCEPTION)."""
    from muster.exceptions import ActorDiedError, TaskCancelledError, WorkerCrashedError

    for kind, name in ((TaskCancelledError, "TASK_CANCELLED"), (ActorDiedError, "ACTOR_DIED"),
                       (WorkerCrashedError, "WORKER_DIED")):
        if isinstance(error, kind):
            return name
    return "TASK_EXECUTION_EXCEPTION"


def task_rows() -> list[dict[str, Any]]:
    """Every recorded task of the running engine, by task id (``_ref``: the id of its ObjectRef)."""
    if core_context.in_worker():
        return list(core_context.send_event(events.ListTasks()))
    engine = get_runtime()
    with _lock:
        tasks = list(_tasks.values()) if engine is _engine else []
    here = rc.node_id()
    return sorted((task.row(here) for task in tasks), key=lambda row: row["task_id"])
