"""Caller side of the replica hop: the route table, one router per deployment.

A :class:`Router` keeps a persistent connection per replica (:mod:`streams`) and picks one
per request by the power of two choices on this process's ongoing requests.
A replica at ``max_ongoing_requests`` takes no more from this caller; the
request then waits in a bounded queue (``max_queued_requests``), and past it
fails at once with :class:`BackPressureError` (the ingress answers 503).
Everything here runs on the Serve loop (:mod:`eventloop`).
"""

from __future__ import annotations

import asyncio
import collections
import math
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from muster.serve._internal import wire
from muster.serve._internal.streams import ReplicaConnection, Stream
from muster.tasks import owner
from muster.serve.config import DEFAULT_REJECTION
from muster.serve.exceptions import BackPressureError, DeploymentUnavailableError


@dataclass(frozen=True)
class ReplicaRoute:
    replica_id: str
    path: str  # a unix socket, or "tcp:host:port" (replicas on a Ray cluster)


@dataclass(frozen=True)
class DeploymentRoute:
    replicas: tuple[ReplicaRoute, ...]
    max_ongoing_requests: int
    max_queued_requests: int
    rejection: tuple[int, float | None] = DEFAULT_REJECTION  # HTTP status and retry_after_s when the queue is full
    multiplexed: bool = False  # has a @serve.multiplexed loader: requests naming a model are routed by it


@dataclass(frozen=True)
class AppRoute:
    name: str
    route_prefix: str | None
    ingress: str  # the deployment HTTP requests go to
    failed: str = ""  # why its deploy failed, while it has no running version (Ray's DEPLOY_FAILED): requests fail


@dataclass(frozen=True)
class RouteTable:
    """Every app and the live replicas of each deployment; the controller pushes a new one on each change."""

    version: int = 0
    apps: dict[str, AppRoute] = field(default_factory=dict)
    deployments: dict[tuple[str, str], DeploymentRoute] = field(default_factory=dict)


_EXPIRED = object()
# The router's own random stream: drawing from the global one would shift a user's seeded `random`
# sequence with every request routed. Reseeded in a forked child, so replicas do not all route alike.
_rng = random.Random()
_random = _rng.random
os.register_at_fork(after_in_child=_rng.seed)


def _ongoing(r: "_RoutedReplica") -> int:
    return r.ongoing


def choose(reps: "list[_RoutedReplica]", max_ongoing: int) -> "_RoutedReplica | None":
    """Power of two choices: the less busy of two random replicas with room (a full scan when both are full)."""
    n = len(reps)
    if n:
        if n == 2:
            a, b = reps if _random() < 0.5 else (reps[1], reps[0])  # ties go either way
        elif n > 2:
            i = int(_random() * n)
            j = int(_random() * (n - 1))
            a, b = reps[i], reps[j + 1 if j >= i else j]
        else:
            a = b = reps[0]
        best = a if a.ongoing <= b.ongoing else b
        if not best.dead and best.ongoing < max_ongoing:
            return best
    ok = [r for r in reps if not r.dead and r.ongoing < max_ongoing]
    if not ok:
        return None
    return min(ok, key=_ongoing)


def _expire(w: asyncio.Future) -> None:
    if not w.done():
        w.set_result(_EXPIRED)


class _RoutedReplica:
    __slots__ = ("route", "ongoing", "conn", "connecting", "dead", "models", "asking")

    def __init__(self, route: ReplicaRoute):
        self.route = route
        self.ongoing = 0
        self.conn: ReplicaConnection | None = None
        self.connecting: asyncio.Future | None = None
        self.dead = False
        self.models: frozenset[str] | None = None  # the multiplexed models it holds (None: not asked yet)
        self.asking: asyncio.Future | None = None  # the question of its models, while unanswered


