"""Checkpoints and fault tolerance: a worker crashes mid-run and training resumes.

Step 4 of the Ray Cluster tutorial ("Save and Load Checkpoints") ported to
muster by changing the imports: rank 0 saves ``checkpoint.pt`` into a
temporary folder every epoch and reports it with
``Checkpoint.from_directory``, and the other workers report the same epoch
without a checkpoint (Ray Train asks every worker to call ``report()`` the
same number of times; muster also accepts the tutorial's rank-0-only
``report()``, but can then commit only once it has learned that the other
ranks never report: see docs/fault-tolerance.md); at start-up every worker calls
``train.get_checkpoint()`` and, when there is one, loads the model and
optimizer state and continues at ``start_epoch``.

To show that this really resumes, the run uses
``FailureConfig(max_failures=1)`` and one worker fails once, in the first
attempt only (``train.get_context().get_attempt() == 0``), one step into
epoch 3.  muster stops the gang, starts a new one, and hands it the latest
committed checkpoint; the output shows which epochs ran in which attempt.
The tutorial's "Verification" block runs at the end.

Run it::

    python examples/linear_checkpoint_resume.py              # the failing worker raises
    python examples/linear_checkpoint_resume.py --crash kill # ... or is killed with SIGKILL
    python examples/linear_checkpoint_resume.py --epochs 4 --storage-path /tmp/muster_runs
"""

import argparse
import os
import signal
import tempfile

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from muster import train  # was: from ray import train
from muster.train import Checkpoint, FailureConfig, RunConfig, ScalingConfig  # was: from ray.train import ...
from muster.train.torch import TorchTrainer  # was: from ray.train.torch import TorchTrainer


def train_loop_per_worker(config):
    model = nn.Linear(config["input_size"], config["output_size"])
    model = train.torch.prepare_model(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    loss_fn = nn.MSELoss()
    ctx = train.get_context()

    # Resume from checkpoint if one exists
    checkpoint = train.get_checkpoint()
    start_epoch = 0
    if checkpoint:
        with checkpoint.as_directory() as ckpt_dir:
            state = torch.load(os.path.join(ckpt_dir, "checkpoint.pt"))
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            start_epoch = state["epoch"] + 1
        if ctx.get_world_rank() == 0:
            print(
                f"Resumed from checkpoint (attempt {ctx.get_attempt()}): epochs 0-{state['epoch']} were done, "
                f"continuing at epoch {start_epoch}",
                flush=True,
            )

    # The tutorial leaves "# ... training loop ..." to you: a seeded linear-regression task,
    # identical on every worker, sharded by prepare_data_loader.
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(config["num_samples"], config["input_size"], generator=gen)
    true_w = torch.randn(config["input_size"], config["output_size"], generator=gen) / config["input_size"] ** 0.5
    y = X @ true_w + 0.1 * torch.randn(config["num_samples"], config["output_size"], generator=gen)
    loader = train.torch.prepare_data_loader(DataLoader(TensorDataset(X, y), batch_size=config["batch_size"]))

    for epoch in range(start_epoch, config["epochs"]):
        total_loss = 0.0
        for step, (batch_X, batch_y) in enumerate(loader):
            if step == 1 and should_crash(ctx, epoch, config):
                crash(epoch, config["crash"])
            optimizer.zero_grad()
            loss = loss_fn(model(batch_X), batch_y)
            loss.backward()
            optimizer.step()
            total_loss += loss.item()

        # Save checkpoint every epoch -- only worker 0 saves to avoid conflicts. Every worker
        # calls report() (Ray Train requires it; workers other than 0 pass no checkpoint), so
        # each epoch's checkpoint commits as soon as it is whole, with every rank's resume state.
        metrics = {"loss": total_loss / len(loader), "epoch": epoch}
        with tempfile.TemporaryDirectory() as tmpdir:
            checkpoint = None
            if train.get_context().get_world_rank() == 0:
                torch.save(
                    {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                    os.path.join(tmpdir, "checkpoint.pt"),
                )
                checkpoint = Checkpoint.from_directory(tmpdir)
            train.report(metrics, checkpoint=checkpoint)


def should_crash(ctx, epoch, config):
    """The injected fault: once (first attempt only), on the last rank, one step into ``crash_epoch``.

    One step in, not at the epoch's start: DDP keeps ranks in step, so by the time the
    last rank has finished a step of this epoch, rank 0 has finished reporting the
    previous epoch's checkpoint -- it is committed, and the restart resumes from it.
    """
    return (
        ctx.get_attempt() == 0
        and epoch == config["crash_epoch"]
        and ctx.get_world_rank() == ctx.get_world_size() - 1
    )


def crash(epoch, how):
    print(f"Simulating a worker crash in epoch {epoch} ({how})", flush=True)
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError(f"simulated worker failure in epoch {epoch}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--storage-path", default=None, help="where runs are stored (default ~/muster_results)")
    parser.add_argument("--crash", choices=["raise", "kill"], default="raise",
                        help="how the failing worker dies: raise an exception, or SIGKILL itself")
    parser.add_argument("--num-samples", type=int, default=10_000)
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error("--epochs must be >= 2: the crash happens after at least one checkpoint")
    crash_epoch = min(3, args.epochs - 1)

    trainer = TorchTrainer(
        train_loop_per_worker=train_loop_per_worker,
        train_loop_config={
            "input_size": 128,
            "output_size": 10,
            "lr": 1e-3,
            "batch_size": 64,
            "epochs": args.epochs,
            "num_samples": args.num_samples,
            "crash_epoch": crash_epoch,
            "crash": args.crash,
        },
        scaling_config=ScalingConfig(num_workers=args.num_workers, use_gpu=False),
        run_config=RunConfig(
            storage_path=args.storage_path,
            failure_config=FailureConfig(max_failures=1),  # one retry, from the latest checkpoint
            verbose=2,
        ),
    )
    result = trainer.fit()

    # Which epochs ran in which attempt (column _attempt of every report).
    history = result.all_metrics_dataframe
    for attempt, rows in history.groupby("_attempt"):
        epochs = sorted(rows["epoch"])
        label = "first attempt" if attempt == 0 else f"restart {attempt}"
        print(f"Attempt {attempt} ({label}): epochs {epochs[0]}-{epochs[-1]}")
    attempts = sorted(history["_attempt"].unique())
    if len(attempts) > 1:
        resumed_at = int(history[history["_attempt"] == attempts[-1]]["epoch"].min())
        print(f"Training resumed from the checkpoint of epoch {resumed_at - 1} after the crash in epoch {crash_epoch}")
    print(f"Final loss: {result.metrics['loss']:.4f}")

    # Verification (from the tutorial)
    best_checkpoint = result.best_checkpoints[0][0]
    print(f"Best checkpoint path: {best_checkpoint}")
    print(f"Metrics: {result.metrics_dataframe[['epoch','loss']].tail()}")
