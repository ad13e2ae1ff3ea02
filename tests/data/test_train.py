"""Datasets in TorchTrainer: exact sharding, per-epoch shuffles, never hanging beside a gang that
holds every CPU, and exact resume after a worker is SIGKILLed mid-epoch."""

from __future__ import annotations

import os
import signal
import tempfile

import pytest
import torch
import torch.distributed

import muster.data as md
import muster.train as train
from muster.train import Checkpoint, DataConfig, FailureConfig, RunConfig, ScalingConfig
from muster.train.torch import TorchTrainer

TEST_CPUS = 4  # the session engine's CPUs (tests/conftest.py)


def fit(loop, datasets, storage, workers=2, config=None, data_config=None, **run_kwargs):
    return TorchTrainer(
        loop,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=workers),
        run_config=RunConfig(name="run", storage_path=storage, verbose=0, **run_kwargs),
        datasets=datasets,
        dataset_config=data_config,
    ).fit()


def shard_loop():
    rank = train.get_context().get_world_rank()
    split, whole = train.get_dataset_shard("train"), train.get_dataset_shard("val")
    loader = split.iter_torch_batches(batch_size=5)  # made once, a pass per epoch (Ray's ingest guide)
    for epoch in range(2):
        got = [int(x) for b in loader for x in b["id"]]
        batches = sum(1 for _ in split.iter_batches(batch_size=5)) if epoch == 0 else None
        val = [r["id"] for r in whole.iter_rows()]
        train.report({"epoch": epoch, "rank": rank, "ids": got, "val": val, "batches": batches})


def test_split_and_unsplit_datasets(storage):
    ds = md.range(61).filter(lambda r: r["id"] % 4 != 0).random_shuffle(seed=11)  # 45 rows
    result = fit(shard_loop, {"train": ds, "val": md.range(6)}, storage,
                 data_config=DataConfig(datasets_to_split=["train"]))
    reports = result.all_reports
    kept = {i for i in range(61) if i % 4}
    by_epoch = {}
    for r in reports:
        assert r["val"] == list(range(6))  # unsplit: every rank gets all rows
        assert len(r["ids"]) == 45 // 2
        by_epoch.setdefault(r["epoch"], []).append(r["ids"])
    for epoch, shards in by_epoch.items():
        flat = [x for s in shards for x in s]
        assert len(flat) == len(set(flat)) and set(flat) <= kept  # each kept row to one rank at most
        assert len(flat) == 44  # only the last incomplete group (1 row) is dropped
    assert by_epoch[0][0] != by_epoch[1][0]  # a new order each epoch
    assert [r["batches"] for r in reports if r["epoch"] == 0] == [5, 5]  # 22 rows / 5 -> 5 batches on each rank


def all_cpus_loop():
    it = train.get_dataset_shard()  # Ray's signature: the only dataset, or get_dataset_shard(dataset_name=...)
    assert train.get_dataset_shard(dataset_name="train") is it
    total = sum(float(b["y"].sum()) for b in it.iter_torch_batches(batch_size=32))
    train.report({"total": total})


def test_pipeline_finishes_while_the_gang_holds_every_cpu(storage):
    """Ray Data hangs here (its executor waits for CPUs the trainers hold); muster's runs on the
    trainers' own threads."""
    ds = md.range(400, override_num_blocks=8).map_batches(lambda b: {"y": b["id"] * 2.0}, batch_size=50)
    result = fit(all_cpus_loop, {"train": ds}, storage, workers=TEST_CPUS)
    totals = [r["total"] for r in result.all_reports]
    assert len(totals) == TEST_CPUS
    assert sum(totals) == pytest.approx(sum(2.0 * i for i in range(400)))


