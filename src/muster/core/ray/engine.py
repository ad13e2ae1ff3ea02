"""The Ray engine: muster's runtime seam on an existing Ray cluster.

Tasks are Ray tasks, actors are Ray actors, a gang is a set of actors in a
placement group.  Workers reach the driver through one hub actor
(``hub.py``); a poller thread here takes their events in arrival order and
hands each sender's to that sender's mailbox (``mailbox.py``), whose own
thread runs the handler.  A death (or a task's end) enters the mailbox only
after every event the worker had sent, so it is reported after them.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import secrets
import socket
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from muster.core import resources as res
from muster.core import settings, setup_hook
from muster.core.ray import placement
from muster.core.ray.errors import from_ray
from muster.core.ray.gate import RayGate, shutdown_ray
from muster.core.ray.groups import RayGroups, is_removal, remove_settled
from muster.core.ray.handles import RayActor, RaySender, RayTask, ray_options
from muster.core.ray.hub import EventHub
from muster.core.ray.metrics_processes import MetricsProcesses
from muster.core.ray.worker import RayWorker, pack, run_task, task_runner, unpack
from muster.core.runtime import BundleRef, EventHandler, NodeRef, Runtime, RuntimeActor, removed_error
from muster.exceptions import (
    ActorPlacementGroupRemoved,
    ClusterUnreachableError,
    MusterError,
    ResourcesUnavailableError,
    RuntimeNotStartedError,
    TaskPlacementGroupRemoved,
)

_POLL_S = 0.5
#: How long a shutdown waits for the engine's calls into Ray to end before ``ray.shutdown()`` (gate.py).
_QUIESCE_S = 10.0
#: A gang that fits only with nodes the cluster lost waits this long for nodes to join.
_LOST_NODE_WAIT_S = 600.0


class RayRuntime(Runtime):
    """muster's engine on a Ray cluster (``muster.init(address="auto" | "ray://host:port")``)."""

    name = "ray"

    def __init__(self, address: str):
        super().__init__()
        self.address = address
        self._ids = itertools.count()
        self._token = secrets.token_hex(3)
        self._senders: dict[str, RaySender] = {}
        self._tasks: dict[Future, RayTask] = {}  # each submitted task's Ray task, until it ends (``queued``)
        self._actors: dict[str, RayActor] = {}
        self._known_nodes: dict[str, dict[str, float]] = {}  # every node seen alive: id -> resources
        self._lost_at: dict[str, float] = {}  # when each known node was first seen gone
        self._gangs: dict[str, list[Any]] = {}  # placement group id -> [group, members left]
        self._groups = RayGroups()  # the user's placement groups (muster.util.placement_group)
        self._lock = threading.RLock()
        self._routed = threading.Condition()
        self._routed_total = 0
        self._routed_by_key: dict[str, int] = {}
        self._closed = False
        self.gate = RayGate()  # every call into Ray from the engine's threads; closed before ray.shutdown()
        self._owns_ray = False
        self._breakpoint_hook: str | None = None
        #: muster.init's runtime_env keys Ray's own ray.init applies: local working_dir/py_modules it uploads
        self.job_runtime_env: dict[str, Any] = {}
        self._hub: Any = None
        self.metrics_processes: MetricsProcesses | None = None  # (once the hub is up)
        self._finisher = ThreadPoolExecutor(4, thread_name_prefix=f"muster-ray-finish-{self._token}")
        self._worker_cls: Any = None
        self._task_fn: Any = None
        self._limited_fns: dict[tuple[str, int], Any] = {}  # (function, max_calls) -> its own Ray function

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> None:
        """Connect to the cluster (unless this process already did) and start the hub."""
        if not ray.is_initialized():
            check_reachable(self.address)
            self._breakpoint_hook = os.environ.get("PYTHONBREAKPOINT")  # ray.init points it at Ray's debugger
            hook = setup_hook.for_ray()  # muster.init(runtime_env={"worker_process_setup_hook": ...})
            env = dict(self.job_runtime_env, **({"worker_process_setup_hook": hook} if hook is not None else {}))
            try:
                ray.init(address=self.address, log_to_driver=True, logging_level=logging.WARNING,
                         runtime_env=env or None)
            except BaseException:
                ray.shutdown()  # a half-made connection (Ray Client) must not outlive the failed init
                raise
            self._owns_ray = True
        here = ray.get_runtime_context().get_node_id()
        self.job_id = str(ray.get_runtime_context().get_job_id())  # Ray's id of this driver's job
        remote: Any = ray.remote  # its typed overloads do not list every actor option
        hub_cls = remote(num_cpus=0, max_concurrency=1000)(EventHub)
        self._hub = hub_cls.options(
            name=f"muster-hub-{self._token}", scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=True)
        ).remote()
        self._worker_cls = remote(concurrency_groups={"watch": 1})(RayWorker)
        self._task_fn = ray.remote(run_task)
        ray.get(self._hub.count.remote())
        self.metrics_processes = MetricsProcesses(self._hub, self.user_metrics, self.gate)
        self.node_resources()  # remember the cluster's shape: a node lost later is waited for
        threading.Thread(target=self._poll_forever, name=f"muster-ray-poll-{self._token}", daemon=True).start()

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.metrics_processes is not None:
            self.metrics_processes.close()  # before the hub goes
        for actor in list(self._actors.values()):
            actor._expected_exit = True
            try:
                ray.kill(actor.ray_actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        for group, _ in list(self._gangs.values()):
            try:
                remove_settled(group)
            except Exception:  # noqa: BLE001
                pass
        self._gangs.clear()
        self._groups.clear()
        try:
            ray.kill(self._hub)
        except Exception:  # noqa: BLE001
            pass
        self._finisher.shutdown(wait=False)
        self.user_metrics.close()  # the driver's own user metrics: its recorder writes them last
        self.gate.close(_QUIESCE_S)  # the poller's wait ends as the hub dies
        self._let_go(_QUIESCE_S)
        if self._owns_ray:
            shutdown_ray()
            if self._breakpoint_hook is None:
                os.environ.pop("PYTHONBREAKPOINT", None)
            else:
                os.environ["PYTHONBREAKPOINT"] = self._breakpoint_hook

    def _let_go(self, timeout_s: float) -> None:
        """Wait (up to ``timeout_s``) for the engine's threads to end, so that none lets go of a Ray object
        while ``ray.shutdown()`` runs.

        Ray ends the process (exit status 1, its message only in its log) when the last reference to an
        ObjectRef goes in another thread while ``ray.shutdown()`` takes the core worker down. A task's mailbox
        thread holds the task's ref until it ends, after the task's result is out (and its user's callbacks
        ran); the finisher's threads hold Ray's futures of refs. Tasks still running keep theirs: their
        mailboxes are told to end."""
        deadline = time.monotonic() + timeout_s

        def join(kind: str) -> None:
            for thread in threading.enumerate():
                if (thread.name.startswith(kind) and self._token in thread.name
                        and thread is not threading.current_thread()):
                    thread.join(max(0.0, deadline - time.monotonic()))

        join("muster-ray-finish")  # first: a finished task's last step goes to its mailbox
        with self._lock:
            senders = list(self._senders.values())
        for sender in senders:
            sender.stop()
        join("muster-mailbox-")
        join("muster-ray-poll")

    # -- events ------------------------------------------------------------
    def _poll_forever(self) -> None:
        while not self._closed:
            try:
                with self.gate:
                    batch = ray.get(self._hub.take.remote(_POLL_S))
            except Exception:  # noqa: BLE001 - the hub is gone: we are shutting down
                if self._closed:
                    return
                time.sleep(_POLL_S)
                continue
            for key, event_id, wants_reply, data in batch:
                sender = self._senders.get(key)
                if sender is not None:
                    sender.mailbox.put(("event", event_id, wants_reply, data))
                elif wants_reply:
                    self.answer(key, event_id, False, MusterError("the driver no longer knows this worker"))
            with self._routed:
                self._routed_total += len(batch)
                for key, *_ in batch:
                    self._routed_by_key[key] = self._routed_by_key.get(key, 0) + 1
                self._routed.notify_all()

    def answer(self, key: str, event_id: int, ok: bool, value: Any) -> None:
        try:
            data = pack(value)
        except Exception as exc:  # noqa: BLE001 - a reply that does not pickle
            ok, data = False, pack(MusterError(f"could not send the reply: {exc}"))
        with contextlib.suppress(RuntimeNotStartedError), self.gate:  # shut down: no one waits for it
            self._hub.answer.remote(key, event_id, ok, data)

    def flush(self, key: str | None = None, sent: int | None = None, timeout_s: float = 5.0) -> None:
        """Wait until every event already in the hub -- or, given ``key`` and ``sent``, that
        sender's first ``sent`` events -- has been routed to its mailbox."""
        if key is not None and sent is not None:
            with self._routed:
                self._routed.wait_for(lambda: self._routed_by_key.get(key, 0) >= sent, timeout_s)
            return
        try:
            with self.gate:
                target = ray.get(self._hub.count.remote(), timeout=timeout_s)
        except Exception:  # noqa: BLE001 - no hub: nothing more will arrive
            return
        with self._routed:
            self._routed.wait_for(lambda: self._routed_total >= target, timeout_s)

    def in_background(self, fn: Callable[[], None]) -> None:
        """Run driver work off Ray's callback threads (which must never block on Ray)."""
        try:
            self._finisher.submit(fn)
        except RuntimeError:  # shut down
            pass

    def forget(self, sender: RaySender) -> None:
        with self._lock:
            self._senders.pop(sender.key, None)
            self._actors.pop(sender.key, None)
        with self._routed:
            self._routed_by_key.pop(sender.key, None)
        if not self._closed:
            with contextlib.suppress(RuntimeNotStartedError), self.gate:
                self._hub.forget.remote(sender.key)

    # -- resources ---------------------------------------------------------
    def resources(self) -> dict[str, float]:
        return placement.cluster_view(ray.cluster_resources(), nodes=True)

    def available(self) -> dict[str, float]:
        view = placement.cluster_view(ray.available_resources(), nodes=True)
        return {k: view.get(k, 0.0) for k in self.resources()}

    def ray_view(self, available: bool = False) -> dict[str, float]:
        """Ray's own totals (or free amounts), with its "memory" and "object_store_memory" bytes."""
        raw = ray.available_resources() if available else ray.cluster_resources()
        view = self.available() if available else self.resources()
        return {**view, **{k: float(raw[k]) for k in ("memory", "object_store_memory") if k in raw}}

    def node_resources(self, lost: bool = False) -> list[dict[str, float]]:
        """Each live node's total resources, in Ray's order; with ``lost``, those of the nodes
        this driver saw alive that went away in the last ``_LOST_NODE_WAIT_S`` seconds."""
        alive = {n["NodeID"]: placement.cluster_view(n["Resources"], nodes=True) for n in ray.nodes()
                 if n.get("Alive")}
        now = time.monotonic()
        with self._lock:
            self._known_nodes.update(alive)
            for node_id in self._known_nodes:
                if node_id not in alive:
                    self._lost_at.setdefault(node_id, now)
            if lost:
                return [r for node_id, r in self._known_nodes.items()
                        if node_id not in alive and now - self._lost_at[node_id] < _LOST_NODE_WAIT_S]
        return list(alive.values())

    def capacity(self, request: dict[str, float]) -> int:
        """Whole bundles of ``request`` that fit in each node's free resources, summed."""
        try:
            from ray._private.state import available_resources_per_node

            free = [placement.cluster_view(r, nodes=True) for r in available_resources_per_node().values()]
        except Exception:  # noqa: BLE001 - an internal API: fall back to the cluster-wide sum
            return super().capacity(request)
        return placement.capacity(free, res.normalize(request), "PACK") if request else 0

    # -- actors ------------------------------------------------------------
    def _new_key(self, kind: str) -> str:
        return f"{kind}{next(self._ids)}-{self._token}"

    def _spawn(
        self, label: str, request: dict[str, float], env: dict[str, str] | None, strategy: Any,
        on_event: EventHandler | None,
    ) -> RayActor:
        if self._closed:
            raise RuntimeNotStartedError("This muster runtime was shut down; call muster.init() again.")
        key = self._new_key("a")
        options = ray_options(request)
        if strategy is not None:
            options["scheduling_strategy"] = strategy
        with self.gate:
            ray_actor = self._worker_cls.options(max_restarts=0, **options).remote(
                self._hub, key, label, list(sys.path), {**settings.forwarded_env(), **(env or {})}
            )
        actor = RayActor(self, key, label, ray_actor, on_event)
        with self._lock:
            self._senders[key] = actor
            self._actors[key] = actor
        return actor

    def create_actor(
        self,
        cls: type,
        args: tuple,
        kwargs: dict,
        resources: dict[str, float],
        label: str = "",
        on_event: EventHandler | None = None,
        fresh_process: bool = False,  # every Ray actor is a new worker process
        bundle: BundleRef | None = None,
        node: NodeRef | None = None,
    ) -> RuntimeActor:
        request = res.normalize(resources, what="actor resources")
        placement.check_gang(self.node_resources(), request, 1, "PACK", what=f"actor {label or cls.__name__}")
        try:
            where = self._where(bundle, node)
        except TaskPlacementGroupRemoved as exc:
            raise ActorPlacementGroupRemoved(str(exc)) from None
        actor = self._spawn(label or cls.__name__, request, None, where, on_event)
        try:
            actor.wait_started()
            actor.call("__init__", cls, *args, **kwargs).result()
        except BaseException as exc:
            self.kill(actor)
            if bundle is not None and not self._groups.holds(bundle.group):  # Ray failed it: its group went
                raise ActorPlacementGroupRemoved(str(removed_error(bundle.group))) from exc
            raise
        return actor

    def reserve(self, group: str, bundles: list[dict[str, float]], strategy: str = "PACK", name: str = "",
                lifetime: str | None = None) -> Future:
        """A Ray placement group of ``bundles``: the cluster holds them once Ray places it."""
        return self._groups.reserve(group, bundles, strategy, name, lifetime)

    def group_table_row(self, group: str) -> dict[str, Any] | None:
        return self._groups.table_row(group)

    def unreserve(self, group: str) -> None:
        """Remove the group's Ray placement group: Ray ends what runs in it, and fails what waits for it."""
        self._groups.remove(group)

    def create_gang(
        self,
        n: int,
        cls: type,
        resources_per_member: dict[str, float],
        strategy: str = "PACK",
        env: dict[str, str] | None = None,
        on_wait: Callable[[str], None] | None = None,
        timeout_s: float | None = None,
        what: str = "",
    ) -> list[RuntimeActor]:
        request = res.normalize(resources_per_member, what="resources_per_worker")
        # fits only with lost nodes: wait, bounded
        if not self._check_gang(request, n, strategy, on_wait, what or "ScalingConfig"):
            timeout_s = min(timeout_s if timeout_s is not None else _LOST_NODE_WAIT_S, _LOST_NODE_WAIT_S)
        bundle = request or {"CPU": 0.001}  # Ray refuses empty bundles
        group = placement_group([dict(bundle) for _ in range(n)], strategy=strategy)
        self._wait_placed(group, n, bundle, strategy, on_wait, timeout_s)
        members: list[RayActor] = []
        try:
            for i in range(n):
                where = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i)
                members.append(self._spawn(f"worker {i}", request, env, where, None))
            with self._lock:
                self._gangs[group.id.hex()] = [group, n]
            for actor in members:
                actor.gang = group.id.hex()
                actor.wait_started()
            for fut in [a.call("__init__", cls) for a in members]:
                fut.result()
        except BaseException:
            for actor in members:
                self.kill(actor)
            if not members:
                remove_settled(group)
            raise
        return list(members)

    def _check_gang(
        self, request: dict[str, float], n: int, strategy: str, on_wait: Callable[[str], None] | None, what: str
    ) -> bool:
        """Raise if the gang can never fit. If it fits the live nodes, return True; if it would
        fit only with nodes lost in the last ``_LOST_NODE_WAIT_S`` seconds, say so and return
        False: the caller waits for nodes to join (a lost node is often replaced), not forever."""
        alive = self.node_resources()
        try:
            placement.check_gang(alive, request, n, strategy, what=what)
            return True
        except ResourcesUnavailableError:
            lost = self.node_resources(lost=True)
            if not lost or placement.capacity(alive + lost, request, strategy) < n:
                raise
            if on_wait is not None:
                on_wait(
                    f"the cluster lost {len(lost)} node(s) and cannot hold {n} x {{{res.fmt(request)}}} "
                    f"({strategy}) without them; waiting up to {_LOST_NODE_WAIT_S:.0f} s for nodes to join"
                )
            return False

    def _wait_placed(
        self, group: Any, n: int, bundle: dict[str, float], strategy: str,
        on_wait: Callable[[str], None] | None, timeout_s: float | None,
    ) -> None:
        ready = group.ready()
        start, told = time.monotonic(), False
        while True:
            with self.gate:
                done, _ = ray.wait([ready], timeout=0.5)
            if done:
                return
            waited = time.monotonic() - start
            if not told and waited > 1.0 and on_wait is not None:
                told = True
                on_wait(
                    f"waiting for {n} x {{{res.fmt(bundle)}}} ({strategy}) on the Ray cluster; free now: "
                    f"{res.fmt(res.machine(self.available()))}"
                )
            if timeout_s is not None and waited > timeout_s:
                remove_settled(group)
                raise ResourcesUnavailableError(
                    f"a gang of {n} x {{{res.fmt(bundle)}}} ({strategy}) was not placed within "
                    f"{timeout_s:.0f} s: the cluster stayed too busy or too small (free now: "
                    f"{res.fmt(res.machine(self.available()))}). Fix: add nodes (`ray start --address=...`), free "
                    "resources, or ask for fewer workers.",
                    requested={k: v * n for k, v in bundle.items()}, total=self.resources(),
                )

    def kill(self, handle: RuntimeActor, grace_s: float = 0.0) -> None:
        if isinstance(handle, RayTask):  # a force-cancelled task: Ray ends its worker process
            if handle.ref is not None:
                with contextlib.suppress(Exception), self.gate:  # already done, or shut down
                    ray.cancel(handle.ref, force=True)
            return
        assert isinstance(handle, RayActor)
        handle._expected_exit = True
        with contextlib.suppress(Exception), self.gate:  # already gone, or shut down
            ray.kill(handle.ray_actor, no_restart=True)
        gang = handle.gang
        handle.gang = None
        if gang is not None:
            emptied = None  # the gang's Ray group once its last member is gone
            with self._lock:
                entry = self._gangs.get(gang)
                if entry is not None:
                    entry[1] -= 1
                    if entry[1] <= 0:
                        emptied = self._gangs.pop(gang)[0]
            if emptied is not None:
                with contextlib.suppress(Exception):  # already gone
                    remove_settled(emptied)

    def interrupt(self, handle: RuntimeActor) -> None:
        """Ray's own non-force cancel of the task's run: ``KeyboardInterrupt`` in it, on whichever node it runs
        (the base class's SIGINT would go to a pid on this machine)."""
        if isinstance(handle, RayTask) and handle.ref is not None:
            with contextlib.suppress(Exception), self.gate:  # already done, or shut down
                ray.cancel(handle.ref, force=False, recursive=False)  # its hub calls are not its work

    def queued(self, task: Future) -> RuntimeActor | None:
        """A submitted task's Ray task, from ``submit`` on: ``ray.cancel`` takes it out of Ray's queue."""
        with self._lock:
            return self._tasks.get(task)

    def exit_status(self, handle: RuntimeActor, timeout_s: float = 0.5) -> int | None:
        """Ray does not report a dead actor's exit code; its death message says what happened."""
        return None

    # -- tasks -------------------------------------------------------------
    def submit(
        self,
        fn: Callable[..., Any],
        args: tuple,
        kwargs: dict,
        resources: dict[str, float],
        on_event: EventHandler | None = None,
        label: str = "task",
        bundle: BundleRef | None = None,
        max_calls: tuple[str, int] | None = None,
        on_wait: Callable[[str], None] | None = None,
        node: NodeRef | None = None,
    ) -> Future:
        """A Ray task; ``on_wait`` is never called: Ray's scheduler queues it (``ray status`` shows the demand it
        waits for), and what this engine reads of Ray (``available_resources``, ``nodes``) cannot tell a queued
        task from a running one holding the same resources; only Ray's state API (the dashboard) could."""
        request = res.normalize(resources if resources is not None else {"CPU": 1.0}, what="task resources")
        placement.check_gang(self.node_resources(), request, 1, "PACK", what=label)
        out: Future = Future()
        if self._closed:
            out.set_exception(RuntimeNotStartedError("This muster runtime was shut down; call muster.init()."))
            return out
        options = ray_options(request)
        try:
            where = self._where(bundle, node)
            if where is not None:
                options["scheduling_strategy"] = where
        except TaskPlacementGroupRemoved as exc:
            out.set_exception(exc)
            return out
        task = RayTask(self, self._new_key("t"), label, on_event)
        with self._lock:
            self._senders[task.key] = task
        try:
            data = pack((fn, args, kwargs))
        except Exception as exc:  # noqa: BLE001
            self.forget(task)
            out.set_exception(MusterError(f"Could not send the arguments of {label} to a worker: {exc}"))
            return out
        try:
            with self.gate:
                ref = task.ref = self._task_fn_for(max_calls).options(max_retries=0, name=label, **options).remote(
                    self._hub, task.key, label, list(sys.path), settings.forwarded_env(), data
                )
        except RuntimeNotStartedError as exc:  # shut down meanwhile
            self.forget(task)
            out.set_exception(exc)
            return out
        with self._lock:
            self._tasks[out] = task
        out.add_done_callback(self._task_ended)
        ref.future().add_done_callback(lambda f: self.in_background(lambda: task.finish(f, out)))
        return out

    def _where(self, bundle: BundleRef | None, node: NodeRef | None) -> Any:
        """Ray's scheduling strategy for work in ``bundle`` or on ``node`` (None: Ray's default).

        Raises:
            TaskPlacementGroupRemoved: ``bundle``'s group was removed.
        """
        if bundle is not None:
            return self._groups.strategy(bundle)
        return None if node is None else NodeAffinitySchedulingStrategy(node.node_id, soft=node.soft)

    def _task_ended(self, out: Future) -> None:
        with self._lock:
            self._tasks.pop(out, None)

    def _task_fn_for(self, max_calls: tuple[str, int] | None) -> Any:
        """The Ray function a task runs as: one shared by every task, or, for a function declared with
        ``max_calls``, one of its own that Ray declares with it. Ray counts ``max_calls`` per Ray
        function in each worker and ends the worker at the limit, so each limited function needs its own."""
        if max_calls is None:
            return self._task_fn
        with self._lock:
            fn = self._limited_fns.get(max_calls)
            if fn is None:
                function, n = max_calls
                remote: Any = ray.remote  # its typed overloads do not list max_calls
                fn = self._limited_fns[max_calls] = remote(max_calls=n)(task_runner(function))
            return fn

    def task_result(self, task: RayTask, raw: Future) -> tuple[bool, Any, int]:
        """``(ok, value, events sent)`` of a finished Ray task; Ray's errors become muster's (a lost worker:
        WorkerCrashedError)."""
        exc = raw.exception()
        if exc is None:
            sent, data = raw.result()
            ok, value = unpack(data)
            return ok, value, sent
        if is_removal(exc):  # it waited for a group that was removed meanwhile
            return False, TaskPlacementGroupRemoved(
                f"{task.label}: its placement group was removed (remove_placement_group) before it got its "
                "bundle. Schedule it into a live group, or into none."), 0
        return False, from_ray(exc, task.label), 0


def check_reachable(address: str, timeout_s: float = 3.0) -> None:
    """Fail in seconds, not minutes, when nothing listens at a cluster address."""
    host_port = address.removeprefix("ray://")
    host, _, port = host_port.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return
    except (OSError, ValueError) as exc:
        why = exc
    default = "10001 for ray://" if address.startswith("ray://") else "6379"
    raise ClusterUnreachableError(
        f"muster.init(address={address!r}): no Ray cluster answers there ({why}). Fix: start one with "
        f"`ray start --head` on the head node, check the host and port (default {default}), or run on "
        "this machine with address='local' (and unset MUSTER_ADDRESS / RAY_ADDRESS)."
    )
