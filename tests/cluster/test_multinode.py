"""Training across the nodes of a real Ray cluster: ranks by node, storage checks, a node lost mid-run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import pytest
from _shared import free_port
import torch

import muster
import muster.train as train
from muster.exceptions import ResourcesUnavailableError, StorageNotSharedError, TrainingFailedError
from muster.train import Checkpoint, FailureConfig, RunConfig, ScalingConfig
from muster.train.torch import TorchTrainer

ray = pytest.importorskip("ray")


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def where_am_i(config):
    """Every rank reports its torchrun variables and its Ray node, after a real all_reduce."""
    import torch.distributed as dist

    t = torch.ones(1)
    dist.all_reduce(t)
    names = ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "WORLD_SIZE", "MASTER_ADDR")
    train.report({**{k.lower(): os.environ[k] for k in names}, "sum": t.item(),
                  "node": ray.get_runtime_context().get_node_id(), "ip": ray.util.get_node_ip_address()})


def test_two_node_run_orders_ranks_by_node(on_ray, storage):
    # 4 workers x 2 CPUs cannot fit one 2-CPU node: PACK fills two nodes, two ranks each.
    result = TorchTrainer(
        where_am_i, scaling_config=ScalingConfig(num_workers=4, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(storage_path=storage, name="two_nodes", verbose=0),
    ).fit()
    rows = sorted(result.all_reports, key=lambda r: int(r["rank"]))
    assert [int(r["rank"]) for r in rows] == [0, 1, 2, 3] and all(r["sum"] == 4.0 for r in rows)
    nodes = [r["node"] for r in rows]
    assert len(set(nodes)) >= 2, f"the gang stayed on one node: {nodes}"
    # Ranks are ordered by node: each node holds a contiguous block of ranks.
    order = list(dict.fromkeys(nodes))
    assert nodes == sorted(nodes, key=order.index)
    for r in rows:
        on_node = [x for x in rows if x["node"] == r["node"]]
        assert int(r["node_rank"]) == order.index(r["node"])
        assert int(r["local_world_size"]) == len(on_node)
        assert int(r["local_rank"]) == [int(x["rank"]) for x in on_node].index(int(r["rank"]))
        assert r["master_addr"] == rows[0]["ip"]  # rank 0's node address, not loopback


def print_and_report(config):
    """Each rank prints to stdout and stderr (an unfinished last line too), then reports."""
    rank = train.get_context().get_world_rank()
    print(f"out line of rank {rank}")
    print(f"err line of rank {rank}", file=sys.stderr)
    sys.stdout.write(f"no newline from rank {rank}")
    train.report({"rank": rank})


def test_muster_logs_shows_what_ray_workers_printed(on_ray, storage):
    """Worker output on the Ray engine reaches the run store through the runtime's log sink."""
    TorchTrainer(
        print_and_report, scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(storage_path=storage, name="ray_logs", verbose=0),
    ).fit()
    for rank in (0, 1):
        proc = subprocess.run([sys.executable, "-m", "muster.cli", "logs", "ray_logs", "--rank", str(rank),
                               "--storage-path", storage], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        lines = sorted(line.split(") ", 1)[1] for line in proc.stdout.splitlines())
        assert lines == sorted([f"out line of rank {rank}", f"err line of rank {rank}", f"no newline from rank {rank}"])


_CLIENT_DRIVER = """
import sys
import muster
import muster.train as train
from muster.train import RunConfig, ScalingConfig
from muster.train.torch import TorchTrainer

def where(config):
    import torch, torch.distributed as dist
    t = torch.ones(1)
    dist.all_reduce(t)
    train.report({"rank": train.get_context().get_world_rank(), "sum": t.item()})

address, storage = sys.argv[1:3]
# Ray Client's per-driver server sometimes exits at start (Ray's own flake): connect again, three tries
for attempt in range(3):
    try:
        rt = muster.init(address=address)
        break
    except ConnectionAbortedError:
        if attempt == 2:
            raise
assert rt.name == "ray" and muster.cluster_resources()["CPU"] >= 4

@muster.remote
def square(x):
    return x * x

assert muster.get([square.remote(i) for i in range(4)]) == [0, 1, 4, 9]
result = TorchTrainer(where, scaling_config=ScalingConfig(num_workers=2),
                      run_config=RunConfig(storage_path=storage, name="via_client", verbose=0)).fit()
assert sorted(int(r["rank"]) for r in result.all_reports) == [0, 1]
assert all(r["sum"] == 2.0 for r in result.all_reports)
muster.shutdown()
print("CLIENT OK")
"""


@pytest.mark.timeout(300)  # a fresh interpreter connects through Ray Client and trains
def test_ray_client_address_runs_tasks_and_training(on_ray, storage, tmp_path):
    """muster.init("ray://head:10001"): the driver outside the cluster, through Ray Client. It runs as
    its own process, as a laptop's script would: Ray Client's connection ending takes its process with
    it at times, which must not be the test session's."""
    script = tmp_path / "client_driver.py"
    script.write_text(_CLIENT_DRIVER)
    env = {k: v for k, v in os.environ.items() if k not in ("MUSTER_ADDRESS", "RAY_ADDRESS")}
    proc = subprocess.run([sys.executable, str(script), on_ray.client_address, storage], capture_output=True,
                          text=True, timeout=240, env=env, cwd=tmp_path)
    assert proc.returncode == 0 and "CLIENT OK" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.parametrize(
    "scaling, needle",
    [
        (ScalingConfig(num_workers=2, resources_per_worker={"CPU": 3}), "cannot span nodes"),
        (ScalingConfig(num_workers=3, placement_strategy="STRICT_PACK"), "STRICT_PACK"),
        (ScalingConfig(num_workers=5, placement_strategy="STRICT_SPREAD"), "STRICT_SPREAD"),
    ],
)
def test_gang_that_no_cluster_shape_can_hold_fails_at_once(on_ray, storage, scaling, needle):
    """6 CPUs in total, but 2 per node: placements that never fit fail now, naming each node."""
    t0 = time.monotonic()
    with pytest.raises(ResourcesUnavailableError) as info:
        TorchTrainer(where_am_i, scaling_config=scaling,
                     run_config=RunConfig(storage_path=storage, name="never", verbose=0)).fit()
    msg = str(info.value)
    assert needle in msg and "node 0: CPU=2" in msg and "Fix:" in msg
    assert msg.startswith("TorchTrainer run 'never' with ScalingConfig(num_workers="), msg  # was "ScalingConfig: "
    assert time.monotonic() - t0 < 15


def test_run_fails_at_once_when_workers_cannot_see_storage(on_ray):
    """A storage path only the driver sees (an in-process filesystem): every worker's check fails,
    at the start, naming its node and the fix -- and no retry is wasted on it."""
    t0 = time.monotonic()
    with pytest.raises(TrainingFailedError) as info:
        TorchTrainer(
            where_am_i, scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(storage_path="memory://driver-only", name="unshared", verbose=0,
                                 failure_config=FailureConfig(max_failures=3)),
        ).fit()
    assert len(info.value.attempts) == 1  # not retried: a restart cannot make the storage appear
    cause = info.value.root_cause
    assert isinstance(getattr(cause, "cause", None), StorageNotSharedError)
    msg = str(cause)
    assert "Ray node" in msg and "memory:///driver-only/unshared" in msg
    assert "s3://" in msg and "NFS" in msg
    assert time.monotonic() - t0 < 60



@pytest.fixture
def island_node(on_ray, tmp_path):
    """A real extra Ray node (``ray start``) in its own mount namespace, where the storage folder is
    an empty tmpfs: like a machine whose local disk has its own folder at that path. Yields
    (storage path, node id). Skipped where mount namespaces are not allowed (unprivileged CI)."""
    import shutil
    import signal

    shared = tmp_path / "results"
    shared.mkdir()
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    ports = " ".join(f"--{flag}={free_port()}" for flag in (
        "node-manager-port", "object-manager-port", "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
        "runtime-env-agent-port", "metrics-export-port"))
    script = (f"mount -t tmpfs tmpfs {shared} && exec {ray_bin} start --address={on_ray.address} --num-cpus=1 "
              f"--resources='{{\"anyslot\": 1}}' {ports} --block")
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) for a node with its own view of the filesystem")
    known = {n["NodeID"] for n in ray.nodes()}
    proc = subprocess.Popen(["unshare", "-m", "sh", "-c", script], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            new = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] not in known]
            if new:
                break
            if proc.poll() is not None:
                pytest.skip(f"could not start a node in a mount namespace here: {proc.stderr.read()[-300:]}")
            assert time.monotonic() < deadline, "the namespaced node did not join"
            time.sleep(0.2)
        yield str(shared), new[0]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # `ray start --block` stops its raylet and workers
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        # Leave the cluster settled for the next test: the node is gone for Ray too.
        _wait_for(lambda: not [n for n in ray.nodes() if n["Alive"] and n["NodeID"] not in known], 60,
                  "Ray to see the namespaced node gone")