class Router:
    """Picks a replica of one deployment for each request from this process."""

    def __init__(self, app: str, deployment: str, refresh: "Callable[[], bool] | None" = None):
        self.app, self.deployment = app, deployment
        self._refresh = refresh  # asks the driver for a newer table (a process Serve pushes none to)
        self.replicas: dict[str, _RoutedReplica] = {}
        self._list: list[_RoutedReplica] = []
        self.max_ongoing, self.max_queued = 5, -1
        self.rejection: tuple[int, float | None] = DEFAULT_REJECTION
        self._waiters: collections.deque[asyncio.Future] = collections.deque()
        self._chosen: _RoutedReplica | None = None  # picked by open_now but not connected yet
        self.known = False  # is the deployment in this process's route table
        self.multiplexed = False  # requests naming a model are routed by it (model_routing.py)
        self.room: asyncio.Future | None = None  # set when a request ends: model requests waiting for a holder
        self.holding = 0  # requests waiting here for a replica with room (read from any thread)
        self.populated = False  # has it known a running replica (Ray's running_replicas_populated; read anywhere)

    def update(self, route: DeploymentRoute | None) -> None:
        wanted = {r.replica_id: r for r in (route.replicas if route else ())}
        for rid in list(self.replicas):
            if wanted.get(rid) != self.replicas[rid].route:
                del self.replicas[rid]  # in-flight streams finish on their own connection
        for rid, r in wanted.items():
            if rid not in self.replicas:
                self.replicas[rid] = _RoutedReplica(r)
        self._list = list(self.replicas.values())
        self.populated = self.populated or bool(self._list)
        self.known = route is not None
        if route is not None:
            self.max_ongoing, self.max_queued = route.max_ongoing_requests, route.max_queued_requests
            self.rejection = route.rejection
            self.multiplexed = route.multiplexed
        self._wake(len(self._waiters))
        self._room_freed()

    def _room_freed(self) -> None:
        room, self.room = self.room, None
        if room is not None and not room.done():
            room.set_result(None)

    def _pick(self) -> _RoutedReplica | None:
        return choose(self._list, self.max_ongoing)

    def _wake(self, n: int = 1) -> None:
        while n > 0 and self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(None)
                n -= 1

    async def acquire(self, timeout_s: float | None) -> _RoutedReplica:
        """A replica with room for one more request (its ongoing count taken)."""
        r = self._pick()
        if r is None:
            r = await self._wait_for_room(timeout_s)
        r.ongoing += 1
        return r

    async def _wait_for_room(self, timeout_s: float | None) -> _RoutedReplica:
        self.holding += 1
        try:
            return await self._wait_in_queue(timeout_s)
        finally:
            self.holding -= 1

    async def _wait_in_queue(self, timeout_s: float | None) -> _RoutedReplica:
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while True:
            self._check_deployed()
            if self._refresh is None and not self.known:  # Serve pushes this process its table: it is gone
                raise DeploymentUnavailableError(
                    f"deployment {self.deployment!r} of app {self.app!r} is not running (deleted, Serve shut down, "
                    f"or never deployed); running apps: {sorted(registry.table.apps) or 'none'}."
                )
            stale = self._refresh is not None and not any(not r.dead for r in self._list)
            if stale:
                # No live replica known here: a pulled table may be stale (replicas replaced since),
                # or say that the deployment is gone, which no wait would change.
                if self._refresh() and (r := self._pick()) is not None:
                    return r
                self._check_deployed()
                if not self.known:  # known with no replica: scaled to zero, the controller starts one
                    raise DeploymentUnavailableError(
                        f"deployment {self.deployment!r} of app {self.app!r} is not running; running apps: "
                        f"{sorted(registry.table.apps) or 'none'} (serve.run it in the driver first)."
                    )
            if self.max_queued != -1 and self._queued() >= self.max_queued:
                raise BackPressureError(
                    f"deployment {self.deployment!r} of app {self.app!r}: every replica is at max_ongoing_requests="
                    f"{self.max_ongoing} and {self._queued()} requests already wait (max_queued_requests="
                    f"{self.max_queued}); retry later, or raise num_replicas / max_queued_requests.",
                    *self.rejection,
                )
            w = loop.create_future()
            self._waiters.append(w)
            wake_at = deadline
            if stale:  # ask the driver again soon: nothing else will tell this process of a replacement
                wake_at = min(deadline if deadline is not None else math.inf, loop.time() + _PULL_EVERY_S)
            timer = None if wake_at is None else loop.call_later(max(0.0, wake_at - loop.time()), _expire, w)
            try:
                woken = await w
            except asyncio.CancelledError:
                if w.done() and not w.cancelled() and w.result() is None:
                    self._wake()  # pass on the turn this waiter was given
                raise
            finally:
                if timer is not None:
                    timer.cancel()
            if woken is _EXPIRED and (deadline is None or loop.time() < deadline):
                continue  # the turn to pull again, not the deadline
            if woken is _EXPIRED:
                live = sum(1 for r in self.replicas.values() if not r.dead)
                raise DeploymentUnavailableError(
                    f"deployment {self.deployment!r} of app {self.app!r}: no replica had room within {timeout_s} s "
                    f"({live} live replica(s), max_ongoing_requests={self.max_ongoing})."
                )
            r = self._pick()
            if r is not None:
                return r

    def _check_deployed(self) -> None:
        """Fail at once, as Ray's router does, when the app's deploy failed and no version of it runs."""
        app = registry.table.apps.get(self.app)
        if app is not None and app.failed and self._refresh is not None and self._refresh():
            app = registry.table.apps.get(self.app)  # a pulled table may be stale: deleted or deployed again since
        if app is not None and app.failed:
            raise DeploymentUnavailableError(
                f"Deployment(name={self.deployment!r}, app={self.app!r}) is unavailable because it failed to deploy: "
                f"{app.failed}. Deploy app {self.app!r} again with a working constructor (serve.run), or remove it "
                f"with serve.delete({self.app!r}); serve.status() shows its full error."
            )

    async def open_on(self, r: _RoutedReplica, kind: int, payload: bytes) -> Stream:
        """Send one request to ``r`` itself, counted in its ongoing requests but past its ``max_ongoing_requests``
        (``handle.broadcast``, as in Ray); the caller must :meth:`release` it."""
        r.ongoing += 1
        try:
            return (await self.connect(r)).open(kind, payload)
        except BaseException:
            self.release(r)
            raise

    def replicas_now(self) -> list[_RoutedReplica]:
        """Every replica this process routes to now (a worker Serve pushes no table to asks the driver first
        when it knows none), for a call to each of them (``handle.broadcast``)."""
        if not self._list and self._refresh is not None:
            self._refresh()
        return [r for r in self._list if not r.dead]

    def _queued(self) -> int:
        while self._waiters and self._waiters[0].done():
            self._waiters.popleft()
        return sum(1 for w in self._waiters if not w.done())

    def release(self, r: _RoutedReplica) -> None:
        r.ongoing -= 1
        if self._waiters:
            self._wake()
        if self.room is not None:
            self._room_freed()

    async def connect(self, r: _RoutedReplica) -> ReplicaConnection:
        conn = r.conn
        if conn is not None and not conn.closed:
            return conn
        if r.connecting is None:
            r.connecting = asyncio.ensure_future(self._open(r))
        try:
            return await asyncio.shield(r.connecting)
        finally:
            if r.connecting is not None and r.connecting.done():
                r.connecting = None

    async def _open(self, r: _RoutedReplica) -> ReplicaConnection:
        loop = asyncio.get_running_loop()
        try:
            path = r.route.path
            if path.startswith("tcp:"):
                host, port = path[4:].rsplit(":", 1)
                _, proto = await loop.create_connection(lambda: ReplicaConnection(r), host, int(port))
            else:
                _, proto = await loop.create_unix_connection(lambda: ReplicaConnection(r), path)
        except OSError as exc:
            r.dead = True
            raise DeploymentUnavailableError(
                f"replica {r.route.replica_id} of deployment {self.deployment!r} is not reachable at "
                f"{r.route.path} ({exc}); it is being replaced."
            ) from exc
        r.conn = proto
        return proto

    def open_now(self, kind: int, payload: bytes, model_id: str = "") -> tuple[_RoutedReplica, Stream] | None:
        """:meth:`open_stream` without waiting: ``None`` when that would wait (no room, nobody connected, a queue)."""
        if self._waiters:
            return None  # others wait for room: keep their turn
        if model_id and self.multiplexed:
            from muster.serve._internal import model_routing

            return model_routing.open_now(self, kind, payload, model_id)
        r = self._pick()
        if r is None:
            return None
        conn = r.conn
        if conn is None or conn.closed:
            self._chosen = r  # the choice stands: open_stream connects it (another draw would favour connected ones)
            return None
        r.ongoing += 1
        return r, conn.open(kind, payload)

    def _take_chosen(self) -> _RoutedReplica | None:
        """The replica open_now chose but could not send to yet, if it still has room (its ongoing count taken)."""
        r, self._chosen = self._chosen, None
        if r is None or r.dead or r.ongoing >= self.max_ongoing or r not in self._list or self._waiters:
            return None
        r.ongoing += 1
        return r

    async def open_stream(self, kind: int, payload: bytes, timeout_s: float | None,
                          model_id: str = "") -> tuple[_RoutedReplica, Stream]:
        """Send one request to a chosen replica (one holding ``model_id``, if any does: see
        ``model_routing.py``); the caller must :meth:`release` the replica."""
        r: _RoutedReplica | None
        if model_id and self.multiplexed:
            from muster.serve._internal import model_routing

            r = await model_routing.acquire(self, model_id, timeout_s)
        else:
            r = self._take_chosen()
            if r is None:
                got = self.open_now(kind, payload)
                if got is not None:
                    return got
                r = self._take_chosen() or await self.acquire(timeout_s)
        try:
            conn = await self.connect(r)
            return r, conn.open(kind, payload)
        except DeploymentUnavailableError:
            self.release(r)
            if self._refresh is None or not self._refresh():  # a pulled table: the replica may be replaced
                raise
        except BaseException:
            self.release(r)
            raise
        return await self.open_stream(kind, payload, timeout_s, model_id)  # once more, on the fresh table


