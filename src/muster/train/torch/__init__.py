"""muster.train.torch: Ray Train's torch API (``ray.train.torch`` -> ``muster.train.torch``)."""

from muster.train.torch.amp import accelerate, backward, prepare_optimizer
from muster.train.torch.config import TorchConfig
from muster.train.torch.fsdp import no_sync
from muster.train.torch.sharded_checkpoint import load_sharded, save_sharded
from muster.train.torch.torch_checkpoint import TorchCheckpoint
from muster.train.torch.train_loop_utils import (
    enable_reproducibility,
    get_device,
    get_devices,
    prepare_data_loader,
    prepare_model,
)
from muster.train.torch.trainer import TorchTrainer

__all__ = [
    "TorchCheckpoint",
    "TorchConfig",
    "TorchTrainer",
    "accelerate",
    "backward",
    "enable_reproducibility",
    "get_device",
    "get_devices",
    "load_sharded",
    "no_sync",
    "prepare_data_loader",
    "prepare_model",
    "prepare_optimizer",
    "save_sharded",
]
