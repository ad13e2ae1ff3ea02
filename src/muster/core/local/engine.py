"""The local engine: worker processes forked from a warm zygote, on one machine.

Threads in the driver (all daemons):

* ``accept``   takes each new worker's connection and starts its reader;
* ``zygote``   reads fork confirmations and exit statuses from the zygote;
* ``reader-N`` one per worker: results, events, then EOF (= death);
* ``logs``     relays worker stdout/stderr, prefixed with label and pid;
* ``dispatch`` one per task resource shape and bundle: starts its queued tasks (task_pool.py).

Because a worker's results, events and death all arrive on one ordered
stream, a report the worker sent is always handled before its death.

This module holds the engine's lifecycle (the zygote, its threads, shutdown),
its actors and gangs, and its resources (slots, placement-group bundles).
Tasks -- pooled workers by resource shape and their dispatchers -- are in
:mod:`muster.core.local.task_pool`.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from multiprocessing.connection import Connection, Listener
from typing import Any, Callable, Iterator

from muster.core import resources as res
from muster.core import settings
from muster.core.local import reservations, wire, zygote, zygote_process
from muster.core.local.actor import LocalActor
from muster.core.local.logs import LogRelay
from muster.core.local.reservations import Reservations
from muster.core.local.slots import (TASK_FIX, Allocation, BusyWarning, SlotTable, detect_total, node_memory,
                                     node_resources, on_this_node)
from muster.core.local.task_pool import TaskPool
from muster.core.runtime import BundleRef, EventHandler, NodeRef, Runtime, RuntimeActor, removed_error
from muster.exceptions import (
    ActorPlacementGroupRemoved,
    describe_exit,
    MusterError,
    RuntimeNotStartedError,
    TaskError,
)

_STARTUP_TIMEOUT_S = 60.0
_log = logging.getLogger("muster")


class LocalRuntime(Runtime):
    """Embedded engine for one machine. Starts in well under a second after torch is imported."""

    name = "local"

    def __init__(
        self,
        num_cpus: float | None = None,
        num_gpus: float | None = None,
        resources: dict[str, float] | None = None,
    ):
        super().__init__()
        self.node_id = socket.gethostname()
        self._memory: dict[str, float] | None = None  # Ray's "memory" and "object_store_memory", shown only
        self.slots = SlotTable(detect_total(num_cpus, num_gpus, resources))
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        names = [d.strip() for d in visible.split(",") if d.strip()] if visible else []
        n_gpus = int(self.slots.total().get("GPU", 0))
        self._gpu_names = (names + [str(i) for i in range(len(names), n_gpus)])[:n_gpus]
        self._ids = itertools.count()
        self._actors: dict[int, LocalActor] = {}
        self._seen: dict[int, LocalActor] = {}  # every actor ever started, for log labels
        self._by_pid: dict[int, LocalActor] = {}
        self._lock = threading.RLock()
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        self._start_lock = threading.Lock()
        self._closed = False
        self._zygote: subprocess.Popen | zygote_process.ForkedZygote | None = None
        self.zygote_forked = False  # True when the zygote is a fork of this driver (see start())
        self._zygote_conn: Connection | None = None
        self._zygote_lock = threading.Lock()
        self._preload_extra: list[str] = []  # what trainers asked the zygote to import too (preload())
        self._tmp = tempfile.mkdtemp(prefix="muster-")
        self._authkey = secrets.token_bytes(16)
        self._listener: Listener | None = None
        self._logs: LogRelay | None = None
        self.reservations = Reservations(self.slots)  # placement groups' bundles
        self._task_pool = TaskPool(self)  # tasks: pooled workers by resource shape, and their dispatchers
        atexit.register(self.shutdown)

    # -- lifecycle ---------------------------------------------------------
    def start(self, wait: bool = False) -> None:
        """Start the zygote (importing torch) in the background; optionally wait for it."""
        with self._start_lock:
            if self._closed:
                raise RuntimeNotStartedError("This muster runtime was shut down; call muster.init() again.")
            if self._listener is None:
                # Fork the zygote before this engine starts any thread of its own (fork_blocker checks).
                blocker = zygote.fork_blocker()
                if blocker is None:
                    self._fork_zygote()
                self._listener = Listener(os.path.join(self._tmp, "ctl.sock"), "AF_UNIX", authkey=self._authkey)
                self._logs = LogRelay(os.path.join(self._tmp, "log.sock"), self._label_for, self.emit_logs)
                threading.Thread(target=self._accept_forever, name="muster-accept", daemon=True).start()
                if blocker is None:
                    threading.Thread(target=self._read_zygote, name="muster-zygote", daemon=True).start()
                else:
                    _log.debug("muster: starting the zygote as a fresh interpreter, not a fork: %s", blocker)
                    self._spawn_zygote()
        if wait:
            self._wait_started()

    def _fork_zygote(self) -> None:
        self._zygote, self._zygote_conn = zygote_process.fork(_preload(self._preload_extra), self._tmp)
        self.zygote_forked = True

    def _spawn_zygote(self) -> None:
        assert self._listener is not None  # start() made it
        self._zygote = zygote_process.spawn(self._listener.address, self._authkey, _preload(self._preload_extra))

    def _wait_started(self) -> None:
        deadline = time.monotonic() + _STARTUP_TIMEOUT_S
        while not self._started.wait(0.1):
            if self._zygote is not None and self._zygote.poll() is not None:
                raise MusterError(
                    f"muster's worker launcher (zygote) exited with code {self._zygote.returncode} before "
                    "it was ready; its stderr is above. Check that `python -m muster.core.local` "
                    "can import muster and torch in this environment."
                )
            if time.monotonic() > deadline:
                raise MusterError(f"muster's worker launcher did not start within {_STARTUP_TIMEOUT_S:.0f} s.")
        if self._start_error:
            raise self._start_error

    def _accept_forever(self) -> None:
        assert self._listener is not None
        while not self._closed:
            try:
                conn = self._listener.accept()
                hello = wire.recv(conn)
            except Exception:
                if self._closed:
                    return
                continue
            if hello[0] == "ready" and self._zygote_conn is None:
                with self._zygote_lock, contextlib.suppress(OSError):  # hints given while it started
                    self._zygote_conn = conn
                    if self._preload_extra:
                        wire.send(conn, ("preload", list(self._preload_extra)))
                threading.Thread(target=self._read_zygote, name="muster-zygote", daemon=True).start()
                self._started.set()
            elif hello[0] == "hello":
                actor = self._actors.get(hello[1])
                if actor is None:
                    conn.close()
                    continue
                actor.pid = hello[2]
                actor._conn = conn
                threading.Thread(target=actor._read_forever, name=f"muster-reader-{actor.worker_id}",
                                 daemon=True).start()
                actor.connected.set()

    def _read_zygote(self) -> None:
        assert self._zygote_conn is not None
        while True:
            try:
                msg = wire.recv(self._zygote_conn)
            except (EOFError, OSError):
                break
            except TypeError:  # shutdown() closed the link under this read (its handle is None now)
                if self._closed:
                    break
                raise
            if msg[0] == "ready":  # a forked zygote's link is a socket pair, not an accepted connection
                self._started.set()
            elif msg[0] == "forked":
                actor = self._actors.get(msg[1])
                if actor is not None:
                    actor.pid = msg[2]
                    with self._lock:
                        self._by_pid[msg[2]] = actor
            elif msg[0] == "exited":
                self._exited(msg[1], msg[2])
        if not self._closed:
            print("muster: the worker launcher (zygote) exited; workers are gone.", file=sys.stderr)
            for actor in list(self._actors.values()):
                actor.exited.set()

    def _exited(self, pid: int, code: int) -> None:
        """Worker ``pid`` has exited with ``code`` (negative: the signal that killed it)."""
        with self._lock:
            actor = self._by_pid.pop(pid, None)
        if actor is not None:
            actor.exitcode = code
            actor.exited.set()

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._task_pool.close()  # each dispatcher fails what is still queued, then ends
        self.reservations.clear()  # a pending placement group stops waiting
        for actor in list(self._actors.values()):
            self._terminate(actor, grace_s=0.0)
        if self._started.is_set() and self._zygote_conn is not None:
            try:
                with self._zygote_lock:
                    wire.send(self._zygote_conn, ("quit",))
            except OSError:
                pass
        elif self._zygote is not None and self._zygote.poll() is None:
            # Still importing, so it forked nothing (forks wait until it is ready) and
            # would hear "quit" only then: stop it now instead of waiting 3 s.
            zygote_process.kill_group(self._zygote.pid)
        if self._zygote is not None:
            try:
                self._zygote.wait(3)
            except subprocess.TimeoutExpired:
                zygote_process.kill_group(self._zygote.pid)
                self._zygote.wait()
        if self._zygote_conn is not None:
            wire.close(self._zygote_conn)
        if self._listener is not None:
            self._listener.close()
        if self._logs is not None:
            self._logs.close()
        shutil.rmtree(self._tmp, ignore_errors=True)  # its sockets: nothing else lives there
        self.user_metrics.close()  # its recorder writes what it holds last
        atexit.unregister(self.shutdown)

    # -- Runtime -----------------------------------------------------------
    def resources(self) -> dict[str, float]:
        return {**self.slots.total(), **node_resources()}  # no table counts node: ones (see on_this_node)

    def available(self) -> dict[str, float]:
        return {**self.slots.free(), **node_resources()}

    def ray_view(self, available: bool = False) -> dict[str, float]:
        if self._memory is None:  # sized once, as a Ray node sizes its own when it starts
            self._memory = node_memory()
        return {**(self.available() if available else self.resources()), **self._memory}

    def preload(self, modules: list[str]) -> None:
        wanted = settings.preload_modules(extra=modules)  # MUSTER_PRELOAD, when set, has the last word
        with self._zygote_lock:  # a running zygote imports them now, before the next fork asks
            new = [m for m in modules if m in wanted and m not in self._preload_extra]
            self._preload_extra += new
            if new and self._zygote_conn is not None:
                with contextlib.suppress(OSError):
                    wire.send(self._zygote_conn, ("preload", new))

    def create_actor(
        self,
        cls: type,
        args: tuple,
        kwargs: dict,
        resources: dict[str, float],
        label: str = "",
        on_event: EventHandler | None = None,
        fresh_process: bool = False,
        bundle: BundleRef | None = None,
        node: NodeRef | None = None,  # its one node (the tasks layer refused another)
    ) -> RuntimeActor:
        said = BusyWarning(label or f"actor {cls.__name__}", fix=reservations.BUNDLE_FIX if bundle else TASK_FIX)
        if bundle is not None:  # it waits for room in its bundle here: warned about once, as on the machine
            request = on_this_node(res.normalize(resources))
            on_wait = self.naming_holders(said, request, bundle)
            held = [self.reservations.take(request, bundle, actor=True, on_wait=on_wait)]
        else:
            held = None
        try:
            (actor,) = self._launch(
                1, cls, args, kwargs, resources, None, said, None, [label] if label else None, on_event,
                allocations=held, fresh_process=fresh_process,
            )
        except MusterError:
            if bundle is not None and not self.reservations.holds(bundle.group):  # removed as it started
                raise ActorPlacementGroupRemoved(str(removed_error(bundle.group))) from None
            raise
        return actor

    def reserve(self, group: str, bundles: list[dict[str, float]], strategy: str = "PACK", name: str = "",
                lifetime: str | None = None) -> Future:
        # one node meets every strategy it was checked for; a group left pending is warned about once
        said = BusyWarning(reservations.describe(group, name, bundles, strategy), "be placed", reservations.GROUP_FIX)
        on_wait = self.naming_holders(said, res.summed(bundles), ends="It is placed")
        return self.reservations.reserve(group, bundles, name, strategy, on_wait)

    def unreserve(self, group: str) -> None:
        with self._lock:
            reservation = self.reservations.remove(group)  # its bundles go back; waits for them fail
            if reservation is None:
                return
            self._task_pool.drop_group(group, reservation.error)  # its dispatchers fail what is queued, then end
            running = [a for a in self._actors.values() if a._holds_slots and reservation.owns(a.allocation)]
        for actor in running:  # Ray kills what still uses a removed group's resources
            actor.death_reason = f"its placement group {group} was removed (remove_placement_group)"
            self._terminate(actor, 0.0)

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
        # One machine: PACK, SPREAD and STRICT_PACK all place every member here.
        return list(self._launch(n, cls, (), {}, resources_per_member, env, on_wait, timeout_s, None, what=what))

    def naming_holders(self, on_wait: Callable[[str], None], request: dict[str, float], bundle: BundleRef | None = None,
                       ends: str = "It starts") -> Callable[[str], None]:
        """``on_wait`` for a wait for ``request`` (all of it: a gang's members together, a placement group's
        bundles) from the machine or from ``bundle`` of a group, its message naming what holds what is short --
        the workers that took it from there (less what one waiting in ``muster.get`` has lent out, and saying it
        waits), and the placement groups holding it out of the machine -- and saying the wait ends once they
        free it. (Called under the slot table's lock: it takes no engine lock.)"""

        def say(message: str) -> None:
            tables = [self.slots] if bundle is None else self.reservations.tables(bundle)
            frees = [t.free() for t in tables]
            short = [k for k, v in request.items() if v > 0 and all(f.get(k, 0.0) < v for f in frees)]
            try:
                live = tuple(self._actors.values())
            except RuntimeError:  # changed meanwhile: name none this time
                live = ()
            names = []
            for a in live:
                mine = {k: v for k in short if (v := a.allocation.resources.get(k, 0.0) - a.lent.get(k, 0.0)) > 0}
                if mine and a._holds_slots and any(a.allocation.table is t for t in tables):
                    waits = "; itself waiting in muster.get/wait" if a.waiting else ""
                    names.append(f"{a.label} (pid {a.pid}, {res.fmt(mine)}{waits})")
            for group in self.reservations.groups() if bundle is None else ():
                mine = {k: v for k, v in group.held().items() if k in short and v > 0}
                if mine:
                    names.append(f"{group.shown} ({res.fmt(mine)})")
            who = (f" Held by: {', '.join(names[:5])}{f' and {len(names) - 5} more' if len(names) > 5 else ''}."
                   if names else "")
            freed = f"{' and '.join(short)} {'is' if len(short) == 1 else 'are'}" if short else "they are"
            on_wait(f"{message}{who} {ends} once {freed} freed.")

        return say

    def _launch(
        self,
        n: int,
        cls: type | None,
        args: tuple,
        kwargs: dict,
        request: dict[str, float],
        env: dict[str, str] | None,
        on_wait: Callable[[str], None] | None,
        timeout_s: float | None,
        labels: list[str] | None,
        on_event: EventHandler | None = None,
        allocations: list[Allocation] | None = None,
        fresh_process: bool = False,
        what: str = "",
    ) -> list[LocalActor]:
        request = on_this_node(res.normalize(request, what="resources_per_worker"))
        self.slots.check_feasible(request, n, what)
        self.start()
        if allocations is None:
            said = None if on_wait is None else self.naming_holders(on_wait, {k: v * n for k, v in request.items()})
            allocations = self.slots.acquire(request, n, on_wait=said, timeout_s=timeout_s)
        actors = []
        try:
            for i, alloc in enumerate(allocations):
                wid = next(self._ids)
                actor = LocalActor(self, wid, labels[i] if labels else f"worker {wid}", alloc)
                actor._on_event = on_event
                with self._lock:
                    self._actors[wid] = actor
                    self._seen[wid] = actor
                actors.append(actor)
            self._wait_started()
            for actor in actors:
                (self._spawn if fresh_process else self._fork)(actor, env)
            deadline = time.monotonic() + _STARTUP_TIMEOUT_S
            for actor in actors:
                while not actor.connected.wait(min(0.05, max(0.0, deadline - time.monotonic()))):
                    if actor._expected_exit:  # stopped as it started (its placement group was removed)
                        raise MusterError(f"{actor.label} was stopped before it started: "
                                          f"{actor.death_reason or 'muster ended it'}.")
                    if time.monotonic() >= deadline:
                        raise MusterError(
                            f"{actor.label} (pid {actor.pid}) did not connect back within "
                            f"{_STARTUP_TIMEOUT_S:.0f} s; its output is above."
                        )
            if cls is not None:
                inits = [a.call("__init__", cls, *args, **kwargs) for a in actors]
                for fut in inits:
                    fut.result()
        except BaseException:
            for actor in actors:
                self._terminate(actor, 0.0)
                if actor._conn is None:  # killed before it connected: no link's end will report it
                    self._release(actor)
            raise
        return actors

    def _spec(self, actor: LocalActor, extra_env: dict[str, str] | None) -> dict:
        """What a new worker needs to become ``actor``: its environment, paths and the driver's addresses."""
        env = dict(os.environ)
        env.update(extra_env or {})
        if "GPU" in self.slots.total():
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self._gpu_names[g] for g in actor.allocation.gpu_ids)
        cpus = actor.allocation.resources.get("CPU", 1.0)
        env.setdefault("OMP_NUM_THREADS", str(max(1, int(cpus))))
        listener, logs = self._listener, self._logs
        assert listener is not None and logs is not None  # start() made both
        return {
            "worker_id": actor.worker_id,
            "label": actor.label,
            "node_id": self.node_id,
            "env": env,
            "cwd": os.getcwd(),
            "sys_path": list(sys.path),
            "address": listener.address,
            "authkey": self._authkey,
            "log_address": logs.address,
            "preload": _preload(self._preload_extra),  # the driver may have imported torch since the zygote started
        }

    def _fork(self, actor: LocalActor, extra_env: dict[str, str] | None) -> None:
        spec = self._spec(actor, extra_env)
        with self._zygote_lock:
            if self._zygote_conn is None:
                raise RuntimeNotStartedError("muster's worker launcher is not running; call muster.init() again.")
            try:
                wire.send(self._zygote_conn, ("fork", actor.worker_id, spec))
            except OSError as exc:  # the zygote died (killed, OOM): say so, not "Broken pipe"
                code = self._zygote.poll() if self._zygote is not None else None
                raise RuntimeNotStartedError(
                    f"muster's worker launcher (zygote) has exited ({describe_exit(code)}), so no new "
                    "workers can start. Call muster.shutdown() and then muster.init() to start a fresh engine."
                ) from exc

    def _spawn(self, actor: LocalActor, extra_env: dict[str, str] | None) -> None:
        """Start ``actor`` in a fresh interpreter of its own (not forked from the zygote), and reap it."""
        proc = zygote_process.spawn_worker(self._spec(actor, extra_env))
        actor.pid = proc.pid
        with self._lock:
            self._by_pid[proc.pid] = actor

        def reap() -> None:
            self._exited(proc.pid, proc.wait())

        threading.Thread(target=reap, name=f"muster-reaper-{actor.worker_id}", daemon=True).start()

    def show_stacks(self, handle: RuntimeActor) -> bool:
        pid = getattr(handle, "pid", None)
        if not isinstance(handle, LocalActor) or pid is None or not handle.is_alive():
            return False
        try:
            os.kill(pid, zygote.STACKS_SIGNAL)  # its faulthandler prints them into its log
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def kill(self, handle: RuntimeActor, grace_s: float = 0.0) -> None:
        assert isinstance(handle, LocalActor)
        self._terminate(handle, grace_s)

    def _terminate(self, actor: LocalActor, grace_s: float) -> None:
        actor._expected_exit = True
        if not actor.is_alive():
            return
        if grace_s > 0:
            try:
                actor._send(("exit",))
            except (OSError, EOFError):
                pass
            if actor.exited.wait(grace_s):
                return
        if actor.pid is not None:
            try:
                os.kill(actor.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        elif actor._conn is None:  # never started: nothing will report its death
            actor._alive = False
            self._release(actor)

    def exit_status(self, handle: RuntimeActor, timeout_s: float = 0.5) -> int | None:
        assert isinstance(handle, LocalActor)
        handle.exited.wait(timeout_s)
        return handle.exitcode

    def _release(self, actor: LocalActor) -> None:
        with self._lock:
            if self._actors.pop(actor.worker_id, None) is None:
                return
            self._task_pool.forget(actor)
            held, actor._holds_slots = actor._holds_slots, False
        if held:  # an idle pooled task worker already gave its slots back
            actor.allocation.give_back()

    def _label_for(self, worker_id: int) -> tuple[str, int | None]:
        actor = self._seen.get(worker_id)
        return (actor.label, actor.pid) if actor else (f"worker {worker_id}", None)

    @contextlib.contextmanager
    def blocked(self, handle: RuntimeActor) -> Iterator[None]:
        """While ``handle`` waits on other work, lend its CPUs out (nested tasks cannot deadlock): once while
        any of its threads waits (a threaded actor's calls may wait together); they come back after the last."""
        assert isinstance(handle, LocalActor)
        with handle.lending:
            handle.waiting += 1
            cpus = handle.allocation.resources.get("CPU") if handle.waiting == 1 else None
            if cpus:
                Allocation({"CPU": cpus}, table=handle.allocation.table).give_back()  # in a group: to its bundle
                handle.lent = {"CPU": cpus}
        try:
            yield
        finally:
            with handle.lending:  # a thread that starts waiting meanwhile lends them again once they are back
                handle.waiting -= 1
                if not handle.waiting and handle.lent:
                    back, handle.lent = Allocation(handle.lent), {}
                    (handle.allocation.table or self.slots).acquire_exact(back)

    # -- tasks (task_pool.py) ----------------------------------------------
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
        node: NodeRef | None = None,  # its one node (the tasks layer refused another)
    ) -> Future:
        """Run ``fn`` in a pooled worker of the same resource shape (reused across tasks); a worker
        counts ``max_calls`` for itself (it retires once the task says so). ``on_wait``: see
        :meth:`_launch` (in a placement group's bundle: told while it waits for room there); without one, a
        task that waits for resources other work holds gets one warning (``slots.BusyWarning``), and the
        tasks of its shape (and bundle) queued behind it none until that backlog has drained.

        Tasks of one shape (and bundle) start in submission order from one dispatcher thread,
        which alone waits for their resources (no thread per queued task).
        """
        return self._task_pool.submit(fn, args, kwargs, resources, on_event, label, bundle, on_wait)

    def retire_idle_workers(self) -> int:
        """End the warm task workers that are idle (they hold no resources); return how many."""
        return self._task_pool.retire_idle()


def _preload(extra: list[str]) -> list[str]:
    """The zygote preloads torch once the driver has imported torch, and what trainers asked for."""
    return settings.preload_modules(with_torch="torch" in sys.modules, extra=extra)


__all__ = ["LocalRuntime", "LocalActor", "TaskError"]
