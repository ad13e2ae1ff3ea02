"""A small CNN image classifier with validation and best-checkpoint retention.

The "Distributed Training with Ray Train" recipe (train_func with
``get_device``/``prepare_model``/``prepare_data_loader``, checkpoints via
``Checkpoint.from_dict``, ``CheckpointConfig`` keeping the best by
``val_loss``) ported to muster by changing the imports, on data that needs
no download: 28x28 single-channel images of 10 classes, each class a fixed
random template plus noise.  Every epoch reports the training loss, the
validation loss and accuracy (summed over all workers' validation shards),
and a checkpoint; muster keeps the 2 with the lowest ``val_loss`` (plus the
latest).  At the end the best checkpoint is loaded back in this process and
evaluated again.

Run it::

    python examples/cnn_classifier.py                  # 6 epochs, 2 workers
    python examples/cnn_classifier.py --epochs 2 --num-workers 1 --storage-path /tmp/muster_runs
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import muster.train  # was: import ray.train
from muster.train import Checkpoint, CheckpointConfig, RunConfig, ScalingConfig  # was: from ray.train import ...
from muster.train.torch import TorchTrainer, get_device, prepare_data_loader, prepare_model  # was: ray.train.torch

NUM_CLASSES = 10


class SmallCNN(nn.Module):
    def __init__(self, num_classes=NUM_CLASSES):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, kernel_size=3, padding=1)  # 28x28 -> pool -> 14x14
        self.conv2 = nn.Conv2d(8, 16, kernel_size=3, padding=1)  # 14x14 -> pool -> 7x7
        self.fc1 = nn.Linear(16 * 7 * 7, 64)
        self.fc2 = nn.Linear(64, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def synthetic_images(num_samples, noise, seed):
    """Images of class c are template[c] + Gaussian noise; the templates are the same for every call."""
    templates = torch.randn(NUM_CLASSES, 1, 28, 28, generator=torch.Generator().manual_seed(1234))
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, NUM_CLASSES, (num_samples,), generator=gen)
    images = templates[labels] + noise * torch.randn(num_samples, 1, 28, 28, generator=gen)
    return TensorDataset(images, labels)


def build_dataloaders(config):
    train_set = synthetic_images(config["train_samples"], config["noise"], seed=0)
    val_set = synthetic_images(config["val_samples"], config["noise"], seed=1)
    return (
        DataLoader(train_set, batch_size=config["batch_size"], shuffle=True),
        DataLoader(val_set, batch_size=256),
    )


def evaluate(model, loader, device):
    """(sum of losses, number correct, number seen) over this worker's part of ``loader``."""
    model.eval()
    totals = torch.zeros(3)
    with torch.no_grad():
        for inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            outputs = model(inputs)
            totals[0] += F.cross_entropy(outputs, targets, reduction="sum").item()
            totals[1] += (outputs.argmax(dim=1) == targets).sum().item()
            totals[2] += len(targets)
    model.train()
    return totals


def train_func(config):
    torch.manual_seed(0)
    model = SmallCNN()
    model = model.to(get_device())
    model = prepare_model(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])

    start_epoch = 0
    checkpoint = muster.train.get_checkpoint()  # set when the run is resumed or restarted
    if checkpoint:
        state = checkpoint.to_dict()
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch = state["epoch"] + 1

    train_loader, val_loader = build_dataloaders(config)
    train_loader = prepare_data_loader(train_loader)
    val_loader = prepare_data_loader(val_loader)  # each worker validates its own shard

    for epoch in range(start_epoch, config["epochs"]):
        running_loss = 0.0
        for batch in train_loader:
            inputs, targets = batch
            inputs = inputs.to(get_device())
            targets = targets.to(get_device())
            optimizer.zero_grad()
            outputs = model(inputs)
            loss = torch.nn.functional.cross_entropy(outputs, targets)
            loss.backward()
            optimizer.step()
            running_loss += loss.item()

        # Validation over the whole set: add up every worker's shard.
        totals = evaluate(model, val_loader, get_device())
        if torch.distributed.is_initialized():
            torch.distributed.all_reduce(totals)
        val_loss, accuracy = (totals[0] / totals[2]).item(), (totals[1] / totals[2]).item()

        muster.train.report(
            {"loss": running_loss / len(train_loader), "val_loss": val_loss, "accuracy": accuracy, "epoch": epoch},
            checkpoint=Checkpoint.from_dict({
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "epoch": epoch,
            }),
        )


def unwrap_state_dict(state_dict):
    """The model was saved from inside DistributedDataParallel: drop the ``module.`` prefix."""
    return {k.removeprefix("module."): v for k, v in state_dict.items()}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--storage-path", default=None, help="where runs are stored (default ~/muster_results)")
    parser.add_argument("--train-samples", type=int, default=4000)
    parser.add_argument("--val-samples", type=int, default=1000)
    parser.add_argument("--noise", type=float, default=2.5, help="noise std; the templates have std 1")
    args = parser.parse_args()

    config = {
        "lr": 1e-3,
        "epochs": args.epochs,
        "batch_size": 64,
        "train_samples": args.train_samples,
        "val_samples": args.val_samples,
        "noise": args.noise,
    }
    trainer = TorchTrainer(
        train_loop_per_worker=train_func,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=args.num_workers, use_gpu=False),
        run_config=RunConfig(
            storage_path=args.storage_path,
            checkpoint_config=CheckpointConfig(
                num_to_keep=2,
                checkpoint_score_attribute="val_loss",
                checkpoint_score_order="min",
            ),
            verbose=2,
        ),
    )
    result = trainer.fit()

    print(f"Final: loss={result.metrics['loss']:.4f} val_loss={result.metrics['val_loss']:.4f} "
          f"accuracy={result.metrics['accuracy']:.3f} (chance: {1 / NUM_CLASSES:.3f})")
    print("Checkpoints kept (best val_loss first):")
    for ckpt, metrics in result.best_checkpoints:
        print(f"  epoch {metrics['epoch']}: val_loss={metrics['val_loss']:.4f} "
              f"accuracy={metrics['accuracy']:.3f}  {ckpt.path}")

    best = result.get_best_checkpoint(metric="val_loss", mode="min")
    print(f"Best checkpoint: {best}")

    # Load it back here, outside the workers, and check it on the validation set.
    state = best.to_dict()
    model = SmallCNN()
    model.load_state_dict(unwrap_state_dict(state["model"]))
    val_loader = build_dataloaders(config)[1]
    loss_sum, correct, seen = evaluate(model, val_loader, torch.device("cpu")).tolist()
    print(f"Best checkpoint (epoch {state['epoch']}) reloaded: val_loss={loss_sum / seen:.4f} "
          f"accuracy={correct / seen:.3f}")
