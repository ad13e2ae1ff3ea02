"""A run killed at random steps (mid-epoch included) ends bit-for-bit equal to an uninterrupted one."""

from __future__ import annotations

import os
import random

import pytest
import torch

from muster.train import FailureConfig, RunConfig, ScalingConfig
from muster.train.torch import TorchTrainer

EPOCHS, BATCH, ROWS, EVERY = 3, 4, 96, 3  # 12 batches per rank per epoch, a checkpoint every 3 steps


def loop(config):
    import signal
    import tempfile

    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    import muster.train as train
    from muster.train import Checkpoint
    from muster.train.torch import prepare_data_loader, prepare_model

    torch.manual_seed(0)
    data = torch.Generator().manual_seed(1)
    X, Y = torch.randn(ROWS, 8, generator=data), torch.randn(ROWS, 1, generator=data)
    model = prepare_model(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 1)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    loader = prepare_data_loader(DataLoader(TensorDataset(X, Y), batch_size=BATCH, shuffle=True))
    ctx = train.get_context()
    start_epoch, step = 0, 0
    ckpt = train.get_checkpoint()
    if ckpt:
        with ckpt.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"))
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start_epoch, step = state["epoch"], state["step"]
    crash_at = config["crash_steps"][ctx.get_attempt()] if ctx.get_attempt() < len(config["crash_steps"]) else None
    for epoch in range(start_epoch, EPOCHS):
        for x, y in loader:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            step += 1
            if step % EVERY == 0:
                if ctx.get_world_rank() == 0:
                    with tempfile.TemporaryDirectory() as d:
                        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch,
                                    "step": step}, os.path.join(d, "state.pt"))
                        train.report({"loss": loss.item(), "step": step}, checkpoint=Checkpoint.from_directory(d))
                else:
                    train.report({"loss": loss.item(), "step": step})
            if step == crash_at and ctx.get_world_rank() == config["crash_rank"]:
                os.kill(os.getpid(), signal.SIGKILL)
    if ctx.get_world_rank() == 0:
        torch.save(model.module.state_dict(), config["out"])


def _fit(storage, name, out, crash_steps, crash_rank=1):
    return TorchTrainer(
        loop,
        train_loop_config={"out": out, "crash_steps": crash_steps, "crash_rank": crash_rank},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name=name, storage_path=storage,
                             failure_config=FailureConfig(max_failures=len(crash_steps))),
    ).fit()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", [7])
def test_killed_run_matches_uninterrupted_bit_for_bit(storage, tmp_path, seed):
    steps_per_epoch = ROWS // 2 // BATCH
    total = steps_per_epoch * EPOCHS
    rng = random.Random(seed)
    # Crashes land between checkpoints (never on one), in different epochs, mid-epoch included.
    candidates = [s for s in range(EVERY + 1, total) if s % EVERY and s % steps_per_epoch]
    crash_steps = sorted(rng.sample(candidates, 3))
    print("crash steps:", crash_steps)

    clean = _fit(storage, "clean", str(tmp_path / "clean.pt"), [])
    crashed = _fit(storage, "crashed", str(tmp_path / "crashed.pt"), crash_steps, crash_rank=1)

    a, b = torch.load(tmp_path / "clean.pt"), torch.load(tmp_path / "crashed.pt")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), f"{key} differs after resume (crash steps {crash_steps})"
    attempts = {r["_attempt"] for r in crashed.all_reports}
    assert attempts == {0, 1, 2, 3}  # it really did crash three times
    assert clean.metrics["step"] == crashed.metrics["step"] == total


def test_resumed_loader_skips_consumed_batches(storage, tmp_path):
    """After a mid-epoch restart, the loader yields only batches not yet consumed, by index."""

    def record(config):
        import json
        import signal
        import time

        from torch.utils.data import DataLoader

        import muster.train as train
        from muster.train import Checkpoint
        from muster.train.torch import prepare_data_loader

        ctx = train.get_context()
        loader = prepare_data_loader(DataLoader(list(range(40)), batch_size=2, shuffle=True))
        seen = []
        for i, batch in enumerate(loader):
            seen.extend(batch.tolist())
            if i == 3:
                d = os.path.join(config["dir"], f"ck{ctx.get_attempt()}_{ctx.get_world_rank()}")
                os.makedirs(d, exist_ok=True)
                train.report({"i": i}, checkpoint=Checkpoint.from_directory(d) if ctx.get_world_rank() == 0 else None)
                if ctx.get_world_rank() == 0:  # the round is whole once both reports returned
                    open(os.path.join(config["dir"], f"reported_{ctx.get_attempt()}"), "w").close()
            if ctx.get_attempt() == 0 and i == 6 and ctx.get_world_rank() == 1:
                marker = os.path.join(config["dir"], "reported_0")
                for _ in range(3000):  # bounded: rank 0's report() must have returned before the kill
                    if os.path.exists(marker):
                        break
                    time.sleep(0.01)
                os.kill(os.getpid(), signal.SIGKILL)
        with open(os.path.join(config["dir"], f"seen_{ctx.get_attempt()}_{ctx.get_world_rank()}.json"), "w") as f:
            json.dump(seen, f)

    TorchTrainer(
        record, train_loop_config={"dir": str(tmp_path)}, scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=storage, failure_config=FailureConfig(max_failures=1)),
    ).fit()
    import json

    for rank in (0, 1):
        resumed = json.load(open(tmp_path / f"seen_1_{rank}.json"))
        assert len(resumed) == 20 - 4 * 2  # 10 batches of 2 per rank, 4 consumed before the checkpoint
    both = json.load(open(tmp_path / "seen_1_0.json")) + json.load(open(tmp_path / "seen_1_1.json"))
    assert len(set(both)) == len(both) == 24  # disjoint shards, nothing repeated