def exact_loop(config):
    """Two epochs of SGD on a shuffled, mapped dataset; a checkpoint after every batch.
    Rank 1 SIGKILLs itself mid-epoch 1 once (when a marker path is given)."""
    rank = train.get_context().get_world_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    seen, start = [], 0
    ckpt = train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as folder:
            state = torch.load(os.path.join(folder, f"rank_{rank}.pt"))
        model.load_state_dict(state["model"]), opt.load_state_dict(state["opt"])
        seen, start = state["seen"], state["epoch"]
    it = train.get_dataset_shard("train")
    for epoch in range(start, 2):
        for i, batch in enumerate(it.iter_torch_batches(batch_size=4, dtypes=torch.float32)):
            x = torch.stack([batch["a"], batch["b"]], dim=1)
            loss = ((model(x).squeeze(1) - batch["id"]) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen += [int(v) for v in batch["id"]]
            torch.distributed.barrier()  # ranks in step, as DDP's gradient all-reduce keeps them
            with tempfile.TemporaryDirectory() as tmp:
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "seen": seen, "epoch": epoch},
                           os.path.join(tmp, f"rank_{rank}.pt"))
                train.report({"epoch": epoch}, checkpoint=Checkpoint.from_directory(tmp))
            marker = config.get("marker")
            if marker and rank == 1 and epoch == 1 and i == 3 and not os.path.exists(marker):
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
    weights = [float(p) for p in torch.cat([p.detach().flatten() for p in model.parameters()])]
    train.report({"done": True, "rank": rank, "seen": seen, "weights": weights})


def exact_dataset():
    return (md.range(64, override_num_blocks=4)
            .map_batches(lambda b: {"id": b["id"], "a": b["id"] * 0.1, "b": (b["id"] % 7) * 1.0})
            .random_shuffle(seed=7))


def test_killed_mid_epoch_resumes_exactly(storage, tmp_path):
    clean = fit(exact_loop, {"train": exact_dataset()}, storage + "/clean", config={})
    marker = str(tmp_path / "killed")
    resumed = fit(exact_loop, {"train": exact_dataset()}, storage + "/killed", config={"marker": marker},
                  failure_config=FailureConfig(max_failures=3))  # room for a slow start on a loaded machine
    assert os.path.exists(marker)  # rank 1 really was killed
    assert max(r["_attempt"] for r in resumed.all_reports) >= 1

    def final(result):
        return {r["rank"]: (r["seen"], r["weights"]) for r in result.all_reports if r.get("done")}

    want, got = final(clean), final(resumed)
    assert sorted(want) == [0, 1]
    for rank in (0, 1):
        assert got[rank][0] == want[rank][0]  # exactly the rows not yet consumed, in the same order
        assert got[rank][1] == want[rank][1]  # bit-identical weights
    assert len(want[0][0]) == 2 * 32 and set(want[0][0]) | set(want[1][0]) == set(range(64))


def test_bad_datasets_argument(storage):
    with pytest.raises(TypeError, match="must be a muster.data Dataset"):
        TorchTrainer(shard_loop, datasets={"train": [1, 2]})
    with pytest.raises(ValueError, match="no dataset named 'nope'"):
        TorchTrainer(shard_loop, datasets={"train": md.range(3)}, dataset_config=DataConfig(datasets_to_split=["nope"]))


def tuned_loop(config):
    it = train.get_dataset_shard("train")
    train.report({"loss": float(sum(float(b["id"].sum()) for b in it.iter_torch_batches(batch_size=8))) * config["k"]})


def test_tuner_trials_get_the_trainers_datasets(storage):
    from muster import tune

    trainer = TorchTrainer(tuned_loop, scaling_config=ScalingConfig(num_workers=1), datasets={"train": md.range(10)})
    grid = tune.Tuner(trainer, param_space={"k": tune.grid_search([1, 2])},
                      tune_config=tune.TuneConfig(metric="loss", mode="min"),
                      run_config=tune.RunConfig(storage_path=storage)).fit()
    assert sorted(r.metrics["loss"] for r in grid) == [45.0, 90.0]


