"""DDP and FSDP strategies for Lightning inside muster workers (Ray's ``RayDDPStrategy`` / ``RayFSDPStrategy``).

Each worker is one Lightning process with one device (``get_device()``): the
strategies take the device and sampler arguments from muster and, with
``plugins=[MusterLightningEnvironment()]`` on the Trainer, the ranks; they use
the process group muster already set up (Lightning's own setup finds it
initialized and leaves it alone).
"""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.strategies import DDPStrategy, FSDPStrategy

import muster.train as train
from muster.train.torch import get_device


class _OnMusterWorker:
    """The device and data shard of this muster worker, for either strategy."""

    @property
    def root_device(self) -> torch.device:
        return get_device()

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        context = train.get_context()
        return {"num_replicas": context.get_world_size(), "rank": context.get_world_rank()}


class MusterDDPStrategy(_OnMusterWorker, DDPStrategy):
    """Lightning's ``DDPStrategy`` on muster's workers and process group.

    Takes ``DDPStrategy``'s arguments (``find_unused_parameters``, ``static_graph``, ...).
    """


class MusterFSDPStrategy(_OnMusterWorker, FSDPStrategy):
    """Lightning's ``FSDPStrategy`` (torch FSDP1) on muster's workers and process group.

    Takes ``FSDPStrategy``'s arguments (``auto_wrap_policy``,
    ``sharding_strategy``, ``state_dict_type``, ...). On GPU it behaves as
    Lightning's; on CPU (gloo), where FSDP1 needs ``device_id`` to be the CPU
    and Lightning passes none, it wraps the model itself.
    """

    def _setup_model(self, model: torch.nn.Module) -> torch.nn.Module:
        from torch.distributed.fsdp import FullyShardedDataParallel

        if self.root_device.type != "cpu" or any(isinstance(m, FullyShardedDataParallel) for m in model.modules()):
            return super()._setup_model(model)
        return FullyShardedDataParallel(
            module=model,
            cpu_offload=self.cpu_offload,
            mixed_precision=self.mixed_precision_config,
            sharding_strategy=self.sharding_strategy,
            device_id=torch.device("cpu"),
            **self.kwargs,
        )

    def lightning_module_state_dict(self) -> dict[str, Any]:
        if self.root_device.type != "cpu" or self._state_dict_type != "full":
            return super().lightning_module_state_dict()
        # Lightning gathers with offload_to_cpu=True, which on CPU-resident FSDP1 parameters
        # clones freed storage (a segfault); the parameters are on the CPU already.
        from torch.distributed.fsdp import FullStateDictConfig, FullyShardedDataParallel, StateDictType

        assert self.model is not None
        config = FullStateDictConfig(offload_to_cpu=False, rank0_only=True)
        with FullyShardedDataParallel.state_dict_type(self.model, StateDictType.FULL_STATE_DICT, config):
            return self.model.state_dict()

    def optimizer_state(self, optimizer: Any) -> dict[str, Any]:
        if self.root_device.type != "cpu" or self._state_dict_type != "full":
            return super().optimizer_state(optimizer)
        # As above: with offload_to_cpu=True on CPU the gathered Adam moments share freed storage
        # (exp_avg and exp_avg_sq come out equal), so a resumed run diverges. Gather in place.
        from lightning.pytorch.core.optimizer import LightningOptimizer
        from torch.distributed.fsdp import (
            FullOptimStateDictConfig,
            FullStateDictConfig,
            FullyShardedDataParallel,
            OptimStateKeyType,
            StateDictType,
        )

        if isinstance(optimizer, LightningOptimizer):
            optimizer = optimizer._optimizer
        assert self.model is not None
        with FullyShardedDataParallel.state_dict_type(
            self.model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(offload_to_cpu=False, rank0_only=True),
            FullOptimStateDictConfig(offload_to_cpu=False, rank0_only=True),
        ):
            state = FullyShardedDataParallel.optim_state_dict(self.model, optimizer)
            if self.global_rank == 0:  # the standard (parameter id) keys, as Lightning stores them
                state = FullyShardedDataParallel.rekey_optim_state_dict(state, OptimStateKeyType.PARAM_ID, self.model)
            return state
