"""``muster.get_runtime_context()``: which job, task, actor and node the caller is (Ray's RuntimeContext)."""

from __future__ import annotations

import hashlib
import itertools
import os
import socket
import sys
import warnings
from typing import Any

from muster.core import context as core_context
from muster.core.settings import node_identity, node_ip_address, session_name
from muster.tasks import worker_side

_DRIVER_JOB_ID = f"{os.getpid():08x}"
_task_ids = itertools.count(1)
_held: dict[str, float] = {}  # a library's worker (a training worker, a Tune trial's): what its process holds


def set_worker_resources(resources: dict[str, float]) -> None:
    """What this worker process holds where it runs no task or actor of muster's own (a training worker,
    which runs a Tune trial's function too): ``get_assigned_resources()`` reports it there, as Ray's does
    in its Train worker actors."""
    _held.clear()
    _held.update({name: float(amount) for name, amount in resources.items() if amount})


def driver_job_id() -> str:
    return _DRIVER_JOB_ID


def new_task_id() -> str:
    """A task id unique within this driver: the job id and a counter, in hex."""
    return f"{_DRIVER_JOB_ID}{next(_task_ids):016x}"


def actor_hex_id(job_id: str, actor: int) -> str:
    """An actor's id as Ray shows one: hex, the job's id then the actor's number."""
    return f"{job_id}{actor:016x}"


def node_id() -> str:
    """This node's id (hex): on a Ray cluster, Ray's node id (the one a worker's engine recorded, or
    the driver's Ray node); on the embedded engine, one stable for the host."""
    recorded, _ = node_identity()
    if recorded:
        return recorded
    ray = sys.modules.get("ray")  # never imported here: only a driver connected to Ray has one
    if ray is not None and getattr(ray, "is_initialized", lambda: False)():
        return str(ray.get_runtime_context().get_node_id())
    return hashlib.sha1(socket.gethostname().encode()).hexdigest()




class HexId(str):
    """An id as Ray's deprecated ``RuntimeContext`` properties give one: ``.hex()`` is the id in hex."""

    def hex(self) -> str:
        return str(self)


def _deprecated_id(name: str, value: str | None) -> HexId | None:
    warnings.warn(f"RuntimeContext.{name} is deprecated, as in Ray: use get_{name}(), which returns the hex "
                  "string.", DeprecationWarning, stacklevel=3)
    return None if value is None else HexId(value)


class RuntimeContext:
    """What the code running now is: ``get_job_id``, ``get_task_id``, ``get_actor_id``, ``get_node_id``..."""

    def __init__(self, info: worker_side.TaskInfo | None):
        self._info = info

    def get_job_id(self) -> str:
        return self._info.job_id if self._info else _DRIVER_JOB_ID

    def get_task_id(self) -> str | None:
        """The running task's id (each actor call has its own, as in Ray); None in the driver."""
        return worker_side.current_task_id() if self._info else None

    def get_actor_id(self) -> str | None:
        """The actor's id in hex (unique within the job), None outside an actor."""
        if not (self._info and self._info.actor_id):
            return None
        return actor_hex_id(self._info.job_id, int(self._info.actor_id))

    def get_actor_name(self) -> str | None:
        return self._info.actor_name if self._info else None

    def get_task_name(self) -> str | None:
        """The running task's name: its function's (``f``) or the one ``f.options(name=...)`` gave it, or
        for an actor call ``Class.method``; None in the driver."""
        names = worker_side.task_names() if self._info else None
        return names[0] if names else None

    def get_task_function_name(self) -> str | None:
        """The running task's function with its module: ``module.f`` or ``module.Class.method``."""
        names = worker_side.task_names() if self._info else None
        return names[1] if names else None

    def get_node_id(self) -> str:
        return node_id()

    def get_session_name(self) -> str:
        """The session's name, the same in the driver and every worker of one ``muster.init`` (Ray's
        ``session_<date>_<time>_<microseconds>_<pid>``); on a Ray cluster, Ray's own session name."""
        ray = sys.modules.get("ray")  # never imported here: only processes on a Ray cluster have one
        if ray is not None and getattr(ray, "is_initialized", lambda: False)():
            return str(ray.get_runtime_context().get_session_name())
        name = session_name()
        if name is None:  # a driver that has not started the engine yet: start it, as first use does
            from muster.core.api import get_runtime

            get_runtime()
            name = session_name()
        return name or ""

    def get_worker_id(self) -> str:
        return f"{os.getpid():08x}"

    def get_assigned_resources(self) -> dict[str, float]:
        """The resources this task or actor holds, or the training worker (``{}`` in the driver)."""
        if self._info:
            return dict(self._info.resources)
        return dict(_held) if core_context.in_worker() else {}

    def get_accelerator_ids(self) -> dict[str, list[str]]:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "") if core_context.in_worker() else ""
        return {"GPU": [d for d in visible.split(",") if d.strip()]}

    def get_placement_group_id(self) -> str | None:
        """The id of the placement group the caller was scheduled into (None outside any)."""
        group = self._info.placement_group if self._info else None
        return group.id if group is not None else None

    def is_canceled(self) -> bool:
        """Whether ``muster.cancel`` was called on the running task or actor call (Ray's
        ``is_canceled``): a plain or threaded actor's method is not interrupted by a cancel, so a
        long one checks this now and then and returns early.

        Raises:
            RuntimeError: in the driver, or in an async actor (as in Ray).
        """
        from muster.tasks.cancel import is_canceled

        return is_canceled()

    @property
    def should_capture_child_tasks_in_placement_group(self) -> bool:
        return bool(self._info and self._info.capture_child_tasks)

    @property
    def job_id(self) -> HexId | None:
        return _deprecated_id("job_id", self.get_job_id())

    @property
    def node_id(self) -> HexId | None:
        return _deprecated_id("node_id", self.get_node_id())

    @property
    def task_id(self) -> HexId | None:
        return _deprecated_id("task_id", self.get_task_id())

    @property
    def actor_id(self) -> HexId | None:
        return _deprecated_id("actor_id", self.get_actor_id())

    @property
    def namespace(self) -> str:
        from muster.core.init_options import current_namespace

        return self._info.namespace if self._info else current_namespace()

    @property
    def was_current_actor_reconstructed(self) -> bool:
        return bool(self._info and self._info.actor_id and self._info.attempt > 0)

    @property
    def current_actor(self) -> Any:
        """A handle to the actor this code runs in."""
        if not (self._info and self._info.actor_id):
            raise RuntimeError("current_actor is only available inside an actor.")
        from muster.tasks.actor import WorkerActorHandle

        return WorkerActorHandle(int(self._info.actor_id))

    def get(self) -> dict[str, Any]:
        return {"job_id": self.get_job_id(), "task_id": self.get_task_id(), "actor_id": self.get_actor_id(),
                "node_id": self.get_node_id()}


def get_runtime_context() -> RuntimeContext:
    """The job, task, actor and node the caller runs as (Ray's ``ray.get_runtime_context()``)."""
    return RuntimeContext(worker_side.current())
