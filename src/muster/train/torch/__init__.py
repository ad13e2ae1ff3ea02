"""muster.train.torch: Ray Train's torch API (``ray.train.torch`` -> ``muster.train.torch``)."""

from muster.train.torch.config import TorchConfig
from muster.train.torch.train_loop_utils import (
    enable_reproducibility,
    get_device,
    get_devices,
    prepare_data_loader,
    prepare_model,
)
from muster.train.torch.trainer import TorchTrainer

__all__ = [
    "TorchConfig",
    "TorchTrainer",
    "enable_reproducibility",
    "get_device",
    "get_devices",
    "prepare_data_loader",
    "prepare_model",
]
