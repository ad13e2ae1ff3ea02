"""``muster.get_runtime_context()``: which job, task, actor and node the caller is (Ray's RuntimeContext)."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import os
import socket
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any

from muster.core import api
from muster.core import context as core_context
from muster.core.settings import node_identity, node_ip_address, session_name
from muster.tasks import worker_side

_DRIVER_JOB_ID = f"{os.getpid():08x}"  # the embedded engine's job: the driver's pid, in hex
_task_ids = itertools.count(1)
_actor_numbers = itertools.count(1)  # muster's actors and the libraries' workers (training workers) alike


@dataclass(frozen=True)
class WorkerIdentity:
    """A library's worker (a training worker, which runs a Tune trial's function too), which runs no task or
    actor of muster's own: the ids and resources ``get_runtime_context()`` reports in it, as Ray's do in its
    Train worker actors. ``task_id``: the call running the user's code (the training loop)."""

    job_id: str
    actor_id: str
    task_id: str | None = None
    resources: dict[str, float] = field(default_factory=dict)

    def running(self, resources: dict[str, float], call: int = 1) -> WorkerIdentity:
        """This worker running its call number ``call`` (the task id: the job's, the actor's number, the call's,
        as an actor call's) and holding ``resources``."""
        number = int(self.actor_id[-16:], 16)
        return dataclasses.replace(self, task_id=f"{self.job_id}{number:08x}{call:08x}",
                                   resources={name: float(amount) for name, amount in resources.items() if amount})


_library_worker: WorkerIdentity | None = None


def new_library_worker() -> WorkerIdentity:
    """A new identity for a library's worker started here: this job's id and a fresh actor id (the number
    comes from muster's actors' own count in the driver, so no actor shares it)."""
    job = current_job_id()
    return WorkerIdentity(job, actor_hex_id(job, new_actor_number()))


def set_library_worker(identity: WorkerIdentity | None) -> None:
    """Who this worker process is (``None``: no library's worker)."""
    global _library_worker
    _library_worker = identity


def library_worker() -> WorkerIdentity | None:
    return _library_worker


def driver_job_id() -> str:
    """This driver's job id: the engine's (on a Ray cluster, Ray's, which Ray's workers, the training
    workers among them, and Ray's tools show), else the driver's pid in hex (the embedded engine)."""
    engine = api._runtime
    return (engine.job_id if engine is not None else None) or _DRIVER_JOB_ID


def current_job_id() -> str:
    """The job of the code running here: the driver's, or the one a task, actor or training worker runs for."""
    info = worker_side.current()
    if info is not None:
        return info.job_id
    return _library_worker.job_id if _library_worker is not None else driver_job_id()


def new_task_id() -> str:
    """A task id unique within this driver: the job id and a counter, in hex."""
    return f"{driver_job_id()}{next(_task_ids):016x}"


def new_actor_number() -> int:
    """A number for a new actor. In the driver, the next of one count; in a worker (a training run a task
    started), one marked as the worker's (a high bit and its pid), apart from the driver's."""
    number = next(_actor_numbers)
    if core_context.in_worker():
        return 0x40000000 | (os.getpid() & 0x3FFF) << 16 | number & 0xFFFF
    return number


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

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        from muster._unsupported import raise_unsupported

        raise_unsupported("muster.runtime_context.RuntimeContext", name)

    def get_job_id(self) -> str:
        """The driver's job id, the same in the driver and in every task, actor and training worker it
        started (on a Ray cluster, Ray's id of the driver's job)."""
        return current_job_id()

    def get_task_id(self) -> str | None:
        """The running task's id (each actor call has its own, as in Ray); in a training worker (a Tune
        trial's too), the id of the call running the loop; None in the driver."""
        if self._info:
            return worker_side.current_task_id()
        ray_context = _ray_library_worker()
        if ray_context is not None:
            return ray_context.get_task_id()
        return _library_worker.task_id if _library_worker is not None else None

    def get_actor_id(self) -> str | None:
        """The actor's id in hex (unique within the job), None outside an actor. A training worker (a Tune
        trial's too) is an actor, as Ray's Train workers are: each has its own id for the run's attempt."""
        if self._info:
            return actor_hex_id(self._info.job_id, int(self._info.actor_id)) if self._info.actor_id else None
        ray_context = _ray_library_worker()
        if ray_context is not None:
            return ray_context.get_actor_id()
        return _library_worker.actor_id if _library_worker is not None else None

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
        """This process's id (on the Ray engine, Ray's for a training worker)."""
        ray_context = _ray_library_worker() if not self._info else None
        return str(ray_context.get_worker_id()) if ray_context is not None else f"{os.getpid():08x}"

    def get_assigned_resources(self) -> dict[str, float]:
        """The resources this task or actor holds, or the training worker (``{}`` in the driver)."""
        if self._info:
            return dict(self._info.resources)
        ray_context = _ray_library_worker()
        if ray_context is not None:
            return dict(ray_context.get_assigned_resources())
        return dict(_library_worker.resources) if _library_worker is not None else {}

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
        """The context as Ray's ``get()`` gives it: ``job_id``, ``node_id`` and ``namespace``; in a task or
        actor also ``task_id``, and in an actor ``actor_id`` (the ids with ``.hex()``, as Ray's)."""
        context: dict[str, Any] = {"job_id": HexId(self.get_job_id()), "node_id": HexId(self.get_node_id()),
                                   "namespace": self.namespace}
        for key, value in (("task_id", self.get_task_id()), ("actor_id", self.get_actor_id())):
            if value is not None:
                context[key] = HexId(value)
        return context


def _ray_library_worker() -> Any:
    """Ray's runtime context where this process is a library's worker (a training worker) on the Ray engine:
    a Ray actor, whose ids and resources Ray itself gives; None elsewhere."""
    ray = sys.modules.get("ray")  # never imported here: a Ray worker process has it
    if _library_worker is None or core_context.worker_engine() != "ray" or ray is None:
        return None
    return ray.get_runtime_context()


def get_runtime_context() -> RuntimeContext:
    """The job, task, actor and node the caller runs as (Ray's ``ray.get_runtime_context()``)."""
    return RuntimeContext(worker_side.current())
