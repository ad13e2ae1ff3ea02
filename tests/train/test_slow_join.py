"""A rank that is done before a slow peer has joined does not break that peer's join.

Gloo's full mesh is not a barrier: when rank 0's side opens the pair, rank 0 is
connected as soon as its peer's listener (a background thread) accepts, while
the peer's main thread may still be waiting for rank 0's address from the
store. A loop with no collective then let rank 0 finish and destroy its process
group first, and the peer failed with "Gloo connectFullMesh failed ...
Connection closed by peer" (seen in CI on a loaded machine). Which side opens
the pair depends on the ports Gloo's listeners get, so each join is a coin
toss, and the peer's loss then a race of its own: the test joins 16 times.
muster's join now ends with a barrier on the store, so no rank leaves before
every rank has joined.

The slowness is real: rank 1 reaches the store only through a loopback proxy
that, once rank 1 has published its own Gloo address, holds the next reply
back. Both ranks run muster's own backend, each in its own process.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import threading
import time
from typing import Any

from muster.train._internal import rendezvous
from muster.train.context import TrainContext
from muster.train.torch import TorchConfig
from muster.train.torch.config import TorchBackend

_PAIRS, _ROUNDS = 4, 4  # 16 joins, 4 at a time: an old join failed 16 times in 48 here, 16 passing is ~0.2%
_DELAY_S = 1.0  # how long the proxy holds back rank 1's first reply after it has published its address
_GLOO_KEY = b"/cpu/"  # in the keys Gloo's ranks publish their addresses under: "default_pg/0//cpu//0/<rank>"


class _Link:
    """One client connection: armed once the client has published its Gloo address; the first reply
    after that is held back, once."""

    armed = held = False


class _SlowProxy:
    """127.0.0.1:<port> to rank 0's store; the first reply after the client has published its Gloo
    address is held back ``delay_s``: rank 1 is slow to learn rank 0's."""

    def __init__(self, delay_s: float):
        self.delay_s, self.delayed, self.upstream = delay_s, 0, 0
        self.known = threading.Event()  # set with ``upstream``, once rank 0 has named its port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def to(self, upstream: int) -> None:
        self.upstream = upstream
        self.known.set()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed
                return
            self.known.wait(60)
            store = socket.create_connection(("127.0.0.1", self.upstream))
            self.sockets += [client, store]
            link = _Link()
            threading.Thread(target=self._pump, args=(client, store, link, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(store, client, link, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, link: _Link, replies: bool) -> None:
        try:
            while data := src.recv(65536):
                if not replies and _GLOO_KEY in data:
                    link.armed = True
                elif replies and link.armed and not link.held:
                    link.held = True
                    self.delayed += 1
                    time.sleep(self.delay_s)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        for sock in [self.listener, *self.sockets]:
            sock.close()


def _rank(rank: int, port: int | None, ports: Any, results: Any, done: Any) -> None:
    """One rank, in a process of its own as in a run: muster's backend joins the process group, and
    leaves it at once (a loop with no collective)."""
    if port is None:  # rank 0: a port it holds, as the driver asks of it
        port = rendezvous.reserve_port()
        ports.put(port)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    context = TrainContext(world_rank=rank, world_size=2, local_rank=rank, local_world_size=2, node_rank=0,
                           experiment_name="slow-join", run_dir=os.getcwd())
    backend = TorchBackend(TorchConfig(timeout_s=20), use_gpu=False)
    try:
        backend.on_worker_start(context)
        backend.on_worker_end()
        results.put((rank, None))
    except Exception as exc:  # reported to the test, which names it
        results.put((rank, f"{type(exc).__name__}: {exc}"))
    done.wait(60)  # rank 0's store serves until rank 1 is done too


class _Join:
    """Rank 0 and rank 1 of one process group, rank 1 behind a slow proxy to rank 0's store."""

    def __init__(self, ctx: Any):
        self.proxy = _SlowProxy(_DELAY_S)
        ports, self.results, self.done = ctx.Queue(), ctx.Queue(), ctx.Event()
        self.procs = [ctx.Process(target=_rank, args=(r, port, ports, self.results, self.done))
                      for r, port in ((0, None), (1, self.proxy.port))]
        for p in self.procs:
            p.start()
        self.proxy.to(ports.get(timeout=60))

    def errors(self) -> list[str]:
        try:
            outcomes = [self.results.get(timeout=60) for _ in self.procs]
            return [f"rank {r}: {e}" for r, e in outcomes if e is not None]
        finally:
            self.done.set()
            for p in self.procs:
                p.join(timeout=30)
                if p.is_alive():
                    p.kill()
                    p.join()
            self.proxy.close()


def test_rank_0_done_at_once_does_not_break_a_slow_peers_join():
    ctx = multiprocessing.get_context("fork")  # the test process holds torch already: each fork starts at once
    errors, delayed = [], 0
    for _ in range(_ROUNDS):
        joins = [_Join(ctx) for _ in range(_PAIRS)]
        for join in joins:
            errors += join.errors()
            delayed += join.proxy.delayed
    assert delayed >= _PAIRS * _ROUNDS, "the proxy never held a reply back: Gloo's store keys changed their form?"
    assert errors == []
