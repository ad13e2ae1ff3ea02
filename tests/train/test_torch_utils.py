"""muster.train.torch helpers inside real workers: prepare_model, prepare_data_loader, devices, seeding."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import muster.train as train
from muster.train.torch import (
    enable_reproducibility,
    get_device,
    get_devices,
    prepare_data_loader,
    prepare_model,
)


def ddp_loop():
    import torch.distributed as dist

    rank = train.get_context().get_world_rank()
    model = torch.nn.Linear(3, 1)
    if rank == 1:  # DDP must make every rank start from rank 0's weights
        with torch.no_grad():
            model.weight.fill_(5.0)
    wrapped = prepare_model(model)
    start = model.weight.detach().clone()
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.1)
    x = torch.full((2, 3), float(rank + 1))  # different data on each rank
    wrapped(x).sum().backward()
    grad = model.weight.grad.detach().clone()
    opt.step()
    gathered = [torch.zeros(1, 3) for _ in range(2)]
    dist.all_gather(gathered, model.weight.detach())
    train.report(
        {
            "type": type(wrapped).__name__,
            "module_is_original": wrapped.module is model,
            "start": start.flatten().tolist(),
            "grad": grad.flatten().tolist(),
            "weights_equal": bool(torch.equal(gathered[0], gathered[1])),
            "device": str(get_device()),
            "devices": [str(d) for d in get_devices()],
            "param_device": str(next(wrapped.parameters()).device),
        }
    )


def test_prepare_model_wraps_in_ddp_with_two_workers(fit):
    result = fit(ddp_loop, workers=2)
    rows = {r["_rank"]: r for r in result.all_reports}
    assert rows[0]["start"] == rows[1]["start"]  # weights broadcast from rank 0
    for row in rows.values():
        assert row["type"] == "DistributedDataParallel"
        assert row["module_is_original"] is True
        # Gradients averaged over ranks: inputs 1 and 2 per element, batch of 2 -> (2 + 4) / 2 = 3.
        assert row["grad"] == [3.0, 3.0, 3.0]
        assert row["weights_equal"] is True
        assert row["device"] == "cpu" and row["devices"] == ["cpu"] and row["param_device"] == "cpu"


def single_worker_model():
    model = torch.nn.Linear(2, 2)
    prepared = prepare_model(model)
    unwrapped = prepare_model(torch.nn.Linear(2, 2), parallel_strategy=None)
    train.report(
        {
            "same": prepared is model,
            "type": type(prepared).__name__,
            "unwrapped": type(unwrapped).__name__,
            "device": str(get_device()),
        }
    )


def test_prepare_model_with_one_worker_returns_the_model(fit):
    result = fit(single_worker_model, workers=1)
    assert result.metrics["same"] is True
    assert result.metrics["type"] == "Linear" and result.metrics["unwrapped"] == "Linear"
    assert result.metrics["device"] == "cpu"


def test_prepare_model_rejects_unknown_strategy():
    with pytest.raises(ValueError, match="parallel_strategy='deepspeed'.*'ddp', 'fsdp' or None"):
        prepare_model(torch.nn.Linear(1, 1), parallel_strategy="deepspeed")


def test_helpers_in_the_driver_are_single_process():
    model = torch.nn.Linear(1, 1)
    assert prepare_model(model) is model
    assert get_device() == torch.device("cpu")
    assert get_devices() == [torch.device("cpu")]
    loader = DataLoader(TensorDataset(torch.arange(6)), batch_size=2)
    assert [b[0].tolist() for b in prepare_data_loader(loader)] == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(TypeError, match="DataLoader"):
        prepare_data_loader([1, 2, 3])  # type: ignore[arg-type]


def test_prepared_loader_can_be_copied_and_pickled():
    import copy
    import pickle

    prepared = prepare_data_loader(DataLoader(TensorDataset(torch.arange(6)), batch_size=2))
    for clone in (copy.copy(prepared), copy.deepcopy(prepared), pickle.loads(pickle.dumps(prepared))):
        assert type(clone) is type(prepared)
        assert len(clone) == 3 and clone.batch_size == 2
        assert [b[0].tolist() for b in clone] == [[0, 1], [2, 3], [4, 5]]


def loader_loop(config):
    n, batch = config["n"], config["batch"]
    data = TensorDataset(torch.arange(n))

    def one_pass(loader):
        return [int(i) for (b,) in loader for i in b]

    plain = prepare_data_loader(DataLoader(data, batch_size=batch, shuffle=False))
    shuffled = prepare_data_loader(DataLoader(data, batch_size=batch, shuffle=True))
    auto = [one_pass(shuffled), one_pass(shuffled)]  # epoch advances by itself
    shuffled.sampler.set_epoch(0)
    pinned_a = one_pass(shuffled)
    shuffled.sampler.set_epoch(0)
    pinned_b = one_pass(shuffled)
    shuffled.sampler.set_epoch(1)
    pinned_c = one_pass(shuffled)
    train.report(
        {
            "plain": [one_pass(plain), one_pass(plain)],
            "auto": auto,
            "pinned": [pinned_a, pinned_b, pinned_c],
            "len_plain": len(plain),
            "len_shuffled": len(shuffled),
            "sampler": type(plain.sampler).__mro__[1].__name__,
            "batch_shapes": sorted({len(b) for (b,) in plain}),
        }
    )


def test_prepare_data_loader_shards_and_keeps_shuffle(fit):
    n, batch = 40, 3
    result = fit(loader_loop, workers=2, config={"n": n, "batch": batch})
    rows = {r["_rank"]: r for r in result.all_reports}
    per_worker = n // 2
    for row in rows.values():
        assert row["sampler"] == "DistributedSampler"
        assert row["len_plain"] == row["len_shuffled"] == -(-per_worker // batch)  # ceil: 7 batches
        assert row["batch_shapes"] == [2, 3]
        # shuffle=False stays in order, and the same every pass
        assert row["plain"][0] == sorted(row["plain"][0]) and row["plain"][0] == row["plain"][1]
        # shuffle=True stays shuffled, and each pass shuffles anew
        first, second = row["auto"]
        assert len(first) == per_worker and first != sorted(first)
        assert second != first
        # an explicit set_epoch wins: the same epoch gives the same order
        a, b, c = row["pinned"]
        assert a == b and a == first  # epoch 0 is the first pass's epoch
        assert c == second  # and epoch 1 the second's
    # The two workers' shards are disjoint and together cover the dataset, every pass.
    for key, passes in (("plain", 2), ("auto", 2), ("pinned", 3)):
        for p in range(passes):
            shard0, shard1 = rows[0][key][p], rows[1][key][p]
            assert not set(shard0) & set(shard1), (key, p)
            assert sorted(shard0 + shard1) == list(range(n)), (key, p)


class _WhereLoaded(torch.utils.data.Dataset):
    """Item i is (i, the pid of the process that loaded it, the rank train.get_context() gives there)."""

    def __len__(self):
        return 24

    def __getitem__(self, i):
        import os

        return torch.tensor([i, os.getpid(), train.get_context().get_world_rank()])


def loader_with_workers_loop(config):
    import os

    loader = prepare_data_loader(DataLoader(_WhereLoaded(), batch_size=4, num_workers=2, persistent_workers=True))
    passes = []
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        passes.append(torch.cat(list(loader)).tolist())
    train.report({"passes": passes, "pid": os.getpid(), "num_workers": loader.num_workers})


def test_prepared_loader_loads_in_its_worker_processes(fit):
    """A DataLoader with worker processes (forked from the training worker, as on a plain
    torchrun job) keeps them through prepare_data_loader, and they load every rank's shard."""
    result = fit(loader_with_workers_loop, workers=2)
    rows = {r["_rank"]: r for r in result.all_reports}
    for epoch in range(2):
        shards = [[i for i, _, _ in rows[rank]["passes"][epoch]] for rank in (0, 1)]
        assert sorted(shards[0] + shards[1]) == list(range(24)), epoch
    for rank, row in rows.items():
        assert row["num_workers"] == 2
        assert {r for p in row["passes"] for _, _, r in p} == {rank}  # the context works in a loader process
        loaders = {pid for p in row["passes"] for _, pid, _ in p}
        assert len(loaders) == 2 and row["pid"] not in loaders  # persistent: the same two processes both epochs


