"""``TorchTrainer``: DataParallelTrainer with torch.distributed set up on every worker."""

from __future__ import annotations

from typing import Any, Callable

from muster.core import settings
from muster.train.checkpoint import Checkpoint
from muster.train.config import RunConfig, ScalingConfig
from muster.train.torch.config import TorchBackend, TorchConfig
from muster.train.trainer import DataParallelTrainer


class TorchTrainer(DataParallelTrainer):
    """Run ``train_loop_per_worker`` on N workers joined in one torch process group.

    Each worker gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
    NODE_RANK, MASTER_ADDR and MASTER_PORT as torchrun sets them, and the
    process group is initialised (gloo on CPU, nccl on GPU) before the
    function starts.  See ``DataParallelTrainer`` for the arguments.
    """

    _worker_modules = settings.DDP_PRELOAD  # the engine preloads DDP's imports for these workers

    def __init__(
        self,
        train_loop_per_worker: Callable[..., Any],
        *,
        train_loop_config: dict[str, Any] | None = None,
        torch_config: TorchConfig | None = None,
        scaling_config: ScalingConfig | None = None,
        run_config: RunConfig | None = None,
        resume_from_checkpoint: Checkpoint | None = None,
        datasets: dict[str, Any] | None = None,
        dataset_config: Any = None,
    ):
        scaling_config = scaling_config or ScalingConfig()
        self.torch_config = torch_config or TorchConfig()
        super().__init__(
            train_loop_per_worker,
            train_loop_config=train_loop_config,
            scaling_config=scaling_config,
            run_config=run_config,
            backend_config=TorchBackend(self.torch_config, scaling_config.use_gpu),
            resume_from_checkpoint=resume_from_checkpoint,
            datasets=datasets,
            dataset_config=dataset_config,
        )
