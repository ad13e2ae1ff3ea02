"""A gang of training workers: ranks, rendezvous environment, start and teardown."""

from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable

from muster.core.runtime import RuntimeActor, DeathHandler, EventHandler, Runtime
from muster.tasks import actor_table, labels
from muster.tasks.runtime_context import new_library_worker
from muster.train._internal.worker import TrainWorker
from muster.train.config import ScalingConfig


@dataclass
class Member:
    handle: RuntimeActor
    rank: int
    local_rank: int
    local_world_size: int
    node_rank: int
    host: str
    ip: str  # muster.util.get_node_ip_address() in the worker (Tune's ``node_ip``, the rendezvous address)
    pid: int
    node: str = ""  # the engine's node id (simulated nodes on one host share an IP)
    actor_id: str = ""  # its id as an actor (get_runtime_context() in it; its row in list_actors)


def assign_ranks(infos: list[dict[str, Any]], gpu_ids: list[list[int]]) -> list[tuple[int, int, int, int]]:
    """``(rank, local_rank, local_world_size, node_rank)`` per member, in input order.

    Ranks are ordered by node (in order of first appearance, so the driver's
    node, which the engine lists first, gets rank 0), then by GPU id.  A node
    is the engine's node id (``info["node"]``) when it gives one: simulated
    nodes on one host share an IP address but not an id.
    """
    keys = [str(info.get("node") or info["ip"]) for info in infos]
    nodes = list(dict.fromkeys(keys))
    order = sorted(range(len(infos)), key=lambda i: (nodes.index(keys[i]), gpu_ids[i][:1] or [0], i))
    out: list[tuple[int, int, int, int]] = [(0, 0, 0, 0)] * len(infos)
    local_counts = {node: keys.count(node) for node in nodes}
    seen: dict[str, int] = {}
    for rank, i in enumerate(order):
        local = seen.get(keys[i], 0)
        seen[keys[i]] = local + 1
        out[i] = (rank, local, local_counts[keys[i]], nodes.index(keys[i]))
    return out


def asked(scaling: ScalingConfig) -> str:
    """``ScalingConfig(num_workers=8, use_gpu=True)``: the fields that say what a run asks for, as the user set them."""
    fields = [f"num_workers={scaling.num_workers!r}"]
    if scaling.use_gpu:
        fields.append("use_gpu=True")
    if scaling.resources_per_worker is not None:
        fields.append(f"resources_per_worker={scaling.resources_per_worker!r}")
    if scaling.placement_strategy != "PACK":
        fields.append(f"placement_strategy={scaling.placement_strategy!r}")
    return f"ScalingConfig({', '.join(fields)})"


class WorkerGroup:
    """Starts ``num_workers`` TrainWorkers together and tears them down together."""

    def __init__(self, runtime: Runtime, scaling: ScalingConfig, env: dict[str, str] | None = None):
        self.runtime, self.scaling, self.env = runtime, scaling, env
        self.members: list[Member] = []

    def start(
        self, on_event: EventHandler, on_death: DeathHandler, on_wait: Callable[[str], None] | None = None,
        size: int | None = None, run: str = "",
    ) -> None:
        """Start the gang: ``size`` workers (default: the ScalingConfig's largest). ``run`` names the run
        (``"TorchTrainer run 'r'"``) for the error of a gang that can never fit, with what its ScalingConfig asks."""
        what = f"{run} with {asked(self.scaling)}" if run else asked(self.scaling)
        for i, selector in enumerate(self.scaling.label_selectors(size or self.scaling.max_workers)):
            # as a task's label_selector: one the engine's node satisfies places nothing elsewhere; others refused
            option = f"label_selector[{i}]" if isinstance(self.scaling.label_selector, list) else "label_selector"
            labels.check_selector(selector, what, option)
        handles = self.runtime.create_gang(
            size or self.scaling.max_workers,
            TrainWorker,
            self.scaling.worker_resources,
            strategy=self.scaling.placement_strategy,
            env=self.env,
            on_wait=on_wait,
            what=what,
        )
        try:
            # each member's ids (get_runtime_context() in the loop): an actor's, as Ray's Train workers are
            identities = [new_library_worker() for _ in handles]
            infos = [f.result() for f in [h.call("info", i) for h, i in zip(handles, identities)]]
            ranks = assign_ranks(infos, [h.gpu_ids for h in handles])
            for handle, identity, info, (rank, local, local_n, node) in zip(handles, identities, infos, ranks):
                # listed by muster.util.state.list_actors() as Ray lists its Train workers
                actor_table.add_library_actor(identity, "RayTrainWorker", handle, self.runtime,
                                              self.scaling.worker_resources)
                handle.label = f"rank {rank}"
                handle.set_handlers(on_event, on_death)
                self.members.append(Member(handle, rank, local, local_n, node, info["host"], info["ip"], info["pid"],
                                           str(info.get("node") or info["ip"]), identity.actor_id))
            self.members.sort(key=lambda m: m.rank)
        except BaseException:
            for h in handles:
                self.runtime.kill(h)
            raise

    def rendezvous_env(self) -> list[dict[str, str]]:
        """torchrun's variables for each member, rank order.  MASTER_PORT is a port rank 0
        binds now and holds until its process group's store serves there: no gap between
        the pick and the bind for another program to take the port."""
        port = self.members[0].handle.call("reserve_port").result()
        # Rank 0's node address once the gang spans nodes; loopback when it all runs on one.
        master = self.members[0].ip if len({m.node for m in self.members}) > 1 else "127.0.0.1"
        n = len(self.members)
        return [
            {
                "RANK": str(m.rank),
                "LOCAL_RANK": str(m.local_rank),
                "WORLD_SIZE": str(n),
                "LOCAL_WORLD_SIZE": str(m.local_world_size),
                "NODE_RANK": str(m.node_rank),
                "GROUP_RANK": str(m.node_rank),
                "MASTER_ADDR": master,
                "MASTER_PORT": str(port),
            }
            for m in self.members
        ]

    def run(self, method: str, per_member_args: list[tuple]) -> list[Future]:
        return [m.handle.call(method, *args) for m, args in zip(self.members, per_member_args)]

    def member_of(self, handle: RuntimeActor) -> Member | None:
        for m in self.members:
            if m.handle is handle:
                return m
        return None

    def shutdown(self, drain_s: float = 0.0) -> None:
        """Kill every member now (SIGKILL on the local engine: peers stuck in a collective
        included), then wait up to ``drain_s`` until each one's link has been read to its
        end, so reports already sent are handled before the caller goes on."""
        for m in self.members:
            actor_table.library_actor_stopped(m.actor_id, "stopped by its training run (the run ended, or "
                                              "restarts its workers)")
            self.runtime.kill(m.handle)
        deadline = time.monotonic() + drain_s
        for m in self.members:
            while m.handle.is_alive() and time.monotonic() < deadline:
                time.sleep(0.005)
        for m in self.members:
            m.handle.set_handlers(None, None)