@dataclass(frozen=True)
class TableRequest:
    """A worker Serve pushes no table to (a task, an actor, a training worker) asks the driver for its, saying
    how many of its requests wait for a replica (the demand that starts a deployment scaled to zero)."""

    waiting: dict[tuple[str, str], int] = field(default_factory=dict)


class _Registry:
    """This process's route table and routers (touched only on the Serve loop).

    The controller pushes each new table to the ingress and the replicas. Any other muster
    worker that uses a handle (a task, an actor, a training loop) pulls the driver's table when
    it first routes to a deployment, and again when it knows no live replica of one.
    """

    def __init__(self) -> None:
        self.table = RouteTable()
        self.routers: dict[tuple[str, str], Router] = {}
        self.pushed = False
        self._pulled_at = -_PULL_EVERY_S

    def apply(self, table: RouteTable, pushed: bool = True) -> None:
        self.pushed = self.pushed or pushed
        if table.version < self.table.version:
            return
        self.table = table
        for key, router in self.routers.items():
            router.update(table.deployments.get(key))

    def pull(self) -> bool:
        """Fetch the driver's table, in a worker that gets no pushes; whether one came."""
        from muster.core import context

        now = time.monotonic()
        if self.pushed or not context.in_worker() or now - self._pulled_at < _PULL_EVERY_S:
            return False
        self._pulled_at = now
        try:
            table = context.send_event(TableRequest(queued_counts()), timeout=_PULL_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - a child forked by user code, or a driver without Serve
            return False
        if not isinstance(table, RouteTable):
            return False
        self.apply(table, pushed=False)
        return True

    def _pulls(self) -> bool:
        from muster.core import context

        return not self.pushed and context.in_worker()

    def router(self, app: str, deployment: str) -> Router:
        key = (app, deployment)
        r = self.routers.get(key)
        if r is None:
            pulls = self._pulls()
            if pulls and key not in self.table.deployments:
                self.pull()
            r = self.routers[key] = Router(app, deployment, self.pull if pulls else None)
            r.update(self.table.deployments.get(key))
        return r


_PULL_EVERY_S = 0.2  # at most this often per process
_PULL_TIMEOUT_S = 30.0
_HELD_FOR_S = 1.0  # a worker's count of waiting requests stands this long (it pulls every _PULL_EVERY_S meanwhile)
_held: dict[int, tuple[float, dict[tuple[str, str], int]]] = {}  # in the driver: by worker, its last count
registry = _Registry()
_inherited: list[_Registry] = []  # a forked child's copies of its parent's routers, never touched again


def _routers_of_its_own_in_child() -> None:
    """A forked child (a DataLoader worker, a pool process) inherits the parent's routers, whose
    connections belong to the parent's loop (not running here) over sockets the parent still
    reads. The child keeps the route table and opens connections of its own. The inherited
    routers are kept, not collected, so that nothing closes or unregisters what they hold on
    the parent's behalf."""
    global registry
    _inherited.append(registry)
    registry = _Registry()
    registry.table = _inherited[-1].table  # a muster worker pulls fresh ones; a user's child cannot


os.register_at_fork(after_in_child=_routers_of_its_own_in_child)


def _answer_table_request(handle: Any, request: TableRequest) -> RouteTable:
    """In the driver: a worker's :class:`TableRequest` gets the table the controller last set."""
    if request.waiting or id(handle) in _held:
        _held[id(handle)] = (time.monotonic(), dict(request.waiting))
    return registry.table


owner.register(TableRequest, _answer_table_request)


def queued_counts() -> dict[tuple[str, str], int]:
    """The requests this process's routers hold for want of a replica, by ``(app, deployment)`` (the controller's
    cold-start signal: a deployment scaled to zero starts a replica once one waits)."""
    counts = {key: r.holding for key, r in list(registry.routers.items())}
    return {key: n for key, n in counts.items() if n}


def pulled_counts() -> dict[tuple[str, str], int]:
    """In the driver: the requests the workers that pull the route table held at their last pull (of the last
    :data:`_HELD_FOR_S`)."""
    now, counts = time.monotonic(), dict[tuple[str, str], int]()
    for at, held in list(_held.values()):
        if now - at < _HELD_FOR_S:
            for key, n in held.items():
                counts[key] = counts.get(key, 0) + n
    return counts


def set_table(table: RouteTable) -> None:
    """Install a new route table in this process (from any thread)."""
    from muster.serve._internal import eventloop

    eventloop.get_loop().call_soon_threadsafe(registry.apply, table)


def raise_remote(err: wire.RemoteError) -> Any:
    """Re-raise a replica's failure in the caller: what user code raised as Ray's ``RayTaskError`` of it
    (``except ValueError`` and ``except RayTaskError`` both catch it; its message carries the replica's
    traceback)."""
    from muster.exceptions import TaskError
    from muster.serve.exceptions import RayServeException, ReplicaDiedError
    from muster.tasks.objects import as_instance_of_cause

    if isinstance(err.exc, TaskError):
        raise as_instance_of_cause(err.exc) from None
    if err.exc is not None:
        raise err.exc
    if err.status == 502:
        raise ReplicaDiedError(err.message)
    raise RayServeException(err.message)