def test_the_one_node_that_cannot_see_storage_is_named(on_ray, island_node):
    """Two workers, one on a node whose filesystem has its own (empty) folder at the storage path:
    the run fails at the start, and the error names that node."""
    storage, island = island_node
    other = on_ray.add_node(num_cpus=1, resources={"anyslot": 1})
    try:
        with pytest.raises(TrainingFailedError) as info:
            TorchTrainer(
                where_am_i,
                scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1, "anyslot": 1}),
                run_config=RunConfig(storage_path=storage, name="split_view", verbose=0,
                                     failure_config=FailureConfig(max_failures=2)),
            ).fit()
    finally:
        on_ray.remove_node(other)
    assert len(info.value.attempts) == 1
    cause = info.value.root_cause
    assert isinstance(getattr(cause, "cause", None), StorageNotSharedError)
    assert f"Ray node {island}" in str(cause) and other.node_id not in str(cause)
    assert os.path.exists(os.path.join(storage, "split_view", ".muster_run.json"))  # the driver's view


def test_status_shows_the_cluster(on_ray, storage):
    env = dict(os.environ, RAY_ADDRESS=on_ray.address)
    env.pop("MUSTER_ADDRESS", None)
    proc = subprocess.run([sys.executable, "-m", "muster.cli", "status", "--storage-path", storage],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "engine     ray" in out and "nodes      3 alive" in out
    assert out.count("total CPU=2") == 3 and "total CPU=6" in out


# -- a node lost mid-run ---------------------------------------------------------------
def epochs_with_a_stall(config):
    """Three epochs, a checkpoint each. The first attempt stalls after epoch 0 (until its node goes)."""
    import torch.distributed as dist

    ctx = train.get_context()
    rank = ctx.get_world_rank()
    start = 0
    ckpt = train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as folder:
            start = torch.load(os.path.join(folder, f"rank_{rank}.pt"))["epoch"] + 1
    with open(os.path.join(config["dir"], f"attempt{ctx.get_attempt()}_rank{rank}.json"), "w") as f:
        json.dump({"node": ray.get_runtime_context().get_node_id()}, f)
    for epoch in range(start, 3):
        t = torch.ones(1)
        dist.all_reduce(t)
        with tempfile.TemporaryDirectory() as tmp:
            torch.save({"epoch": epoch}, os.path.join(tmp, f"rank_{rank}.pt"))
            train.report({"epoch": epoch, "attempt": ctx.get_attempt()}, checkpoint=Checkpoint.from_directory(tmp))
        dist.barrier()
        while ctx.get_attempt() == 0:  # stall: the test removes a node now
            time.sleep(0.1)


def test_node_removed_mid_run_recovers_from_the_checkpoint(on_ray, storage, tmp_path):
    cluster = on_ray
    # Two nodes of one "slot" each hold the gang; a third comes to replace the one removed.
    spare_nodes = [cluster.add_node(num_cpus=1, resources={"slot": 1}) for _ in range(2)]
    cluster.wait_for_nodes()
    by_id = {n.node_id: n for n in spare_nodes}
    out: dict = {}

    def fit():
        try:
            out["result"] = TorchTrainer(
                epochs_with_a_stall, train_loop_config={"dir": str(tmp_path)},
                scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1, "slot": 1}),
                run_config=RunConfig(storage_path=storage, name="node_loss", verbose=0,
                                     failure_config=FailureConfig(max_failures=1)),
            ).fit()
        except BaseException as exc:  # noqa: BLE001
            out["error"] = exc

    runner = threading.Thread(target=fit)
    runner.start()
    replacement = None
    try:
        first_ckpt = os.path.join(storage, "node_loss", "checkpoint_000001")
        _wait_for(lambda: os.path.exists(first_ckpt) or not runner.is_alive(), 90, "the first checkpoint")
        assert runner.is_alive(), out
        with open(tmp_path / "attempt0_rank1.json") as f:
            victim = by_id[json.load(f)["node"]]
        cluster.remove_node(victim)  # its raylet and every worker on it are killed
        replacement = cluster.add_node(num_cpus=1, resources={"slot": 1})
        runner.join(120)
        assert not runner.is_alive(), "training did not finish after the node was replaced"
    finally:
        for node in [n for n in spare_nodes if n is not victim] + ([replacement] if replacement else []):
            cluster.remove_node(node)
    assert "error" not in out, out.get("error")
    result = out["result"]
    first = sorted((r["_rank"], r["epoch"]) for r in result.all_reports if r["_attempt"] == 0)
    second = sorted((r["_rank"], r["epoch"]) for r in result.all_reports if r["_attempt"] == 1)
    assert first == [(0, 0), (1, 0)]
    assert second == [(0, 1), (0, 2), (1, 1), (1, 2)]  # resumed from epoch 0's checkpoint
    with open(tmp_path / "attempt1_rank1.json") as f:
        assert json.load(f)["node"] != victim.node_id
    assert result.checkpoint.path.endswith("checkpoint_000003")


