"""An existing LightningModule and DataModule on 2 workers, with a killed worker and a resume.

The Ray Train recipe's Lightning section ported by changing imports: the
Trainer gets ``RayDDPStrategy()``, ``plugins=[RayLightningEnvironment()]`` and
``RayTrainReportCallback()`` (each an alias of muster's ``Muster*`` class),
then goes through ``prepare_trainer``. Every epoch each rank reports
``trainer.callback_metrics`` and rank 0 the Lightning checkpoint
(``checkpoint.ckpt``). Rank 1 is killed with SIGKILL once, after epoch 1; the
new gang passes the latest checkpoint to ``trainer.fit(ckpt_path=...)`` and
finishes the remaining epochs.

Run it::

    python examples/lightning_ddp.py
    python examples/lightning_ddp.py --epochs 4 --no-crash --storage-path /tmp/muster_runs
"""

import argparse
import os
import signal

import lightning.pytorch as pl
import torch

from muster import train  # was: from ray import train
from muster.train import FailureConfig, RunConfig, ScalingConfig  # was: from ray.train import ...
from muster.train.lightning import (  # was: from ray.train.lightning import ...
    RayDDPStrategy,
    RayLightningEnvironment,
    RayTrainReportCallback,
    prepare_trainer,
)
from muster.train.torch import TorchTrainer  # was: from ray.train.torch import TorchTrainer


class Regressor(pl.LightningModule):
    """Unchanged single-machine Lightning code."""

    def __init__(self, lr=0.02):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, on_epoch=True, on_step=False, sync_dist=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


class SyntheticData(pl.LightningDataModule):
    def setup(self, stage=None):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(2048, 16, generator=g)
        y = (x[:, :4].sum(dim=1, keepdim=True) - x[:, 4:8].prod(dim=1, keepdim=True)).tanh()
        self.train_set = torch.utils.data.TensorDataset(x[:1536], y[:1536])
        self.val_set = torch.utils.data.TensorDataset(x[1536:], y[1536:])

    def train_dataloader(self):
        return torch.utils.data.DataLoader(self.train_set, batch_size=32, shuffle=True)

    def val_dataloader(self):
        return torch.utils.data.DataLoader(self.val_set, batch_size=64)


def train_func(config):
    trainer = pl.Trainer(
        max_epochs=config["epochs"],
        strategy=RayDDPStrategy(),
        plugins=[RayLightningEnvironment()],
        callbacks=[RayTrainReportCallback()],
        accelerator="auto",
        devices="auto",
        enable_checkpointing=False,  # muster keeps the checkpoints
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
    )
    trainer = prepare_trainer(trainer)
    model, data = Regressor(), SyntheticData()
    ctx = train.get_context()
    if config["crash"] and ctx.get_attempt() == 0 and ctx.get_world_rank() == 1:
        trainer.callbacks.append(_KillAfterEpoch(1))
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as folder:
            if ctx.get_world_rank() == 0:
                print(f"Resuming from {checkpoint} (attempt {ctx.get_attempt()})", flush=True)
            trainer.fit(model, datamodule=data, ckpt_path=os.path.join(folder, RayTrainReportCallback.CHECKPOINT_NAME))
    else:
        trainer.fit(model, datamodule=data)


class _KillAfterEpoch(pl.Callback):
    """The injected fault: SIGKILL this worker at the end of one epoch (after its report)."""

    def __init__(self, epoch):
        self.epoch = epoch

    def on_train_epoch_end(self, trainer, pl_module):
        if trainer.current_epoch == self.epoch:
            print(f"Killing rank 1 with SIGKILL after epoch {self.epoch}", flush=True)
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
    for row in result.metrics_dataframe.itertuples():
        print(f"epoch {int(row.epoch)}: train_loss={row.train_loss:.4f} val_loss={row.val_loss:.4f}")
    print(f"Final val_loss: {result.metrics['val_loss']:.4f}")
    print(f"Checkpoint: {result.checkpoint}")
