"""An unchanged LightningModule and DataModule on 2 muster workers (gloo): trains,
reports every epoch with a checkpoint, is SIGKILLed, and resumes from ckpt_path."""

from __future__ import annotations

import os

import pytest
import torch

pl = pytest.importorskip("lightning.pytorch")

EPOCHS = 3


class Regressor(pl.LightningModule):
    """A user's module, as it would be written for a single machine."""

    def __init__(self, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

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


class Data(pl.LightningDataModule):
    def setup(self, stage=None):
        g = torch.Generator().manual_seed(3)
        x = torch.randn(96, 8, generator=g)
        y = x.sum(dim=1, keepdim=True)
        self.train_set = torch.utils.data.TensorDataset(x[:64], y[:64])
        self.val_set = torch.utils.data.TensorDataset(x[64:], y[64:])

    def train_dataloader(self):
        return torch.utils.data.DataLoader(self.train_set, batch_size=8, shuffle=True)

    def val_dataloader(self):
        return torch.utils.data.DataLoader(self.val_set, batch_size=8)


def lightning_loop(config):
    import signal

    import muster.train as train
    from muster.train.lightning import (
        RayDDPStrategy,
        RayFSDPStrategy,
        RayLightningEnvironment,
        RayTrainReportCallback,
        prepare_trainer,
    )

    class KillAfter(pl.Callback):  # the fault: SIGKILL rank 1 once its epoch's report has returned
        def on_train_epoch_end(self, trainer, pl_module):
            ctx = train.get_context()
            if (ctx.get_attempt() == 0 and ctx.get_world_rank() == 1
                    and trainer.current_epoch == config.get("kill_after")):
                os.kill(os.getpid(), signal.SIGKILL)

    pl.seed_everything(0)
    strategy = RayFSDPStrategy() if config.get("fsdp") else RayDDPStrategy()
    trainer = pl.Trainer(
        max_epochs=EPOCHS, strategy=strategy, plugins=[RayLightningEnvironment()],
        callbacks=[RayTrainReportCallback(), KillAfter()], accelerator="cpu", devices="auto",
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, logger=False,
        default_root_dir=config["root"],
    )
    trainer = prepare_trainer(trainer)
    model, data = Regressor(), Data()
    ckpt = train.get_checkpoint()
    if ckpt:
        with ckpt.as_directory() as folder:
            trainer.fit(model, datamodule=data, ckpt_path=os.path.join(folder, RayTrainReportCallback.CHECKPOINT_NAME))
    else:
        trainer.fit(model, datamodule=data)
    sampler = trainer.train_dataloader.sampler
    if trainer.global_rank == 0:
        torch.save({"sampler": (type(sampler).__name__, sampler.num_replicas, sampler.rank)}, config["out"])


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_lightning_run_killed_after_an_epoch_resumes_from_its_checkpoint(trainer, tmp_path, strategy):
    fsdp = strategy == "fsdp"
    common = {"root": str(tmp_path), "fsdp": fsdp}
    clean = trainer(lightning_loop, {**common, "out": str(tmp_path / "clean.pt")}, name="clean").fit()
    killed = trainer(lightning_loop, {**common, "out": str(tmp_path / "killed.pt"), "kill_after": 1},
                     name="killed", max_failures=1).fit()

    rows = killed.all_reports
    assert sorted((r["_attempt"], r["_rank"], r["epoch"]) for r in rows) == [
        (0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (1, 0, 2), (1, 1, 2)
    ]
    assert all({"train_loss", "val_loss", "step"} <= set(r) for r in rows)
    assert [r["step"] for r in rows if r["_rank"] == 0] == [4, 8, 12]  # 64 rows / 2 workers / batch 8
    a, b = torch.load(tmp_path / "clean.pt"), torch.load(tmp_path / "killed.pt")
    assert a["sampler"] == b["sampler"] == ("DistributedSampler", 2, 0)  # muster's ranks, not Lightning's
    # The last committed checkpoints (full state, written by rank 0) hold the same weights and optimizer state.
    final = []
    for result in (clean, killed):
        with result.checkpoint.as_directory() as folder:
            final.append(torch.load(os.path.join(folder, "checkpoint.ckpt"), weights_only=False))
    assert final[1]["epoch"] == 2 and final[1]["global_step"] == 12
    assert final[0]["state_dict"].keys() == final[1]["state_dict"].keys()
    for key, value in final[0]["state_dict"].items():
        assert value.shape == Regressor().state_dict()[key].shape  # full tensors, not shards
        assert torch.equal(value, final[1]["state_dict"][key]), f"{key} differs after resume"
    # Adam's moments too (FSDP on CPU once saved exp_avg as a copy of exp_avg_sq: a resume diverged)
    opt_clean, opt_killed = (f["optimizer_states"][0]["state"] for f in final)
    assert opt_clean.keys() == opt_killed.keys()
    for pid, moments in opt_clean.items():
        assert not torch.equal(moments["exp_avg"], moments["exp_avg_sq"])
        for name, value in moments.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(opt_killed[pid][name])), f"{pid}.{name}"
    assert clean.metrics["val_loss"] == killed.metrics["val_loss"]
    assert clean.metrics["val_loss"] < clean.all_reports[0]["val_loss"]  # it learned


def bad_environment_loop():
    from lightning.fabric.plugins.environments import LightningEnvironment

    from muster.train.lightning import MusterDDPStrategy, prepare_trainer

    trainer = pl.Trainer(strategy=MusterDDPStrategy(cluster_environment=LightningEnvironment()), accelerator="cpu",
                         logger=False, enable_checkpointing=False, enable_progress_bar=False)
    prepare_trainer(trainer)


def single_device_loop():
    from muster.train.lightning import prepare_trainer

    prepare_trainer(pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False))


@pytest.mark.parametrize(("loop", "message"), [
    (bad_environment_loop, r"cluster environment is LightningEnvironment; pass plugins=\[MusterLightningEnvironment"),
    (single_device_loop, r"world size is 1 but this run has 2 workers"),
])
def test_prepare_trainer_refuses_a_trainer_that_would_not_use_the_workers(trainer, loop, message):
    from muster.exceptions import TrainerSetupError
    from muster.train import TrainingFailedError

    with pytest.raises(TrainingFailedError, match=message) as failed:
        trainer(loop, None).fit()
    (raised,) = failed.value.worker_failures.values()  # a RuntimeError, as Ray's, and muster's own class
    assert isinstance(raised, TrainerSetupError) and isinstance(raised, RuntimeError), repr(raised)


def test_ray_names_are_aliases():
    import muster.train.lightning as ml

    assert ml.RayDDPStrategy is ml.MusterDDPStrategy and ml.RayFSDPStrategy is ml.MusterFSDPStrategy
    assert ml.RayLightningEnvironment is ml.MusterLightningEnvironment
    assert ml.RayTrainReportCallback.CHECKPOINT_NAME == "checkpoint.ckpt"