class SwappedShards(DataConfig):
    """Ray's custom-ingest pattern: configure() builds each worker's iterators (here rank r reads shard n-1-r)."""

    def configure(self, datasets, world_size, worker_handles, worker_node_ids, **kwargs):
        assert worker_handles is None and len(worker_node_ids) == world_size
        shards = datasets["train"].streaming_split(world_size, equal=True, locality_hints=worker_node_ids)
        whole = super().configure({"val": datasets["val"]}, world_size, worker_handles, worker_node_ids)
        return [{"train": shards[world_size - 1 - rank], **whole[rank]} for rank in range(world_size)]


def ids_loop():
    rank = train.get_context().get_world_rank()
    got = [r["id"] for r in train.get_dataset_shard("train").iter_rows()]
    train.report({"rank": rank, "ids": got, "val": [r["id"] for r in train.get_dataset_shard("val").iter_rows()]})


def test_a_data_configs_own_configure_decides_the_shards(storage):
    """Before, an overridden configure() was never called: every worker got the default split."""
    result = fit(ids_loop, {"train": md.range(8), "val": md.range(3)}, storage,
                 data_config=SwappedShards(datasets_to_split=["train"]))  # its super().configure: val whole
    by_rank = {r["rank"]: r for r in result.all_reports}
    assert by_rank[0]["ids"] == [1, 3, 5, 7] and by_rank[1]["ids"] == [0, 2, 4, 6]
    assert by_rank[0]["val"] == by_rank[1]["val"] == [0, 1, 2]


class BadConfigure(DataConfig):
    def configure(self, datasets, world_size, worker_handles, worker_node_ids, **kwargs):
        return {"train": datasets["train"]}


def test_a_configure_that_returns_the_wrong_shape_is_named(storage):
    with pytest.raises(Exception, match=r"BadConfigure.configure\(world_size=2\) returned .*return a list of 2 dicts"):
        fit(ids_loop, {"train": md.range(8)}, storage, data_config=BadConfigure())


def order_flag(batch):
    """The preserve_order of the DataContext this batch is made under (in the pipeline's thread)."""
    return {"id": batch["id"], "ordered": [md.DataContext.get_current().preserve_order] * len(batch["id"])}


def options_loop():
    seen = {}
    for name in ("train", "val", "test"):
        it = train.get_dataset_shard(name)
        options = it.get_context().execution_options
        seen[name] = {"options": [options.preserve_order, options.resource_limits.cpu],
                      "made": sorted({bool(r["ordered"]) for r in it.iter_rows()})}
    seen["worker"] = md.DataContext.get_current().preserve_order  # the worker's own context is not changed
    train.report(seen)


def test_per_dataset_execution_options_apply_to_each_dataset(storage):
    """Ray 2.60's DataConfig(execution_options={name: ExecutionOptions(...)}) was refused with a type error;
    each named dataset is iterated under its own options, the others under the workers' default."""
    from muster.data import ExecutionOptions, ExecutionResources

    per_dataset = {"train": ExecutionOptions(preserve_order=False),
                   "val": ExecutionOptions(preserve_order=True, resource_limits=ExecutionResources.for_limits(cpu=3))}
    datasets = {name: md.range(8, override_num_blocks=4).map_batches(order_flag) for name in ("train", "val", "test")}
    result = fit(options_loop, datasets, storage, data_config=DataConfig(execution_options=per_dataset))
    for r in result.all_reports:
        assert r["train"] == {"options": [False, float("inf")], "made": [False]}
        assert r["val"] == {"options": [True, 3], "made": [True]}
        assert r["test"] == {"options": [True, float("inf")], "made": [True]}
        assert r["worker"] is True
    from muster.exceptions import InvalidTypeError

    with pytest.raises(InvalidTypeError, match=r"execution_options\['val'\]=3\): pass Ray's ExecutionOptions"):
        DataConfig(execution_options={"val": 3})
