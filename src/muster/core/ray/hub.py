"""The driver's mailbox on the Ray cluster: workers' events in, the driver's replies out.

One async Ray actor per driver, pinned to the driver's node.  A worker's
event is a call on it (``push``, or ``request`` when the worker wants a
reply); the driver takes events in batches with ``take`` (a long poll) and
answers with ``answer``.  Ray runs one caller's calls on an actor in the
order they were made, so one worker's events stay in order.

The hub also answers ``gone``: which of some Ray worker processes the cluster
reports dead (the driver asks it, not Ray's GCS itself, as a Ray Client driver
cannot read the GCS).
"""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

Event = tuple[str, int, bool, bytes]  # (sender key, event id, wants a reply, pickled payload)


class EventHub:
    """Body of the hub actor (the engine wraps it with ``ray.remote``)."""

    def __init__(self) -> None:
        self._events: list[Event] = []
        self._arrived = asyncio.Event()
        self._replies: dict[tuple[str, int], asyncio.Future] = {}
        self._arrivals = 0

    async def push(self, key: str, event_id: int, data: bytes) -> None:
        self._add((key, event_id, False, data))

    async def request(self, key: str, event_id: int, data: bytes) -> tuple[bool, bytes]:
        reply: asyncio.Future = asyncio.get_running_loop().create_future()
        self._replies[(key, event_id)] = reply
        self._add((key, event_id, True, data))
        try:
            return await reply
        finally:
            self._replies.pop((key, event_id), None)

    def _add(self, event: Event) -> None:
        self._events.append(event)
        self._arrivals += 1
        self._arrived.set()

    async def answer(self, key: str, event_id: int, ok: bool, data: bytes) -> None:
        reply = self._replies.get((key, event_id))
        if reply is not None and not reply.done():
            reply.set_result((ok, data))

    async def take(self, timeout_s: float) -> list[Event]:
        """Every event not yet taken, waiting up to ``timeout_s`` for the first."""
        if not self._events and timeout_s > 0:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), timeout_s)
            except asyncio.TimeoutError:
                pass
        out, self._events = self._events, []
        return out

    async def forget(self, key: str) -> None:
        """A sender died: its requests will never be read; drop them."""
        for (k, event_id), reply in list(self._replies.items()):
            if k == key and not reply.done():
                reply.cancel()

    async def count(self) -> int:
        """How many events have arrived so far (taken or not)."""
        return self._arrivals

    async def gone(self, worker_ids: list[str]) -> list[str]:
        """The ones of ``worker_ids`` (Ray worker ids, hex) whose process Ray's GCS reports dead."""
        return await asyncio.get_running_loop().run_in_executor(None, _dead_workers, worker_ids)


def _dead_workers(worker_ids: list[str]) -> list[str]:
    import ray
    from ray._private.state import state  # an internal API (muster's capacity() reads it too): GCS's worker table

    gcs_pb2: Any = importlib.import_module("ray.core.generated.gcs_pb2")  # generated: no types
    accessor: Any = state._connect_and_get_accessor()
    dead = []
    for worker_id in worker_ids:
        raw = accessor.get_worker_info(ray.WorkerID.from_hex(worker_id))
        if raw is not None and not gcs_pb2.WorkerTableData.FromString(raw).is_alive:  # None: not known (yet)
            dead.append(worker_id)
    return dead
