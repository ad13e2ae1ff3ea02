"""MASTER_PORT has no gap between its pick and the process group's bind.

The driver learns MASTER_PORT from rank 0, then hands it to every rank; the
test plays another program on the machine that takes that port at once, in
the driver, after the pick and before any worker joins the process group.
The port must already be held (the bind is refused), and the run must train
on its first attempt with every rank's MASTER_PORT the port in use.
"""

from __future__ import annotations

import datetime
import os
import socket

import pytest
import torch

import muster.train as train
from muster.train import RunConfig, ScalingConfig
from muster.train.torch import TorchConfig, TorchTrainer
from muster.train.trainer import DataParallelTrainer
from muster.train.worker_group import WorkerGroup


def all_reduce_loop():
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():  # a plain DataParallelTrainer: the loop joins from torchrun's variables itself
        dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=30))
    ones = torch.ones(1)
    dist.all_reduce(ones)
    port = int(os.environ["MASTER_PORT"])
    # whoever serves MASTER_ADDR:MASTER_PORT is the process group's store: a side store reaches it there
    side = dist.TCPStore(os.environ["MASTER_ADDR"], port, is_master=False, timeout=datetime.timedelta(seconds=30))
    rank = train.get_context().get_world_rank()
    side.set(f"seen/{rank}", "yes")
    dist.barrier()
    seen = [side.get(f"seen/{r}").decode() for r in range(dist.get_world_size())]
    from muster.train._internal import rendezvous

    server = rendezvous._store  # rank 0's: the server on the port it held; None elsewhere and without a backend
    train.report({"sum": ones.item(), "port": port, "seen": seen,
                  "libuv": None if server is None else server.libuvBackend})


@pytest.fixture
def squatter(monkeypatch):
    """Another program binds and listens on MASTER_PORT right after the driver learns it."""
    state: dict = {"ports": [], "taken": [], "refused": []}

    def rendezvous_env(self):
        envs = real(self)
        port = int(envs[0]["MASTER_PORT"])
        state["ports"].append(port)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
            sock.listen(8)
            state["taken"].append(sock)
        except OSError as exc:
            state["refused"].append(exc.errno)
            sock.close()
        return envs

    real = WorkerGroup.rendezvous_env
    monkeypatch.setattr(WorkerGroup, "rendezvous_env", rendezvous_env)
    yield state
    for sock in state["taken"]:
        sock.close()


@pytest.mark.parametrize("how", ["env", "tcp", "classic", "loop"])
def test_a_port_taken_after_the_pick_does_not_break_the_rendezvous(how, squatter, storage):
    env = {"USE_LIBUV": "0"} if how == "classic" else {}  # torch's switch to its classic (non-libuv) store
    if how == "loop":  # no backend: the user's loop calls init_process_group from the env, as under torchrun
        trainer_cls, kwargs = DataParallelTrainer, {}
    else:
        init = "tcp" if how == "tcp" else "env"
        trainer_cls, kwargs = TorchTrainer, {"torch_config": TorchConfig(init_method=init, timeout_s=30)}
    result = trainer_cls(
        all_reduce_loop,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name=how, storage_path=storage, verbose=0, worker_runtime_env={"env_vars": env}),
        **kwargs,
    ).fit()
    assert result.error is None
    assert len(squatter["ports"]) == 1  # one attempt: no failure, no restart
    assert squatter["taken"] == [] and len(squatter["refused"]) == 1  # the port was already held
    rows = {row["_rank"]: row for row in result.all_reports}
    assert sorted(rows) == [0, 1]
    for row in rows.values():
        assert row["sum"] == 2.0
        assert row["port"] == squatter["ports"][0]
        assert row["seen"] == ["yes", "yes"]
    libuv = torch.__version__ >= "2.8" and how != "classic"  # older torch's libuv server cannot take a socket
    assert rows[0]["libuv"] == (None if how == "loop" else libuv) and rows[1]["libuv"] is None
