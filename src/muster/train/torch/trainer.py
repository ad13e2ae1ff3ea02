"""``TorchTrainer``: DataParallelTrainer with torch.distributed set up on every worker."""

from __future__ import annotations

from typing import Any, Callable

from muster.core import settings
from muster.exceptions import InvalidTypeError, expect_instance
from muster.train.checkpoint import Checkpoint
from muster.train.config import RunConfig, ScalingConfig
from muster.train.torch.config import TorchBackend, TorchConfig
from muster.train.trainer import DataParallelTrainer
from muster.train.validation import ValidationConfig


class TorchTrainer(DataParallelTrainer):
    """Run ``train_loop_per_worker`` on N workers joined in one torch process group.

    Each worker gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
    NODE_RANK, MASTER_ADDR and MASTER_PORT as torchrun sets them, and the
    process group is initialised (gloo on CPU, nccl on GPU) before the
    function starts.  See ``DataParallelTrainer`` for the arguments.
    """

    _worker_modules = settings.DDP_PRELOAD  # the engine preloads DDP's imports for these workers
    tunable_args = (
        "train_loop_config", "scaling_config", "datasets", "dataset_config", "resume_from_checkpoint", "torch_config",
    )

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
        validation_config: ValidationConfig | None = None,
        metadata: dict[str, Any] | None = None,
    ):
        expect_instance("TorchTrainer", "torch_config", torch_config, TorchConfig,
                        "a muster.train.torch.TorchConfig, e.g. TorchConfig(backend='gloo')")
        self.torch_config = torch_config or TorchConfig()
        super().__init__(  # checks scaling_config's type before the backend below reads it
            train_loop_per_worker,
            train_loop_config=train_loop_config,
            scaling_config=scaling_config,
            run_config=run_config,
            resume_from_checkpoint=resume_from_checkpoint,
            datasets=datasets,
            dataset_config=dataset_config,
            validation_config=validation_config,
            metadata=metadata,
        )
        self.backend_config = TorchBackend(self.torch_config, self.scaling_config.use_gpu)

    def with_args(self, args: dict[str, Any]) -> TorchTrainer:
        """As ``DataParallelTrainer.with_args``, with ``torch_config`` too; the process group's
        backend follows the new ``scaling_config`` (nccl when it asks for GPUs)."""
        torch_config = args.get("torch_config", self.torch_config)
        if not isinstance(torch_config, TorchConfig):
            raise InvalidTypeError(
                f"param_space['torch_config']={torch_config!r}: pass a muster.train.torch.TorchConfig."
            )
        trainer = super().with_args({k: v for k, v in args.items() if k != "torch_config"})
        trainer.torch_config = torch_config
        trainer.backend_config = TorchBackend(torch_config, trainer.scaling_config.use_gpu)
        return trainer
