"""Mixed precision (accelerate / prepare_optimizer / backward) and gradient
accumulation with no_sync, on 2 CPU workers (gloo)."""

from __future__ import annotations

import pytest
import torch


def amp_loop():
    import torch.nn as nn

    import muster.train as train
    from muster.train.torch import accelerate, backward, prepare_model, prepare_optimizer

    accelerate(amp=True)
    try:
        accelerate(amp=True)
        twice = "accepted"
    except RuntimeError as exc:
        twice = str(exc)
    torch.manual_seed(0)
    model = prepare_model(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1)))
    inner_dtypes = []
    model.module[0].register_forward_hook(lambda _m, _i, out: inner_dtypes.append(out.dtype))
    raw = torch.optim.SGD(model.parameters(), lr=0.05)
    opt = prepare_optimizer(raw)
    data = torch.Generator().manual_seed(1)
    X = torch.randn(64, 8, generator=data)
    Y = X.sum(dim=1, keepdim=True)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        out = model(X)
        loss = torch.nn.functional.mse_loss(out, Y)
        backward(loss)
        opt.step()
        losses.append(loss.item())
    train.report({
        "out_dtype": str(out.dtype), "inner_dtype": str(inner_dtypes[0]),
        "param_dtype": str(next(model.parameters()).dtype),
        "same_optimizer": opt is raw, "first": losses[0], "last": losses[-1], "twice": twice,
    })


def test_amp_runs_the_forward_in_bfloat16_on_cpu(trainer):
    result = trainer(amp_loop, None).fit()
    m = result.metrics
    assert m["inner_dtype"] == "torch.bfloat16"  # layers inside the model ran under autocast
    assert m["out_dtype"] == "torch.float32" and m["param_dtype"] == "torch.float32"
    assert m["same_optimizer"] is True  # bfloat16 needs no GradScaler
    assert m["last"] < m["first"] / 4, m
    assert "already called" in m["twice"]


def test_accelerate_rejects_a_non_16_bit_dtype():
    from muster.train.torch import amp

    with pytest.raises(ValueError, match=r"amp_dtype=torch.float32"):
        amp.accelerate(amp=True, amp_dtype=torch.float32)


MICRO, ACCUM = 2, 3  # rows per micro-batch, micro-batches per optimizer step


def accumulate_loop(config):
    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.tensor import DTensor

    import muster.train as train
    from muster.train.torch import no_sync, prepare_model

    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    reference = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    reference.load_state_dict(base.state_dict())
    model = prepare_model(base, parallel_strategy=config["strategy"])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(2)
    X, Y = torch.randn(world * ACCUM * MICRO, 4, generator=data), torch.randn(world * ACCUM * MICRO, 1, generator=data)

    def micro(i):  # this rank's i-th micro-batch
        rows = slice((rank * ACCUM + i) * MICRO, (rank * ACCUM + i + 1) * MICRO)
        return X[rows], Y[rows]

    def local_grad():
        g = model.module[0].weight.grad if config["strategy"] == "ddp" else None
        return g.clone() if g is not None else None

    differ_inside = None
    for i in range(ACCUM):
        x, y = micro(i)
        if i < ACCUM - 1:
            with no_sync(model):  # forward and backward inside: DDP decides in forward whether to sync
                (torch.nn.functional.mse_loss(model(x), y) / ACCUM).backward()
            g = local_grad()
            if g is not None:
                both = [torch.zeros_like(g) for _ in range(world)]
                dist.all_gather(both, g)
                differ_inside = not torch.equal(both[0], both[1])
        else:
            (torch.nn.functional.mse_loss(model(x), y) / ACCUM).backward()
    opt.step()
    # One big batch on one process: every rank's micro-batches at once.
    torch.nn.functional.mse_loss(reference(X), Y).backward()
    torch.optim.SGD(reference.parameters(), lr=0.1).step()
    ref = dict(reference.named_parameters())
    err = 0.0
    for name, p in model.named_parameters():
        full = p.full_tensor() if isinstance(p, DTensor) else p
        err = max(err, (full.detach() - ref[name.removeprefix("module.")].detach()).abs().max().item())
    train.report({"max_err": err, "differ_inside": differ_inside})


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_accumulating_with_no_sync_equals_one_big_batch(trainer, strategy):
    result = trainer(accumulate_loop, {"strategy": strategy}).fit()
    ranks = [r for r in result.all_reports]
    assert len(ranks) == 2
    for row in ranks:
        assert row["max_err"] < 1e-6, row
        if strategy == "ddp":
            assert row["differ_inside"] is True  # inside no_sync each rank kept its own gradient
