"""A real Ray cluster for the multi-node tests: a head and two worker nodes on loopback.

The nodes are real raylets (``ray.cluster_utils.Cluster``), each with 2
logical CPUs. One cluster serves every module of this folder (starting one
takes ~13 s on this machine); each module gets it back as it found it: nodes
a module added and left are removed, and a cluster that lost one of its own
nodes is replaced. It is torn down, and its processes reaped, after the
folder's last module: its raylets are children of the test process, so Ray's
idle workers would look like leaks to the suite's leak check elsewhere.
``on_ray`` switches muster's engine to it for a module and back to the
embedded engine after.
"""

from __future__ import annotations

import os
import time
from typing import Any

import psutil
import pytest
import _background
from _shared import engine_workers, free_port, running

import muster

ray = pytest.importorskip("ray")

NODE_CPUS = 2
FOOTER_ACTORS = "RAY_DATA_PARQUET_FOOTER_NUM_ACTORS"


class _SharedCluster:
    """The folder's one cluster, started on first use, checked as each module takes it."""

    def __init__(self) -> None:
        self.cluster: Any = None
        self._own: set[Any] = set()  # the nodes it was started with

    def ready(self) -> Any:
        if self.cluster is not None and not self._whole():
            self.stop()  # a module removed or broke one of its nodes: a new cluster for the next
        if self.cluster is None:
            self._start()
        return self.cluster

    def _whole(self) -> bool:
        nodes = {self.cluster.head_node, *self.cluster.worker_nodes}
        return self._own <= nodes and all(n.remaining_processes_alive() for n in self._own)

    def tidy(self) -> None:
        """Remove the nodes a module added and did not remove."""
        if self.cluster is not None:
            for node in [n for n in self.cluster.worker_nodes if n not in self._own]:
                self.cluster.remove_node(node)

    def _start(self) -> None:
        from muster.cluster_utils import Cluster  # Ray's, as a ported test imports it

        # Ray 2.60's read_parquet reads footers in 32 new actors per read (RAY_DATA_PARQUET_FOOTER_NUM_ACTORS),
        # each importing ray.data: about 30 s a read on this 2-core machine. One actor keeps Ray's path at ~3 s a
        # read. The raylets, so Ray's workers, inherit it; a value the user set is theirs and stays.
        os.environ.setdefault(FOOTER_ACTORS, "1")
        client_port = free_port()
        cluster = Cluster(initialize_head=True,
                          head_node_args={"num_cpus": NODE_CPUS, "ray_client_server_port": client_port})
        cluster.client_address = f"ray://127.0.0.1:{client_port}"  # Ray Client, as from a laptop
        for _ in range(2):
            cluster.add_node(num_cpus=NODE_CPUS)
        cluster.wait_for_nodes()
        self.cluster, self._own = cluster, {cluster.head_node, *cluster.worker_nodes}

    def stop(self) -> None:
        if self.cluster is not None:
            if ray.is_initialized():  # a driver still connected when its raylet dies is ended by Ray, exit 1
                ray.shutdown()
            self.cluster.shutdown()
            self.cluster, self._own = None, set()
            _reap_ray_processes()


@pytest.fixture(scope="package")
def _shared_cluster():
    shared = _SharedCluster()
    ours = FOOTER_ACTORS not in os.environ
    try:
        yield shared
    finally:
        shared.stop()
        if ours:
            os.environ.pop(FOOTER_ACTORS, None)


@pytest.fixture(scope="module")
def ray_cluster(_shared_cluster):
    yield _shared_cluster.ready()
    _shared_cluster.tidy()


def _reap_ray_processes(timeout: float = 20.0) -> None:
    """Wait for the cluster's processes (ours: this fixture started them) to be gone; kill stragglers."""
    me = psutil.Process()
    deadline = time.monotonic() + timeout
    while True:
        engine = {p.pid for p in _local_workers()} | {_zygote_pid()} | _background.pids()  # not Ray's
        left = [p for p in me.children(recursive=True) if p.pid not in engine and running(p)]
        if not left:
            return
        if time.monotonic() > deadline:
            for p in left:
                p.kill()
            return
        time.sleep(0.1)


@pytest.fixture(scope="module")
def on_ray(ray_cluster):
    """muster runs on the Ray cluster for this module."""
    muster.shutdown()
    muster.init(address=ray_cluster.address)
    yield ray_cluster
    muster.shutdown()
    muster.init(num_cpus=4, num_gpus=0)  # the session's embedded engine, as tests/conftest.py starts it


@pytest.fixture(scope="module", params=["local", "ray"])
def engine(request):
    """For a module's tests that run on both engines: the session's embedded one, or the module's Ray cluster."""
    if request.param == "local":
        yield "local"
        return
    request.getfixturevalue("on_ray")
    yield "ray"


def _zygote_pid() -> int | None:
    from muster.core.api import _runtime

    zygote = getattr(_runtime, "_zygote", None)
    return zygote.pid if zygote is not None else None


def _local_workers() -> list[psutil.Process]:
    """The embedded engine's workers; Ray's own processes are not ours to police."""
    return engine_workers()


@pytest.fixture(autouse=True)
def _no_leaked_workers(request):
    """Overrides the suite's leak check: the cluster's raylets and Ray workers are children of this
    process by design, so only the embedded engine's workers (and Ray actors muster made) count."""
    yield
    from muster.core.api import _runtime

    def retire() -> None:  # warm task workers are a cache, not a leak (also one a cancel has just freed)
        if _runtime is not None and hasattr(_runtime, "retire_idle_workers"):
            _runtime.retire_idle_workers()

    retire()
    deadline = time.monotonic() + 5
    alive = _local_workers()
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        retire()
        alive = [p for p in alive if running(p)]
    if alive:
        pytest.fail(f"test leaked worker processes: {[p.pid for p in alive]}")
    if _runtime is not None and getattr(_runtime, "name", "") == "ray":
        deadline = time.monotonic() + 10
        while _runtime._actors and time.monotonic() < deadline:  # type: ignore[attr-defined]
            time.sleep(0.05)
        left = list(_runtime._actors.values())  # type: ignore[attr-defined]
        assert not left, f"test left muster actors on the cluster: {left}"
