"""The controller's side of gang scheduling (:mod:`muster.serve.gang`): start a gang whole, stop it whole,
and restart it whole when a member fails.

A gang is one placement group on the runtime, a bundle per member, placed with the gang's strategy; its
members are replicas started into their bundles, each told its :class:`GangContext`. A gang that cannot start
every member stops the ones it started and gives its group back, so a deployment never runs part of one.
"""

from __future__ import annotations

import concurrent.futures
import os
import time
from typing import TYPE_CHECKING, Any

from muster.core import resources as res
from muster.serve._internal.state import WAITING
from muster.serve.exceptions import DeployFailedError, RayServeException
from muster.serve.gang import Gang

if TYPE_CHECKING:
    from muster.serve._internal.controller import ServeController
    from muster.serve._internal.state import DeploymentState

_PLACE_WAIT_S = 120.0  # how long a gang waits to be placed while other work holds the room (as a replica does)


def size(d: DeploymentState) -> int:
    """The deployment's gang size; 0 when it is not gang scheduled."""
    config = d.plan.config.gang_scheduling_config
    return 0 if config is None else config.gang_size


def start(ctl: ServeController, d: DeploymentState, pending: bool = False) -> Gang:
    """Place a new gang of ``d`` and start its members (``pending``: they were counted as on their way);
    return once all run.

    Raises:
        RayServeException: the gang was not placed within ``_PLACE_WAIT_S`` (other work holds the room).
        DeployFailedError: a member failed to start; the others were stopped and the group given back.
    """
    config = d.plan.config.gang_scheduling_config
    assert config is not None
    n = config.gang_size
    key = os.urandom(4).hex()
    gang = Gang(id=f"{d.app}#{d.plan.name}#gang-{key}", group=f"serve-gang-{key}",
                members=[f"{d.app}#{d.plan.name}#{os.urandom(4).hex()}" for _ in range(n)])
    bundle = d.plan.config.resources() or {"CPU": 0.001}  # a placement group's bundle is never empty
    strategy = config.gang_placement_strategy.value
    with ctl.lock:
        d.gangs[gang.id] = gang
    try:
        placed = ctl.runtime.reserve(gang.group, [dict(bundle) for _ in range(n)], strategy, name=gang.group)
        wait_placed(ctl, d, placed, f"a gang of {n} x {{{res.fmt(bundle)}}} ({strategy})")
    except BaseException:
        ctl.runtime.unreserve(gang.group)
        with ctl.lock:
            d.gangs.pop(gang.id, None)
            if pending:
                d.pending -= n
        raise
    with concurrent.futures.ThreadPoolExecutor(n, thread_name_prefix="muster-serve-gang") as members:
        futs = [members.submit(ctl._start_replica, d, pending, gang, rank) for rank in range(n)]
    failed = [e for e in (f.exception() for f in futs) if e is not None]
    with ctl.lock:
        lost = [m for m in gang.members if m not in d.replicas or d.replicas[m].state != "RUNNING"]
    if failed or lost:  # a member that started, then died while its peers started, leaves the gang part-run
        stop(ctl, d, gang)
        raise failed[0] if failed else DeployFailedError(
            f"deployment {d.plan.name!r} of app {d.app!r}: gang {gang.id} lost member {lost[0]} while it started "
            "(see its output above); its other members were stopped and its placement group given back.")
    ctl.record.event(d.app, d.plan.name, None, "gang", f"gang {gang.id} started ({n} replicas, {strategy})")
    return gang


def wait_placed(ctl: ServeController, d: DeploymentState, placed: Any, what: str) -> None:
    """Wait for ``placed`` (a placement group's future), saying in ``d``'s status what it waits for.

    Raises:
        RayServeException: not placed within ``_PLACE_WAIT_S``, or the controller stops.
    """
    deadline = time.monotonic() + _PLACE_WAIT_S
    while True:
        try:
            placed.result(timeout=0.2)
        except concurrent.futures.TimeoutError:
            pass
        else:
            with ctl.lock:
                if d.message.startswith(WAITING):  # what it waited for is held now
                    d.message = ""
            return
        with ctl.lock:
            d.message = (f"{WAITING}: {what}, free now: {res.fmt(res.machine(ctl.runtime.available()))} (other work "
                         "holds the rest)")
        if time.monotonic() > deadline or ctl._stop.is_set():
            raise RayServeException(f"deployment {d.plan.name!r} of app {d.app!r}: {d.message}; gave up after "
                                    f"{_PLACE_WAIT_S:.0f} s.")


def stop(ctl: ServeController, d: DeploymentState, gang: Gang, drain: bool = False) -> None:
    """Stop ``gang``'s members still here (at once, unless ``drain``: its peers cannot go on without the
    member that failed), then give its placement group back."""
    gang.stopping = True
    with ctl.lock:
        members = [d.replicas[m] for m in gang.members if m in d.replicas]
    ctl._stop_replicas(d, members, drain=drain)  # it gives the group back once no member is left


def release(ctl: ServeController, d: DeploymentState) -> None:
    """Give back the placement groups of ``d``'s stopping gangs that no member holds any more."""
    with ctl.lock:
        done = [g for g in d.gangs.values() if g.stopping and not any(m in d.replicas for m in g.members)]
        for g in done:
            d.gangs.pop(g.id, None)
    for g in done:
        ctl.runtime.unreserve(g.group)


def claim_restart(d: DeploymentState, gang_id: str) -> Gang | None:
    """A member of gang ``gang_id`` died or failed its health check: under ``RESTART_GANG`` (Ray's only
    policy) the gang stops and a new one replaces it. Marks the gang stopping and counts its replacement as on
    its way, so the supervisor starts no gang of its own; returns the gang to :func:`restart`, or None if it is
    already going down. The caller holds ``ctl.lock``, in the same hold that took the member out (a tick
    between the two saw a replica missing and started a second gang)."""
    gang = d.gangs.get(gang_id)
    if gang is None or gang.stopping:
        return None
    gang.stopping = True
    d.pending += len(gang.members)
    return gang


def restart(ctl: ServeController, d: DeploymentState, gang: Gang, why: str) -> None:
    """Stop ``gang`` (claimed by :func:`claim_restart`) and start its replacement, in the controller's pool."""
    ctl.record.event(d.app, d.plan.name, None, "restart", f"restarting gang {gang.id}: a member {why}")

    def again() -> None:
        stop(ctl, d, gang)
        try:
            start(ctl, d, pending=True)
            d.message = ""
            ctl._push()
        except BaseException as exc:  # noqa: BLE001 - shown in status; the supervisor retries
            d.message = f"could not restart gang {gang.id}: {exc}"
            d.retry_at = time.monotonic() + 2.0

    ctl.pool.submit(again)


def shrink(ctl: ServeController, d: DeploymentState, extra: int) -> None:
    """Stop whole gangs, newest first, covering ``extra`` replicas (the routes drop them first)."""
    n = size(d)
    with ctl.lock:
        whole = [g for g in d.gangs.values() if not g.stopping
                 and all(m in d.replicas and d.replicas[m].state == "RUNNING" for m in g.members)]
        victims = whole[::-1][: extra // n]
        for g in victims:
            g.stopping = True
            for m in g.members:
                d.replicas[m].state = "STOPPING"
    ctl.pool.submit(ctl._push)
    for g in victims:
        ctl.pool.submit(stop, ctl, d, g, True)
