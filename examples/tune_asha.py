"""Hyperparameter search with early stopping: the seed's "Workflow 3", run with muster.

A ``TorchTrainer`` (2 DDP workers per trial) is tuned over a log-uniform
learning rate and a choice of batch sizes; ``ASHAScheduler`` stops trials
whose loss lags at each rung, so the good ones get the compute.  As in the
seed, ``param_space`` names the hyperparameters at the top level (muster puts
them under ``train_loop_config``, where Ray wants them).

Trials are packed onto this machine's CPUs: each needs its whole gang of 2
workers, and a trial starts only when all of it fits.

Run it::

    python examples/tune_asha.py                      # ~30-60 s on 2 cores
    python examples/tune_asha.py --num-samples 4 --epochs 4 --storage-path /tmp/runs
"""

import argparse
import os
import tempfile

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import muster
from muster import train, tune  # was: from ray import train, tune
from muster.train import Checkpoint, ScalingConfig
from muster.train.torch import TorchTrainer
from muster.tune.schedulers import (
    ASHAScheduler,  # was: from ray.tune.schedulers import ASHAScheduler
)

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--num-samples", type=int, default=8)
parser.add_argument("--epochs", type=int, default=8)
parser.add_argument("--num-workers", type=int, default=2)
parser.add_argument("--storage-path", default=None)
args = parser.parse_args()


def make_data(n=2048, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=g)
    w = torch.randn(16, 1, generator=g)
    return TensorDataset(x, x @ w + 0.1 * torch.randn(n, 1, generator=g))


def train_func(config):
    # Use hyperparameters from config
    lr = config["lr"]
    batch_size = config["batch_size"]

    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    start = 0
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"))
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1

    model = train.torch.prepare_model(model)
    loader = train.torch.prepare_data_loader(DataLoader(make_data(), batch_size=batch_size, shuffle=True))
    loss_fn = nn.MSELoss()

    for epoch in range(start, config["epochs"]):
        total, n = 0.0, 0
        for x, y in loader:
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total, n = total + loss.item() * len(x), n + len(x)
        metrics = {"loss": total / n, "epoch": epoch}
        if train.get_context().get_world_rank() == 0:
            with tempfile.TemporaryDirectory() as d:
                torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                            "epoch": epoch}, os.path.join(d, "state.pt"))
                train.report(metrics, checkpoint=Checkpoint.from_directory(d))
        else:
            train.report(metrics)


# Define search space
param_space = {
    "lr": tune.loguniform(1e-4, 1e-1),
    "batch_size": tune.choice([32, 64, 128]),
    "epochs": args.epochs,
}

# Run the trials with early stopping
tuner = tune.Tuner(
    TorchTrainer(train_func, scaling_config=ScalingConfig(num_workers=args.num_workers)),
    param_space=param_space,
    tune_config=tune.TuneConfig(
        num_samples=args.num_samples,
        scheduler=ASHAScheduler(metric="loss", mode="min", max_t=args.epochs, grace_period=1, reduction_factor=2),
    ),
    run_config=tune.RunConfig(storage_path=args.storage_path),
)

results = tuner.fit()
best = results.get_best_result(metric="loss", mode="min")
print(f"Best hyperparameters: {best.config}")
print(f"Best loss: {best.metrics['loss']:.4f} after {best.metrics['training_iteration']} epochs")
epochs_run = sum(r.metrics["training_iteration"] for r in results)
print(f"Epochs run: {epochs_run} of {args.num_samples * args.epochs} "
      f"({len(results)} trials, {results.num_errors} errors); best checkpoint: {best.checkpoint.path}")
muster.shutdown()
