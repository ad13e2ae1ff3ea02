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
* An ``RuntimeActor``'s calls run one at a time, in submission order, in the
  actor's own process.  A call returns a ``concurrent.futures.Future``.
  When the process dies, every pending and later call fails with
  ``ActorDiedError``.
* Actors may send *events* to the driver while a call runs (training
  reports use this).  A handler may return a ``Future``: the actor gets
  the reply when it completes.  Events from one actor reach ``on_event`` in the order
  they were sent, and always before the actor's death is reported: a
  report that left the worker is never lost behind the failure it preceded.
* Worker output (stdout and stderr, one line at a time) goes to every
  *log sink* (``add_log_sink``) as ``sink(label, pid, lines)``.  The
  engine feeds them: a line a worker printed during a call reaches the
  sinks before that call's result does.
* Placement groups: ``reserve`` holds a group's bundles once they fit together;
  work started with ``bundle=BundleRef(group, index)`` draws on that bundle only,
  and ``unreserve`` gives the bundles back (what still waits for them fails, what
  runs on them is killed). An engine that reserves nothing keeps the defaults:
  groups are placed at once and ``bundle`` is a label.
* User metrics (``muster.util.metrics``) that workers record reach ``user_metrics`` (a
  :class:`~muster.core.user_metrics.MetricsTable`) where the engine collects them (the local and Ray
  engines do: a task's before its result, an actor's every few seconds and when it exits on purpose).