def seeded_training(config):
    import torch.distributed as dist

    enable_reproducibility(config["seed"])
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1))
    data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    loader = prepare_data_loader(DataLoader(data, batch_size=4, shuffle=True))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(2):
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            for p in model.parameters():  # average gradients by hand (no DDP import cost)
                dist.all_reduce(p.grad)
                p.grad /= dist.get_world_size()
            opt.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    train.report({"weights": flat.tolist(), "deterministic": torch.are_deterministic_algorithms_enabled()})


def test_enable_reproducibility_gives_identical_weights(fit):
    runs = [fit(seeded_training, workers=2, config={"seed": s}, name=f"seed{i}") for i, s in enumerate((7, 7, 8))]
    same_a, same_b, other = (r.metrics["weights"] for r in runs)
    assert runs[0].metrics["deterministic"] is True
    assert same_a == same_b
    assert same_a != other


def test_prepared_loader_is_a_dataloader():
    """Code that checks isinstance(loader, DataLoader) (Lightning, HF) accepts it, as Ray's."""
    from torch.utils.data import DataLoader

    from muster.train.torch import prepare_data_loader

    loader = prepare_data_loader(DataLoader(list(range(10)), batch_size=2))
    assert isinstance(loader, DataLoader)
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    assert loader.batch_size == 2 and len(loader) == 5


def test_nan_metric_stays_a_float(fit):
    import math

    def loop():
        import muster.train as train

        train.report({"loss": float("nan"), "big": float("inf")})

    result = fit(loop, workers=1)
    assert isinstance(result.metrics["loss"], float) and math.isnan(result.metrics["loss"])
    assert result.metrics["big"] == float("inf")
    from muster.train import Result

    again = Result.from_path(result.path)
    assert math.isnan(again.metrics["loss"])
