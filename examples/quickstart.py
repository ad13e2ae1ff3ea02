"""Quickstart: Ray Train's "distributed PyTorch" tutorial, run with muster.

This is Steps 2 and 3 of the Ray Cluster tutorial with ``ray`` replaced by
``muster`` in the imports -- the training function itself is unchanged:
an ``nn.Linear`` model wrapped by ``prepare_model`` (DDP), a DataLoader
sharded by ``prepare_data_loader``, and ``train.report`` once per epoch.
It runs on 2 CPU workers of this machine; no cluster, no daemon.

Two small changes from the tutorial, both outside the ported code path:

* the targets are a fixed linear function of the inputs plus noise (the
  tutorial uses pure noise), so the loss visibly falls; the data is seeded so
  every worker builds the same dataset and gets its own shard of it;
* the tutorial's ``ray.init(address="auto")`` (connect to a running cluster)
  is dropped: muster starts its embedded engine on first use.

Run it::

    python examples/quickstart.py                  # ~10-20 s on 2 cores
    python examples/quickstart.py --epochs 3 --storage-path /tmp/muster_runs

The script has no ``if __name__ == "__main__":`` guard, exactly like the
tutorial: muster's workers never re-import the driver script.
"""

import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from muster import train  # was: from ray import train
from muster.train import RunConfig, ScalingConfig  # was: from ray.train import ScalingConfig
from muster.train.torch import TorchTrainer  # was: from ray.train.torch import TorchTrainer

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--num-workers", type=int, default=2)
parser.add_argument("--storage-path", default=None, help="where runs are stored (default ~/muster_results)")
parser.add_argument("--num-samples", type=int, default=20_000)
args = parser.parse_args()


def train_loop_per_worker(config):
    # muster handles process group init -- no manual dist.init_process_group needed
    model = nn.Linear(config["input_size"], config["output_size"])

    # Wrap model for distributed training across workers
    model = train.torch.prepare_model(model)

    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    loss_fn = nn.MSELoss()

    # Same seed on every worker -> same dataset; prepare_data_loader gives each worker its shard.
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(config["num_samples"], config["input_size"], generator=gen)
    true_w = torch.randn(config["input_size"], config["output_size"], generator=gen) / config["input_size"] ** 0.5
    y = X @ true_w + 0.1 * torch.randn(config["num_samples"], config["output_size"], generator=gen)
    dataset = TensorDataset(X, y)
    loader = DataLoader(dataset, batch_size=config["batch_size"])
    loader = train.torch.prepare_data_loader(loader)  # Distributes batches

    for epoch in range(config["epochs"]):
        total_loss = 0
        for batch_X, batch_y in loader:
            optimizer.zero_grad()
            pred = model(batch_X)
            loss = loss_fn(pred, batch_y)
            loss.backward()
            optimizer.step()
            total_loss += loss.item()

        # Report metrics back to the driver -- shown live in the terminal
        train.report({"loss": total_loss / len(loader), "epoch": epoch})


trainer = TorchTrainer(
    train_loop_per_worker=train_loop_per_worker,
    train_loop_config={
        "input_size": 128,
        "output_size": 10,
        "lr": 1e-3,
        "batch_size": 64,
        "epochs": args.epochs,
        "num_samples": args.num_samples,
    },
    scaling_config=ScalingConfig(
        num_workers=args.num_workers,
        use_gpu=False,  # CPU workers; the tutorial's GPU version sets use_gpu=True
    ),
    # On a terminal muster draws a live panel; in a log (or with MUSTER_PLAIN_PROGRESS=1)
    # verbose=2 prints one line per report instead of one every 5 s.
    run_config=RunConfig(storage_path=args.storage_path, verbose=2),
)

result = trainer.fit()
print(f"Final loss: {result.metrics['loss']:.4f}")
print(f"Epochs run: {result.metrics['epoch'] + 1}, results in {result.path}")