* All methods are thread-safe.
"""

from __future__ import annotations

import abc
import contextlib
import os
import signal
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, NoReturn

from muster.core.user_metrics import MetricsTable

Resources = dict[str, float]
EventHandler = Callable[["RuntimeActor", Any], Any]
DeathHandler = Callable[["RuntimeActor", BaseException], None]


def unserved(label: str, payload: Any) -> NoReturn:
    """The answer to a request from an actor whose starter serves none: an error, never a silent ``None``
    (a ``.remote()`` that returned ``None`` and never ran)."""
    from muster.exceptions import MusterError

    raise MusterError(
        f"{label} asked the driver for {type(payload).__name__}, but the code that started it serves no "
        "requests from its process (tasks, actors, get, put). This is a bug in muster: please report it."
    )
LogSink = Callable[[str, "int | None", list[str]], None]  # (label, pid, lines)
#: The reason an engine gives for the death of an actor muster's ``kill`` ended (the caller may know better)
KILLED_BY_MUSTER = "stopped by muster"


@dataclass(frozen=True)
class BundleRef:
    """Bundle ``index`` (-1: whichever has room) of the placement group ``group`` held by :meth:`Runtime.reserve`."""

    group: str
    index: int = -1


@dataclass(frozen=True)
class NodeRef:
    """Node ``node_id`` (Ray's ``NodeAffinitySchedulingStrategy``); ``soft``: another node when that one cannot
    take the work. The tasks layer has checked that a node with that id is alive, where ``soft`` is False."""

    node_id: str
    soft: bool = False


def removed_error(group: str) -> Exception:
    """What work scheduled into ``group`` fails with once the group is removed (or never was here):
    a ``TaskPlacementGroupRemoved``."""
    from muster.exceptions import TaskPlacementGroupRemoved

    return TaskPlacementGroupRemoved(
        f"placement group {group} is not reserved on this engine: it was removed (remove_placement_group), "
        "or made before muster.shutdown(). Schedule the work into a live group, or into none.")


def name_taken_error(name: str, holder: str,
                     remove: str = "remove_placement_group(get_placement_group({!r}))") -> Exception:
    """What a new placement group named ``name`` fails with while a live group (``holder`` says which) has
    that name, on every engine: a ``RaySystemError``, as Ray's GCS raises. ``remove``: the call that removes
    the holder (``{!r}``: the name)."""
    from muster.exceptions import RaySystemError

    return RaySystemError(
        f"Failed to create placement group: name {name!r} already exists ({holder}). Give the new group another "
        f"name, or remove the old one first with {remove.format(name)}.")


class RuntimeActor(abc.ABC):
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

    def notify(self, notice: Any) -> bool:
        """Hand ``notice`` to the handler the actor's process set with
        :func:`muster.core.context.on_notice`, at once: beside the call it runs now, not after it.
        False where the engine cannot (nothing is sent)."""
        return False


class Runtime(abc.ABC):
    """An engine that runs functions and actors under resource limits."""

    name: str

    def __init__(self) -> None:
        self._log_sinks: list[LogSink] = []
        self._log_sinks_lock = threading.Lock()
        self.user_metrics = MetricsTable()  # what this engine's processes recorded (muster.util.metrics)

    # -- what Ray's ``ray.init()`` returns (its RayContext): ``with muster.init(): ...``, address_info
    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.disconnect()

    def disconnect(self) -> None:
        """Ray's ``RayContext.disconnect()``: shut this engine down, as ``muster.shutdown()`` does."""
        from muster.core.api import shutdown

        shutdown()

    @property
    def address_info(self) -> dict[str, Any]:
        """Ray's ``RayContext.address_info``: where this engine runs (``address``, ``node_ip_address``)."""
        from muster.core.settings import node_ip_address

        return {"address": getattr(self, "address", None) or "local", "node_ip_address": node_ip_address(),
                "engine": self.name}

    @property
    def dashboard_url(self) -> str | None:
        """None: muster starts no dashboard with the engine (``muster dashboard`` serves the run store)."""
        return None

    @property
    def python_version(self) -> str:
        """Ray's ``RayContext.python_version``: the driver's Python, as ``3.11.7``."""
        import platform

        return platform.python_version()

    @property
    def ray_version(self) -> str:
        """Ray's ``RayContext.ray_version``: here muster's version (``muster.__version__``)."""
        from muster import __version__

        return __version__

    ray_commit = ""  # Ray's RayContext.ray_commit: muster records none

    job_id: str | None = None  # the id (hex) the engine gives this driver's job; none on the embedded engine

    def __getitem__(self, key: str) -> Any:
        """Ray's deprecated ``ray.init()["node_ip_address"]``: an ``address_info`` entry, with the same warning."""
        import warnings

        warnings.warn(f'ray.init()[{key!r}] is deprecated (as in Ray): use .address_info[{key!r}].',
                      DeprecationWarning, stacklevel=2)
        return self.address_info[key]

    def __repr__(self) -> str:  # what a notebook shows for ``muster.init()``, as Ray's RayContext(...) does
        return (f"{type(self).__name__}(engine={self.name!r}, address={self.address_info['address']!r}, "
                f"python_version={self.python_version!r}, muster_version={self.ray_version!r})")

    def add_log_sink(self, sink: LogSink) -> None:
        """Also hand every line of worker output to ``sink(label, pid, lines)``.

        It runs on an engine thread and must not block (the run store queues
        rows). ``pid`` is the worker process's id, or None when unknown."""
        with self._log_sinks_lock:
            self._log_sinks.append(sink)

    def remove_log_sink(self, sink: LogSink) -> None:
        """Stop handing lines to ``sink`` (no-op when it was not added)."""
        with self._log_sinks_lock:
            if sink in self._log_sinks:
                self._log_sinks.remove(sink)

    def emit_logs(self, label: str, pid: int | None, lines: list[str]) -> None:
        """For engines: give one worker's new lines to every sink (a failing sink is skipped)."""
        with self._log_sinks_lock:
            sinks = list(self._log_sinks)
        for sink in sinks:
            try:
                sink(label, pid, lines)
            except Exception:  # noqa: BLE001 - a broken sink must not stop the engine's relay
                pass

    @abc.abstractmethod
    def resources(self) -> Resources:
        """Everything the engine has, free or not."""

    @abc.abstractmethod
    def available(self) -> Resources:
        """What is free now."""

    def ray_view(self, available: bool = False) -> Resources:
        """What Ray's ``cluster_resources()`` (``available``: ``available_resources()``) shows:
        :meth:`resources` (or :meth:`available`) plus Ray's "memory" and "object_store_memory"
        entries in bytes, where the engine knows them."""
        return self.available() if available else self.resources()

    def show_stacks(self, handle: "RuntimeActor") -> bool:
        """Have ``handle``'s process print every thread's Python stack into its output, and go on;
        False where the engine cannot (its processes are Ray's, maybe on other nodes)."""
        return False

    def preload(self, modules: list[str]) -> None:  # noqa: B027 - a no-op unless an engine can use it
        """A hint: workers started from now on will import ``modules``. An engine that can import
        them once, ahead of the workers (the local engine's zygote), does; others ignore it."""

    @abc.abstractmethod
    def submit(
        self,
        fn: Callable[..., Any],
        args: tuple,
        kwargs: dict,
        resources: Resources,
        on_event: EventHandler | None = None,
        label: str = "task",
        bundle: BundleRef | None = None,
        max_calls: tuple[str, int] | None = None,
        on_wait: Callable[[str], None] | None = None,
        node: NodeRef | None = None,
    ) -> Future:
        """Run ``fn(*args, **kwargs)`` once its resources are free (in ``bundle``, or on ``node``, when given); its
        events go to ``on_event``. ``on_wait`` gets a message now and then while it waits for resources
        other work holds (what it asks for, what holds it), from an engine that queues it itself.

        ``max_calls``: ``(function, n)`` when the task is one of ``function``'s (its ``module.qualname``),
        declared with Ray's ``max_calls=n``: a worker that has run ``n`` tasks of that function ends. An
        engine whose workers count for themselves (:func:`muster.core.context.retire_after_call`) ignores
        it; one whose workers are Ray's hands it to Ray."""

    @abc.abstractmethod
    def create_actor(
        self,
        cls: type,
        args: tuple,
        kwargs: dict,
        resources: Resources,
        label: str = "",
        on_event: EventHandler | None = None,
        fresh_process: bool = False,
        bundle: BundleRef | None = None,
        node: NodeRef | None = None,
    ) -> RuntimeActor:
        """Start one actor of ``cls`` holding ``resources`` (``on_event`` is live during ``__init__``),
        taken from ``bundle`` when given, on ``node`` when given (an engine of one node has nothing to do).

        ``fresh_process``: start it in a new interpreter, not a fork of one that holds the driver's
        state (an engine whose actors are all new processes has nothing to change).
        """

    def node_resources(self) -> list[Resources]:
        """Each live node's total resources (an engine on one machine: that machine's)."""
        return [self.resources()]

    def reserve(self, group: str, bundles: list[Resources], strategy: str = "PACK", name: str = "",
                lifetime: str | None = None) -> Future:
        """Hold ``bundles`` for placement group ``group`` once they fit together (across nodes as
        ``strategy`` says). The future is done when they are held; its exception is the removal,
        when ``unreserve`` came first. ``name`` and ``lifetime`` are the user's (Ray's meaning), for
        an engine whose groups are another system's.

        Raises:
            ResourcesUnavailableError: the bundles can never fit together, however idle the engine.
        """
        placed: Future = Future()
        placed.set_result(None)  # an engine that reserves nothing: "placed" at once
        return placed

    def unreserve(self, group: str) -> None:  # noqa: B027 - a no-op where nothing is reserved
        """Give ``group``'s bundles back: work still waiting for them fails, work running on them is killed."""

    def group_table_row(self, group: str) -> dict[str, Any] | None:
        """The ``placement_group_table`` row the engine's own system keeps for ``group`` (Ray's on a Ray
        cluster); None where muster's row is the truth (the embedded engine)."""
        return None

    def capacity(self, request: Resources) -> int:
        """How many more actors holding ``request`` would fit in what is free now."""
        free = self.available()
        counts = [int(free.get(k, 0.0) / v + 1e-9) for k, v in request.items() if v > 0]
        return min(counts) if counts else 0

    def blocked(self, handle: RuntimeActor) -> ContextManager[None]:
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
        what: str = "",
    ) -> list[RuntimeActor]:
        """Start ``n`` actors of ``cls`` together, all or nothing.

        ``what`` names who asked (``"TorchTrainer run 'r' (ScalingConfig(num_workers=8))"``): the
        ``ResourcesUnavailableError`` of a gang that can never fit starts with it.
        """

    @abc.abstractmethod
    def kill(self, handle: RuntimeActor, grace_s: float = 0.0) -> None:
        """End an actor's process and free its resources (force after ``grace_s``)."""

    def interrupt(self, handle: RuntimeActor) -> None:
        """Raise ``KeyboardInterrupt`` in the task running in ``handle`` (``muster.cancel`` without
        ``force``): here a SIGINT to its process, which the task workers take as Python's default does."""
        if handle.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(handle.pid, signal.SIGINT)

    def queued(self, task: Future) -> RuntimeActor | None:
        """The handle of the task ``submit`` returned ``task`` for, before its TaskStarted event: where the
        engine already has one (Ray: its Ray task), ``kill``/``interrupt`` of it cancel the task in the
        engine's queue, so it never runs. None here: a task gets its process only when it starts."""
        return None

    @abc.abstractmethod
    def exit_status(self, handle: RuntimeActor, timeout_s: float = 0.5) -> int | None:
        """The dead actor's exit code (negative: signal), waiting up to ``timeout_s``."""

    @abc.abstractmethod
    def shutdown(self) -> None:
        """Stop every process the engine started. Idempotent."""
