"""The router's choices, on real sockets: a replica not yet connected is not passed over, and
routing draws from its own random stream, not the user's."""

from __future__ import annotations

import asyncio
import os
import random
import statistics

from muster.serve._internal import router, wire


async def _requests_until_both_used(paths: list[str], trials: int) -> list[int]:
    """For fresh routers over two replicas, how many requests (sent as the ingress sends them) reach both."""
    counts = []
    for _ in range(trials):
        r = router.Router("app", "dep")
        r.update(router.DeploymentRoute(tuple(router.ReplicaRoute(f"r{i}", p) for i, p in enumerate(paths)), 8, -1))
        used: set[str] = set()
        n = 0
        while len(used) < 2 and n < 100:
            n += 1
            got = r.open_now(wire.REQ_HTTP, b"x") or await r.open_stream(wire.REQ_HTTP, b"x", 5.0)
            used.add(got[0].route.replica_id)
            r.release(got[0])  # the answer came: the replica has room again
        for rep in r.replicas.values():
            if rep.conn is not None:
                rep.conn.transport.close()
        counts.append(n)
    return counts


def test_a_replica_picked_before_it_is_connected_still_gets_the_request(tmp_path):
    async def main() -> list[int]:
        async def accept(reader, writer):
            await reader.read()
            writer.close()

        paths = [str(tmp_path / f"r{i}.sock") for i in range(2)]
        servers = [await asyncio.start_unix_server(accept, p) for p in paths]
        try:
            return await _requests_until_both_used(paths, 300)
        finally:
            for s in servers:
                s.close()

    router._rng.seed(1234)
    counts = asyncio.run(main())
    # Each request picks either replica with even odds, so the second replica's first request comes after
    # 2 more on average (3 in all). Passing over a replica because it is not connected yet made it 1 + 4.
    assert statistics.mean(counts) < 3.6, statistics.mean(counts)


def test_routing_leaves_the_users_random_stream_alone():
    random.seed(7)
    expected = [random.random() for _ in range(3)]
    random.seed(7)
    r = router.Router("app", "dep")
    r.update(router.DeploymentRoute((router.ReplicaRoute("a", "/nowhere-a"), router.ReplicaRoute("b", "/nowhere-b")),
                                    8, -1))
    for _ in range(10):
        r._pick()
    assert [random.random() for _ in range(3)] == expected


def test_a_forked_process_draws_its_own_routing_stream():
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write, repr(router._random()).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 100).decode() != repr(router._random())
