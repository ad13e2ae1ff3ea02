"""Ray Train 2.60's Lightning and Transformers getting-started guides, ported by changing imports.

The guides' samples, shrunk (a tiny module, synthetic data, 2 CPU workers): what the user sees
(metrics keys, the checkpoint folder, ``Result.checkpoint``) matches Ray's.
"""

from __future__ import annotations

import os

import pytest
import torch

pl = pytest.importorskip("lightning.pytorch")


class ImageClassifier(pl.LightningModule):
    """The guide's module, with a tiny network in place of resnet18."""

    def __init__(self):
        super().__init__()
        self.model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 4))
        self.criterion = torch.nn.CrossEntropyLoss()

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = self.criterion(self.model(x), y)
        self.log("loss", loss, on_step=True, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.model.parameters(), lr=0.001)


def lightning_guide_loop(config):
    import muster.train as train
    from muster.train.lightning import (
        RayDDPStrategy,
        RayLightningEnvironment,
        RayTrainReportCallback,
        prepare_trainer,
    )

    g = torch.Generator().manual_seed(0)
    images, labels = torch.randn(32, 1, 4, 4, generator=g), torch.randint(0, 4, (32,), generator=g)
    data = torch.utils.data.TensorDataset(images, labels)
    trainer = pl.Trainer(
        max_epochs=2, devices="auto", accelerator="auto",
        strategy=RayDDPStrategy(), plugins=[RayLightningEnvironment()],
        # Ray 2.60's keywords (Ray Train V2): the upload mode of every report, and a validation of each checkpoint
        callbacks=[RayTrainReportCallback(**config["callback"])],
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, logger=False,
        default_root_dir=config["root"],
    )
    trainer = prepare_trainer(trainer)
    trainer.fit(ImageClassifier(), train_dataloaders=torch.utils.data.DataLoader(data, batch_size=8, shuffle=True))
    train.get_all_reported_checkpoints()  # waits for the last checkpoint's validation


def count_steps(checkpoint):
    from muster.train.lightning import RayTrainReportCallback

    with checkpoint.as_directory() as folder:
        state = torch.load(os.path.join(folder, RayTrainReportCallback.CHECKPOINT_NAME), weights_only=False)
    return {"validated_step": state["global_step"]}


def test_lightning_report_callback_takes_ray_upload_mode_and_validation(storage, tmp_path):
    from muster.train import CheckpointUploadMode, RunConfig, ScalingConfig, ValidationConfig
    from muster.train.lightning import RayTrainReportCallback
    from muster.train.torch import TorchTrainer

    callback = {"checkpoint_upload_mode": CheckpointUploadMode.ASYNC, "validation": True}
    result = TorchTrainer(
        lightning_guide_loop, train_loop_config={"root": str(tmp_path), "callback": callback},
        scaling_config=ScalingConfig(num_workers=2), validation_config=ValidationConfig(count_steps),
        run_config=RunConfig(name="guide", storage_path=storage, verbose=0),
    ).fit()
    assert set(result.metrics) == {"loss", "epoch", "step"}
    assert (result.metrics["epoch"], result.metrics["step"]) == (1, 4)
    with result.checkpoint.as_directory() as folder:
        assert RayTrainReportCallback.CHECKPOINT_NAME in os.listdir(folder)
        model = ImageClassifier.load_from_checkpoint(os.path.join(folder, RayTrainReportCallback.CHECKPOINT_NAME))
    assert isinstance(model, ImageClassifier)
    # each epoch's checkpoint was validated, its metrics joining the checkpoint's
    assert sorted(m.get("validated_step") for _, m in result.best_checkpoints) == [2, 4]
