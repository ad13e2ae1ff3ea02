"""Routing a request that names a multiplexed model to a replica that holds it, as Ray Serve does.

Each replica tells its callers which models it holds or is loading (a ``MODELS``
frame on its connection, after each change; see ``multiplex.py`` and ``replica.py``),
and answers the question when a caller first routes by model. A request for model
``m``, in the caller's process:

1. goes to a replica that holds ``m`` and has room (the less busy of two, as for
   any request);
2. when every holder is at ``max_ongoing_requests``, waits for one to have room,
   but for at most a time drawn between ``T`` and ``2 T``, ``T`` being Ray's
   ``RAY_SERVE_MULTIPLEXED_MODEL_ID_MATCHING_TIMEOUT_S`` (default 1 s;
   ``settings.serve_model_matching_timeout_s``), then falls back, as Ray does;
3. with no holder (a new model), or after that wait, goes to a replica with room
   among those holding the fewest models (then the less busy of two), which this
   caller notes at once as holding ``m``: requests for a new model arriving
   together follow the first one to the one replica rather than each loading it
   elsewhere (Ray reaches the same end by reporting a model while it loads);
4. when no replica has room at all, waits in the router's queue like any request
   (``max_queued_requests``, the caller's timeout).

Requests that name no model (and deployments with no ``@serve.multiplexed``
loader) never come here.
"""

from __future__ import annotations

import asyncio
import pickle

from muster.core import settings
from muster.serve._internal import wire
from muster.serve._internal.router import Router, Stream, _RoutedReplica, _random, choose
from muster.serve.exceptions import DeploymentUnavailableError

ASK_TIMEOUT_S = 2.0  # how long a caller waits for replicas to say which models they hold (once per replica)


def _count(r: _RoutedReplica) -> int:
    return len(r.models or ())


def pick(router: Router, model_id: str, holders_only: bool) -> _RoutedReplica | None:
    """A replica with room for a request for ``model_id`` (``None``: none, or only non-holders while
    ``holders_only`` and some replica holds it)."""
    live = [r for r in router._list if not r.dead]
    holders = [r for r in live if r.models and model_id in r.models]
    if holders:
        got = choose(holders, router.max_ongoing)
        if got is not None or holders_only:
            return got
    room = [r for r in live if r.ongoing < router.max_ongoing]
    if not room:
        return None
    fewest = min(_count(r) for r in room)
    return choose([r for r in room if _count(r) == fewest], router.max_ongoing)


def _take(r: _RoutedReplica, model_id: str) -> _RoutedReplica:
    r.ongoing += 1
    models = r.models or frozenset()
    if model_id not in models:
        r.models = models | {model_id}  # it loads it now; its own report follows
    return r


def _unknown(router: Router) -> list[_RoutedReplica]:
    return [r for r in router._list if r.models is None and not r.dead]


def open_now(router: Router, kind: int, payload: bytes, model_id: str) -> tuple[_RoutedReplica, Stream] | None:
    """``Router.open_now`` for a request naming a model: ``None`` when it would wait (replicas not asked yet,
    no holder with room, not connected)."""
    if _unknown(router):
        return None
    r = pick(router, model_id, True)
    if r is None:
        return None
    conn = r.conn
    if conn is None or conn.closed:
        return None
    return _take(r, model_id), conn.open(kind, payload)


async def _ask(router: Router, r: _RoutedReplica) -> None:
    """Ask ``r`` which models it holds (it answers with what it holds then; later changes come as pushes)."""
    try:
        conn = await router.connect(r)
    except DeploymentUnavailableError:
        return  # marked dead
    loop = asyncio.get_running_loop()
    answered = loop.create_future()

    def on_answer(kind: int, data: bytes) -> None:  # applied as the frame arrives: in order with the pushes
        if kind == wire.RESP_VALUE:
            r.models = frozenset(pickle.loads(data))
        if not answered.done():
            answered.set_result(None)

    stream = conn.open(wire.MODELS, b"")
    stream.on_end = on_answer
    try:
        await answered
    finally:
        stream.cancel()  # a no-op once answered


async def learn(router: Router) -> None:
    """Make sure every live replica has said which models it holds (bounded: one that does not answer in
    ``ASK_TIMEOUT_S`` counts as holding none until it reports)."""
    unknown = _unknown(router)
    if not unknown:
        return
    for r in unknown:
        if r.asking is None:
            r.asking = asyncio.ensure_future(_ask(router, r))
    await asyncio.wait([r.asking for r in unknown if r.asking is not None], timeout=ASK_TIMEOUT_S)
    for r in unknown:
        if r.models is None:
            r.models = frozenset()


async def acquire(router: Router, model_id: str, timeout_s: float | None) -> _RoutedReplica:
    """A replica for a request for ``model_id`` (its ongoing count taken), by the order in the module's doc."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    await learn(router)
    match_s = settings.serve_model_matching_timeout_s()  # per request, so a change applies to what follows
    match_until = start + match_s * (1.0 + _random())  # spread, so busy holders' callers do not all give up at once
    while True:
        holders_only = loop.time() < match_until
        r = pick(router, model_id, holders_only)
        if r is not None:
            return _take(r, model_id)
        if not any(x.ongoing < router.max_ongoing for x in router._list if not x.dead):
            left = None if timeout_s is None else max(0.001, timeout_s - (loop.time() - start))
            await router._wait_for_room(left)  # in the queue, as any request; then choose again
            if pick(router, model_id, loop.time() < match_until) is None:
                router._wake()  # the room is not for this request (only holders will do yet): pass the turn on
            else:
                continue
        # holders exist, all busy, while other replicas have room: wait for a holder (bounded)
        if router.room is None:
            router.room = loop.create_future()
        await asyncio.wait([router.room], timeout=max(0.0, match_until - loop.time()))
