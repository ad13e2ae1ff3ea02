"""``tune.integration.pytorch_lightning``: a Lightning Trainer inside a trial reports its metrics to Tune."""

from __future__ import annotations

import os

import pytest

from muster import tune

pytest.importorskip("lightning")


def _lightning_trial(config):
    import lightning.pytorch as pl
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from muster.tune.integration.pytorch_lightning import TuneReportCallback, TuneReportCheckpointCallback

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, _):
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def validation_step(self, batch, _):
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
    callback = (TuneReportCheckpointCallback({"loss": "val_loss"}, filename="model.ckpt") if config["ckpt"]
                else TuneReportCallback({"loss": "val_loss"}, on="validation_end"))
    trainer = pl.Trainer(max_epochs=2, callbacks=[callback], logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1,
                         num_sanity_val_steps=0)
    trainer.fit(Tiny(), data, data)


@pytest.mark.timeout(300)  # Lightning's import in a fresh trial worker is slow on a loaded machine
def test_report_callbacks_send_validation_metrics_and_checkpoints(storage):
    grid = tune.Tuner(
        _lightning_trial,
        param_space={"ckpt": tune.grid_search([False, True])},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert grid.num_errors == 0, grid.errors
    for r in grid:
        assert r.metrics["training_iteration"] == 2 and isinstance(r.metrics["loss"], float)
        if r.config["ckpt"]:
            with r.checkpoint.as_directory() as d:
                assert os.path.exists(os.path.join(d, "model.ckpt"))
        else:
            assert r.checkpoint is None