# -- elastic: shrink when a node goes, grow when one comes ------------------------------
def test_elastic_run_shrinks_on_node_loss_and_grows_back(on_ray, storage):
    from _elastic import check_data_position, counts_by_attempt, elastic_loop

    cluster = on_ray
    nodes = [cluster.add_node(num_cpus=2, resources={"eslot": 2}) for _ in range(2)]
    cluster.wait_for_nodes()
    out: dict = {}

    def fit():
        try:
            out["result"] = TorchTrainer(
                # slow steps: the shrunken gang must still be training when the new node has joined
                # (adding a Ray node takes seconds on a busy machine)
                elastic_loop, train_loop_config={"stall": True, "step_s": 0.25},
                scaling_config=ScalingConfig(num_workers=(2, 4), resources_per_worker={"CPU": 1, "eslot": 1}),
                run_config=RunConfig(storage_path=storage, name="elastic", verbose=0,
                                     failure_config=FailureConfig(max_failures=1)),
            ).fit()
        except BaseException as exc:  # noqa: BLE001
            out["error"] = exc

    runner = threading.Thread(target=fit)
    runner.start()
    added = None
    try:
        run = os.path.join(storage, "elastic")
        _wait_for(lambda: os.path.exists(os.path.join(run, "checkpoint_000003")) or not runner.is_alive(),
                  90, "three checkpoints of the 4-worker gang")
        assert runner.is_alive(), out
        cluster.remove_node(nodes[1])  # two of the four workers die with it
        # The run goes on with the 2 workers that fit, then grows when a node joins.
        _wait_for(lambda: len(_attempt_worlds(run)) >= 1 or not runner.is_alive(), 90, "the shrunken gang")
        added = cluster.add_node(num_cpus=2, resources={"eslot": 2})
        runner.join(150)
        assert not runner.is_alive(), "the elastic run did not finish"
    finally:
        for node in [nodes[0]] + ([added] if added else []):
            cluster.remove_node(node)
    assert "error" not in out, out.get("error")
    reports = out["result"].all_reports
    worlds = counts_by_attempt(reports)
    assert list(worlds.values())[:2] == [4, 2], worlds  # full size, then shrunk after the loss
    assert list(worlds.values())[-1] == 4, worlds  # and grown back once the node came
    check_data_position(reports)


def _attempt_worlds(run: str) -> dict[int, int]:
    path = os.path.join(run, "result.json")
    worlds: dict[int, int] = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if row.get("attempt", 0) > 0:
                    worlds[row["attempt"]] = row["world"]
    return worlds
