"""prepare_model(parallel_strategy="fsdp") on CPU/gloo: trains, saves sharded (DCP)
checkpoints from every rank, survives a SIGKILL, and reloads on other world sizes."""

from __future__ import annotations

import os

import pytest
import torch

EPOCHS, STEPS, ROWS = 3, 4, 64


def fsdp_loop(config):
    import signal
    import tempfile

    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
    from torch.distributed.fsdp import FSDPModule

    import muster.train as train
    from muster.train.torch import load_sharded, prepare_model, save_sharded

    ctx = train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    torch.manual_seed(0)
    model = prepare_model(
        nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1)),
        parallel_strategy="fsdp",
        parallel_strategy_kwargs={"shard_modules": (nn.Linear,)},
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    units = sorted(name for name, m in model.named_modules() if isinstance(m, FSDPModule))
    start = 0
    source = config.get("load") or train.get_checkpoint()
    if source:
        start = load_sharded(source, model, opt)["epoch"] + 1
    data = torch.Generator().manual_seed(1)
    X, Y = torch.randn(ROWS, 8, generator=data), torch.randn(ROWS, 1, generator=data)
    X, Y = X[rank::world], Y[rank::world]
    for epoch in range(start, config["epochs"]):
        for step in range(STEPS):
            x, y = X[step::STEPS], Y[step::STEPS]
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
        with tempfile.TemporaryDirectory() as folder:
            ckpt = save_sharded(folder, model, opt, extra={"epoch": epoch})
            files = sorted(os.listdir(folder))
            train.report({"epoch": epoch, "loss": loss.item(), "files": files, "units": units}, checkpoint=ckpt)
        if ctx.get_attempt() == 0 and epoch == config.get("kill_after") and rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
    full = StateDictOptions(full_state_dict=True, cpu_offload=True, flatten_optimizer_state_dict=True)
    model_sd, optim_sd = get_state_dict(model, opt, options=full)
    if rank == 0:
        torch.save({"model": model_sd, "optim": optim_sd, "start": start, "world": world}, config["out"])
    dist.barrier()


def assert_same_state(a: dict, b: dict) -> None:
    for part in ("model", "optim"):
        assert a[part].keys() == b[part].keys(), part
        for key, value in a[part].items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(value, b[part][key]), f"{part}[{key}] differs"
            else:
                assert value == b[part][key], f"{part}[{key}] differs"


def test_fsdp_run_killed_mid_training_resumes_to_the_same_weights(trainer, tmp_path):
    clean = trainer(fsdp_loop, {"epochs": EPOCHS, "out": str(tmp_path / "clean.pt")}, name="clean").fit()
    killed = trainer(fsdp_loop, {"epochs": EPOCHS, "out": str(tmp_path / "killed.pt"), "kill_after": 1},
                     name="killed", max_failures=1).fit()

    rows = killed.all_reports
    assert sorted((r["_attempt"], r["_rank"], r["epoch"]) for r in rows) == [
        (0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (1, 0, 2), (1, 1, 2)
    ]
    # Every rank wrote only its own shard; rank 0 the index and the extra values.
    by_rank = {r["_rank"]: r["files"] for r in rows}
    assert by_rank == {0: [".metadata", "__0_0.distcp", "extra.pt"], 1: ["__1_0.distcp"]}
    assert rows[0]["units"] == ["", "0", "2"]  # the root and each Linear are FSDP units
    committed = sorted(os.listdir(killed.checkpoint.path))
    assert {".metadata", "__0_0.distcp", "__1_0.distcp", "extra.pt"} <= set(committed)

    a, b = torch.load(tmp_path / "clean.pt"), torch.load(tmp_path / "killed.pt")
    assert b["start"] == 2  # the new gang loaded epoch 1's sharded checkpoint
    assert_same_state(a, b)
    assert clean.metrics["loss"] == killed.metrics["loss"]


@pytest.mark.parametrize("workers", [1, 3])
def test_sharded_checkpoint_reloads_on_another_world_size(trainer, tmp_path, workers):
    saved = trainer(fsdp_loop, {"epochs": 1, "out": str(tmp_path / "saved.pt")}, name="saved").fit()
    config = {"epochs": 1, "out": str(tmp_path / "loaded.pt"), "load": saved.checkpoint.path}
    trainer(fsdp_loop, config, workers=workers, name="loaded").fit()
    a, b = torch.load(tmp_path / "saved.pt"), torch.load(tmp_path / "loaded.pt")
    assert (a["world"], b["world"], b["start"]) == (2, workers, 1)
    assert_same_state(a, b)  # the model and every Adam moment, resharded from 2 to `workers`


def test_fsdp1_arguments_are_refused_with_their_fsdp2_equivalent():
    from muster.train.torch.fsdp import shard_model

    with pytest.raises(ValueError, match=r"sharding_strategy: use reshard_after_forward=True"):
        shard_model(torch.nn.Linear(2, 2), torch.device("cpu"), {"sharding_strategy": "FULL_SHARD"})
    with pytest.raises(ValueError, match="shard_modules"):
        shard_model(torch.nn.Linear(2, 2), torch.device("cpu"), {"shard_modules": ["Linear"]})


def test_load_sharded_names_a_folder_without_an_index(tmp_path):
    from muster.train.torch import load_sharded

    with pytest.raises(ValueError, match=r"no torch.distributed.checkpoint index \(.metadata\).*save_sharded"):
        load_sharded(str(tmp_path), torch.nn.Linear(2, 2))
