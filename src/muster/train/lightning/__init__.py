"""muster.train.lightning: run a Lightning Trainer on muster's workers (``ray.train.lightning`` -> here).

Inside ``train_loop_per_worker``::

    trainer = pl.Trainer(
        max_epochs=3,
        strategy=MusterDDPStrategy(),          # or MusterFSDPStrategy()
        plugins=[MusterLightningEnvironment()],
        callbacks=[MusterTrainReportCallback()],
        devices="auto", accelerator="auto",
        enable_checkpointing=False,
    )
    trainer = prepare_trainer(trainer)
    trainer.fit(model, datamodule=datamodule)

Ray's names are aliases (``RayDDPStrategy``, ``RayFSDPStrategy``,
``RayLightningEnvironment``, ``RayTrainReportCallback``), so a Ray Train
script ports by changing its imports. Needs ``pip install "muster[lightning]"``.
"""

from typing import Any

from muster.train.lightning import _compat  # noqa: F401  (first: the install hint when Lightning is missing)
from muster.train.lightning.callback import MusterTrainReportCallback
from muster.train.lightning.environment import MusterLightningEnvironment
from muster.train.lightning.strategies import MusterDDPStrategy, MusterFSDPStrategy
from muster.train.lightning.trainer import prepare_trainer

RayDDPStrategy = MusterDDPStrategy
RayFSDPStrategy = MusterFSDPStrategy
RayLightningEnvironment = MusterLightningEnvironment
RayTrainReportCallback = MusterTrainReportCallback

__all__ = [
    "MusterDDPStrategy",
    "MusterFSDPStrategy",
    "MusterLightningEnvironment",
    "MusterTrainReportCallback",
    "RayDDPStrategy",
    "RayFSDPStrategy",
    "RayLightningEnvironment",
    "RayTrainReportCallback",
    "prepare_trainer",
]


def __getattr__(name: str) -> Any:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.train.lightning", name)
