"""``TorchConfig`` and the torch backend that sets up each worker's process group."""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

from muster.exceptions import InvalidArgumentError, ResourcesUnavailableError
from muster.train._internal import rendezvous
from muster.train._internal.backend import Backend
from muster.train.context import TrainContext

_BACKENDS = ("gloo", "nccl", "mpi", "xccl", "hccl")
_INIT_BARRIER = "TORCH_DIST_INIT_BARRIER"  # torch: "1" ends init_process_group with a barrier on the store


@dataclass(kw_only=True)
class TorchConfig:
    """How workers join the torch.distributed process group.

    Args:
        backend: ``"gloo"`` (CPU), ``"nccl"`` (GPU) or another torch backend;
            default: nccl when the run uses GPUs, else gloo.
        init_method: ``"env"`` (MASTER_ADDR/PORT, default) or ``"tcp"``.
        timeout_s: how long collectives and the rendezvous may block.
    """

    backend: str | None = None
    init_method: str = "env"
    timeout_s: float = 1800

    def __post_init__(self) -> None:
        if self.backend is not None and self.backend not in _BACKENDS:
            raise InvalidArgumentError(f"TorchConfig(backend={self.backend!r}): "
                                       f"use one of {', '.join(_BACKENDS)}, or None.")
        if self.init_method not in ("env", "tcp"):
            raise InvalidArgumentError(f"TorchConfig(init_method={self.init_method!r}): use 'env' or 'tcp'.")
        if not (self.timeout_s > 0):
            raise InvalidArgumentError(f"TorchConfig(timeout_s={self.timeout_s!r}): use a number of seconds > 0.")


class TorchBackend(Backend):
    """Joins the process group before the user's loop and leaves it after."""

    def __init__(self, config: TorchConfig, use_gpu: bool):
        self.config, self.use_gpu = config, use_gpu

    @property
    def backend(self) -> str:
        return self.config.backend or ("nccl" if self.use_gpu else "gloo")

    def check_placement(self, placements: list[tuple[int, str, list[int]]]) -> None:
        """NCCL refuses two ranks on one GPU, but only at the first collective, inside the user's loop
        ("invalid usage ... Duplicate GPU detected", seen on an H200 with NCCL 2.28): refuse it before
        any loop starts, naming the ranks, the GPU and the two ways out."""
        if self.backend != "nccl":
            return
        owner: dict[tuple[str, int], int] = {}
        for rank, node, gpus in sorted(placements):
            for gpu in gpus:
                first = owner.setdefault((node, gpu), rank)
                if first != rank:
                    raise InvalidArgumentError(
                        f"ranks {first} and {rank} share GPU {gpu} on node {node}, and NCCL (the default backend with "
                        "use_gpu=True) needs a GPU of its own for each rank. Give every worker a whole GPU "
                        "(ScalingConfig(resources_per_worker={'GPU': 1}), at most as many workers as GPUs), or "
                        "keep sharing it with TorchTrainer(torch_config=TorchConfig(backend='gloo'))."
                    )

    def on_worker_start(self, context: TrainContext) -> None:
        import torch
        import torch.distributed as dist

        from muster.train.torch import train_loop_utils

        train_loop_utils._USE_GPU = self.use_gpu
        backend = self.backend
        if self.use_gpu and torch.version.cuda is None and not torch.cuda.is_available():
            raise ResourcesUnavailableError(
                f"ScalingConfig(use_gpu=True): this worker holds GPU(s) (CUDA_VISIBLE_DEVICES="
                f"{os.environ.get('CUDA_VISIBLE_DEVICES')!r}), but its torch {torch.__version__} was built without "
                "CUDA. Install a CUDA build of torch in this environment, or set use_gpu=False to train on the CPU.",
                requested={"GPU": 1},
            )
        if self.use_gpu and torch.cuda.is_available():
            torch.cuda.set_device(train_loop_utils.get_device())
        if backend == "nccl":
            os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
        # rank 0 holds MASTER_PORT since the driver asked for it: serve the store there, and the
        # rendezvous below finds it up instead of binding the port again
        rendezvous.serve_store(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), self.config.timeout_s)
        init = "env://"
        if self.config.init_method == "tcp":
            init = f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
        # The join ends with a barrier on the store (torch's switch for it, off by default since 2.1):
        # Gloo's full mesh is not one, and a rank whose loop had no collective could finish and close
        # its pairs while a slow peer was still connecting ("connectFullMesh failed ... Connection
        # closed by peer", seen on a loaded machine). One store round trip per rank; a value the user
        # set is kept.
        user_set = _INIT_BARRIER in os.environ
        os.environ.setdefault(_INIT_BARRIER, "1")
        try:
            dist.init_process_group(
                backend=backend,
                init_method=init,
                rank=context.world_rank,
                world_size=context.world_size,
                timeout=datetime.timedelta(seconds=self.config.timeout_s),
            )
        finally:
            if not user_set:
                os.environ.pop(_INIT_BARRIER, None)

    def on_driver_start(self) -> None:
        """Local mode, as Ray's: no process group, and ``get_device()`` is the driver's first GPU when torch
        sees one (whatever ``use_gpu`` says), else the CPU."""
        import torch

        from muster.train.torch import train_loop_utils

        train_loop_utils._USE_GPU = torch.cuda.is_available()

    def on_driver_end(self) -> None:
        from muster.train.torch import train_loop_utils

        train_loop_utils._USE_GPU = False  # the driver's own value: only workers set it

    def on_worker_end(self) -> None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
