"""The caller's end of the replica hop: one persistent connection per replica, carrying many
:class:`Stream` s (one per request, its answers in order, with wire's flow control). The
:mod:`router` picks the replica; everything here runs on the Serve loop (:mod:`eventloop`)."""

from __future__ import annotations

import asyncio
import collections
import itertools
from typing import TYPE_CHECKING, Any, Callable

from muster.serve._internal import wire

if TYPE_CHECKING:
    from muster.serve._internal.router import _RoutedReplica

_TERMINAL = frozenset((wire.RESP_FULL, wire.RESP_END, wire.RESP_VALUE, wire.RESP_ERROR, wire.WS_CLOSE))
_CHUNKS = frozenset((wire.RESP_BODY, wire.RESP_ITEM, wire.WS_TEXT, wire.WS_BYTES))  # flow-controlled (see wire)


class Stream:
    """One request's answers, in order."""

    __slots__ = ("conn", "id", "_frames", "_waiter", "done", "on_end", "_taken")

    def __init__(self, conn: "ReplicaConnection", stream_id: int):
        self.conn, self.id = conn, stream_id
        self._frames: collections.deque[tuple[int, bytes]] = collections.deque()
        self._waiter: asyncio.Future | None = None
        self.done = False
        #: for a one-answer call: called with the answer instead of queueing it (no one awaits :meth:`next`)
        self.on_end: Callable[[int, bytes], None] | None = None
        self._taken = 0  # chunks taken since the last CREDIT (see wire's flow control)

    def feed(self, kind: int, payload: bytes) -> None:
        on_end = self.on_end
        if on_end is not None:
            self.on_end = None
            self.done = True
            on_end(kind, payload)
            return
        self._frames.append((kind, payload))
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _pop(self) -> tuple[int, bytes]:
        kind, payload = self._frames.popleft()
        if kind in _TERMINAL:
            self.done = True
        elif kind in _CHUNKS:
            self._taken += 1
            if self._taken == wire.CREDIT_EVERY:
                self._taken = 0
                self.conn.send(self.id, wire.CREDIT)
        return kind, payload

    async def next(self, timeout: float | None = None) -> tuple[int, bytes]:
        """The next frame; ``TIMED_OUT`` after ``timeout`` seconds without one (then the replica is told to stop)."""
        if not self._frames:
            loop = asyncio.get_running_loop()
            expired: list[bool] = []
            timer = loop.call_later(timeout, self._expire, expired) if timeout else None
            try:
                while not self._frames:
                    if expired:
                        self.cancel()
                        return TIMED_OUT
                    self._waiter = loop.create_future()
                    await self._waiter
            except asyncio.CancelledError:
                self.cancel()
                raise
            finally:
                self._waiter = None
                if timer is not None:
                    timer.cancel()
        return self._pop()

    async def next_before(self, deadline: float | None) -> tuple[int, bytes]:
        """:meth:`next`, by ``deadline`` (the loop's clock; ``None``: no limit): ``TIMED_OUT`` once it has passed,
        even with chunks waiting (the replica is told to stop), unless the answer's end is next. ``request_timeout_s``
        bounds a request end to end, as Ray's proxy bounds it: its wait for a replica, its answer and every chunk
        of a streamed one."""
        if deadline is None:
            return await self.next()
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0 and not (self._frames and self._frames[0][0] in _TERMINAL):
            self.cancel()
            return TIMED_OUT
        return await self.next(left)

    def _expire(self, flag: list[bool]) -> None:
        flag.append(True)
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def cancel(self) -> None:
        """Tell the replica to stop (the caller went away)."""
        if not self.done:
            self.done = True
            self.conn.streams.pop(self.id, None)
            self.conn.send(self.id, wire.CANCEL)

    def abandon(self, _: Any = None) -> None:
        """The HTTP client went away before the answer: the replica is told to stop (its handler gets
        ``CancelledError``, as in Ray), and :meth:`next` returns ``GONE``."""
        if not self.done:
            self.cancel()
            self._frames.append(GONE)
            w = self._waiter
            if w is not None and not w.done():
                w.set_result(None)


TIMED_OUT = (0, b"")
GONE = (-1, b"")  # the client disconnected (see Stream.abandon)


def deadline_for(timeout: float | None) -> float | None:
    """When a request that starts now must have been answered (the loop's clock), or ``None`` for no timeout."""
    return asyncio.get_running_loop().time() + timeout if timeout else None


def past(deadline: float | None) -> bool:
    """Whether ``deadline`` (from :func:`deadline_for`) has passed."""
    return deadline is not None and asyncio.get_running_loop().time() >= deadline


def timeout_message(timeout: float | None) -> str:
    return f"the request took longer than request_timeout_s={timeout} and was cancelled."


class ReplicaConnection(wire.FrameProtocol):
    """One persistent socket to one replica, carrying many streams."""

    def __init__(self, replica: "_RoutedReplica"):
        super().__init__()
        self.replica = replica
        self.streams: dict[int, Stream] = {}
        self._ids = itertools.count(1)

    def open(self, kind: int, payload: bytes) -> Stream:
        s = Stream(self, next(self._ids))
        self.streams[s.id] = s
        self.send(s.id, kind, payload)
        return s

    def on_frame(self, stream: int, kind: int, payload: bytes) -> None:
        s = self.streams.get(stream)
        if s is not None:
            if kind in _TERMINAL:
                del self.streams[stream]
            s.feed(kind, payload)
        elif kind == wire.MODELS:  # the replica's multiplexed models changed
            self.replica.models = frozenset(wire.loads(payload))

    def on_lost(self, exc: Exception | None) -> None:
        self.replica.dead = True
        self.replica.conn = None
        err = wire.dumps(wire.RemoteError(
            502, f"replica {self.replica.route.replica_id} died (or closed its connection) before it answered",
        ))
        streams, self.streams = self.streams, {}
        for s in streams.values():
            s.feed(wire.RESP_ERROR, err)
