"""FSDP, mixed precision and gradient accumulation, with sharded checkpoints and a resume.

``prepare_model(parallel_strategy="fsdp")`` shards a small transformer across
the workers (FSDP2; each encoder layer is its own unit), ``accelerate(amp=True)``
runs its forward pass in bfloat16 on CPU (float16 + GradScaler on CUDA), and
``no_sync`` accumulates gradients over micro-batches. Every epoch each rank
writes only its shard with ``save_sharded`` and reports it; muster merges
them into one checkpoint. Rank 1 is killed once after epoch 1 and the new
gang reloads the shards with ``load_sharded`` — which also works on a
different number of workers (``--num-workers``).

Run it::

    python examples/fsdp_sharded.py
    python examples/fsdp_sharded.py --epochs 4 --no-crash --storage-path /tmp/muster_runs
"""

import argparse
import contextlib
import os
import signal
import tempfile

import torch
import torch.nn as nn

from muster import train
from muster.train import FailureConfig, RunConfig, ScalingConfig
from muster.train.torch import (
    TorchTrainer,
    accelerate,
    backward,
    load_sharded,
    no_sync,
    prepare_data_loader,
    prepare_model,
    prepare_optimizer,
    save_sharded,
)

ACCUMULATE = 2  # micro-batches per optimizer step


class Classifier(nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        self.embed = nn.Linear(4, dim)
        layer = nn.TransformerEncoderLayer(dim, nhead=4, dim_feedforward=64, batch_first=True, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2)
        self.head = nn.Linear(dim, 2)

    def forward(self, x):
        return self.head(self.encoder(self.embed(x)).mean(dim=1))


def train_func(config):
    accelerate(amp=True)
    model = prepare_model(
        Classifier(),
        parallel_strategy="fsdp",
        parallel_strategy_kwargs={"shard_modules": (nn.TransformerEncoderLayer,)},
    )
    optimizer = prepare_optimizer(torch.optim.AdamW(model.parameters(), lr=3e-3))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1024, 8, 4, generator=g)
    y = (x[:, :, 0].sum(dim=1) > 0).long()  # the class: is the sum of feature 0 positive?
    loader = prepare_data_loader(
        torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16, shuffle=True)
    )
    ctx = train.get_context()
    start = 0
    checkpoint = train.get_checkpoint()
    if checkpoint:
        start = load_sharded(checkpoint, model, optimizer)["epoch"] + 1
        if ctx.get_world_rank() == 0:
            print(f"Resumed from {checkpoint} on {ctx.get_world_size()} workers, at epoch {start}", flush=True)
    for epoch in range(start, config["epochs"]):
        correct = seen = 0
        for i, (xb, yb) in enumerate(loader):
            step_now = (i + 1) % ACCUMULATE == 0
            with no_sync(model) if not step_now else contextlib.nullcontext():
                logits = model(xb)
                backward(nn.functional.cross_entropy(logits, yb) / ACCUMULATE)
            if step_now:
                optimizer.step()
                optimizer.zero_grad()
            correct += (logits.argmax(dim=1) == yb).sum().item()
            seen += len(yb)
        with tempfile.TemporaryDirectory() as folder:
            ckpt = save_sharded(folder, model, optimizer, extra={"epoch": epoch})
            train.report({"epoch": epoch, "accuracy": correct / seen}, checkpoint=ckpt)
        if config["crash"] and ctx.get_attempt() == 0 and epoch == 1 and ctx.get_world_rank() == 1:
            print("Killing rank 1 with SIGKILL after epoch 1", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--no-crash", action="store_true", help="do not kill a worker")
    parser.add_argument("--storage-path", default=None, help="where runs are stored (default ~/muster_results)")
    args = parser.parse_args()

    result = TorchTrainer(
        train_func,
        train_loop_config={"epochs": args.epochs, "crash": not args.no_crash},
        scaling_config=ScalingConfig(num_workers=args.num_workers),
        run_config=RunConfig(storage_path=args.storage_path, failure_config=FailureConfig(max_failures=1)),
    ).fit()
    print(f"Final accuracy (rank 0's shard): {result.metrics['accuracy']:.3f}")
    print(f"Sharded checkpoint: {sorted(os.listdir(result.checkpoint.path))}")
