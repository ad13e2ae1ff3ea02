"""Ray's ``ray.train.examples.pytorch.torch_linear_example``: fit ``y = 2x + 5`` with a linear model.

The data is generated, so nothing is downloaded. Ray's docs import ``train_func`` from here (often as
``linear_train_func``) to give a ``TorchTrainer`` or a ``Tuner`` something real to run; the names and
config keys are Ray's:

* ``train_func(config)``: the training function. Config keys ``data_size`` (1000), ``val_size`` (400),
  ``batch_size`` (32), ``hidden_size`` (1), ``lr`` (0.01), ``epochs`` (3). Each epoch it reports
  ``{"loss": validation loss}`` with a checkpoint holding ``model.pt`` (the model's state dict), and
  it returns the list of what it reported.
* ``train_linear(num_workers=2, use_gpu=False, epochs=3, storage_path=None)``: run it on a
  ``TorchTrainer`` and return the final metrics.
* ``LinearDataset(a, b, size=1000)``, ``train_epoch``, ``validate_epoch``: its pieces.

Run it as ``python -m muster.train.examples.pytorch.torch_linear_example --num-workers 2``.
"""

from __future__ import annotations

import argparse
import copy
import os
import tempfile
from typing import Any

import torch
import torch.nn as nn

import muster.train as train
from muster.train import Checkpoint, RunConfig, ScalingConfig
from muster.train.torch import TorchTrainer, prepare_data_loader, prepare_model


class LinearDataset(torch.utils.data.Dataset):
    """``size`` evenly spaced points ``x`` in [0, 10) with targets ``y = a * x + b`` (float32, shape (1,))."""

    def __init__(self, a: float, b: float, size: int = 1000):
        self.x = torch.linspace(0.0, 10.0, size + 1, dtype=torch.float32)[:size]
        self.y = a * self.x + b

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index].reshape(1), self.y[index].reshape(1)


def train_epoch(epoch: int, dataloader: Any, model: nn.Module, loss_fn: nn.Module, optimizer: Any) -> None:
    """One pass over ``dataloader``, stepping ``optimizer`` after each batch."""
    set_epoch = getattr(getattr(dataloader, "sampler", None), "set_epoch", None)
    if train.get_context().get_world_size() > 1 and set_epoch is not None:
        set_epoch(epoch)
    model.train()
    for inputs, targets in dataloader:
        loss = loss_fn(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def validate_epoch(dataloader: Any, model: nn.Module, loss_fn: nn.Module) -> tuple[dict[str, Any], float]:
    """The model's state dict (a copy, on the CPU) and its mean loss per batch over ``dataloader``."""
    model.eval()
    total, batches = 0.0, 0
    with torch.no_grad():
        for inputs, targets in dataloader:
            total += loss_fn(model(inputs), targets).item()
            batches += 1
    state = copy.deepcopy(model).cpu().state_dict()
    return state, total / max(batches, 1)


def train_func(config: dict[str, Any]) -> list[dict[str, float]]:
    """The training function (see the module's docstring for its config keys)."""
    batch_size = config.get("batch_size", 32)
    train_loader = prepare_data_loader(torch.utils.data.DataLoader(
        LinearDataset(2, 5, size=config.get("data_size", 1000)), batch_size=batch_size))
    val_loader = prepare_data_loader(torch.utils.data.DataLoader(
        LinearDataset(2, 5, size=config.get("val_size", 400)), batch_size=batch_size))
    model = prepare_model(nn.Linear(1, config.get("hidden_size", 1)))
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=config.get("lr", 1e-2))
    reported = []
    for epoch in range(config.get("epochs", 3)):
        train_epoch(epoch, train_loader, model, loss_fn, optimizer)
        state, loss = validate_epoch(val_loader, model, loss_fn)
        metrics = {"loss": loss}
        reported.append(metrics)
        with tempfile.TemporaryDirectory() as folder:
            torch.save(state, os.path.join(folder, "model.pt"))
            train.report(metrics, checkpoint=Checkpoint.from_directory(folder))
    return reported


def train_linear(num_workers: int = 2, use_gpu: bool = False, epochs: int = 3,
                 storage_path: str | None = None) -> dict[str, Any] | None:
    """Train with ``train_func`` on a ``TorchTrainer`` of ``num_workers``; print and return the final metrics."""
    trainer = TorchTrainer(
        train_loop_per_worker=train_func,
        train_loop_config={"lr": 1e-2, "hidden_size": 1, "batch_size": 4, "epochs": epochs},
        scaling_config=ScalingConfig(num_workers=num_workers, use_gpu=use_gpu),
        run_config=RunConfig(storage_path=storage_path),
    )
    result = trainer.fit()
    print(result.metrics)
    return result.metrics


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Fit y = 2x + 5 on a TorchTrainer (Ray's torch_linear_example).")
    parser.add_argument("--address", type=str, default=None, help="a cluster to connect to (muster.init(address=))")
    parser.add_argument("--num-workers", "-n", type=int, default=2, help="number of training workers")
    parser.add_argument("--use-gpu", action="store_true", help="train on GPUs")
    parser.add_argument("--epochs", type=int, default=3, help="number of epochs")
    parser.add_argument("--smoke-test", action="store_true", help="a quick run: 2 workers, 3 epochs")
    args, _ = parser.parse_known_args(argv)
    if args.address:
        import muster

        muster.init(address=args.address)
    if args.smoke_test:
        train_linear()
    else:
        train_linear(num_workers=args.num_workers, use_gpu=args.use_gpu, epochs=args.epochs)


if __name__ == "__main__":
    main()
