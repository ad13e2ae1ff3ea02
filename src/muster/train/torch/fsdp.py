"""Fully sharded data parallel for ``prepare_model(parallel_strategy="fsdp")``,
and ``no_sync`` for gradient accumulation under DDP or FSDP.

muster shards with FSDP2 (``torch.distributed.fsdp.fully_shard``): parameters
become DTensors sharded over a 1-D device mesh of all workers.  FSDP2 runs on
CPU with gloo as well as on CUDA with nccl, and its checkpoints (see
``save_sharded``) reload onto any number of workers.  Ray Train wraps with
FSDP1 (``FullyShardedDataParallel``) instead; its keyword arguments are
translated below or refused with the FSDP2 equivalent.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch

from muster.exceptions import InvalidArgumentError

# FSDP1 keyword arguments (Ray passes parallel_strategy_kwargs to FullyShardedDataParallel) -> what to use instead.
_FSDP1_ONLY = {
    "sharding_strategy": "reshard_after_forward=True (FULL_SHARD) or False (SHARD_GRAD_OP)",
    "auto_wrap_policy": "shard_modules=(YourBlock, ...) (each instance becomes its own FSDP unit)",
    "mixed_precision": "mp_policy=torch.distributed.fsdp.MixedPrecisionPolicy(param_dtype=..., reduce_dtype=...)",
    "cpu_offload": "offload_policy=torch.distributed.fsdp.CPUOffloadPolicy()",
    "use_orig_params": "nothing: FSDP2 always keeps the original parameters",
    "device_id": "nothing: the mesh is built on get_device()",
}
_FSDP2_KWARGS = ("mesh", "reshard_after_forward", "mp_policy", "offload_policy", "ignored_params")

ShardPredicate = Callable[[torch.nn.Module], bool]


def shard_model(model: torch.nn.Module, device: torch.device, kwargs: dict[str, Any]) -> torch.nn.Module:
    """Shard ``model`` (already on ``device``) across all workers with FSDP2; returns the same module.

    ``kwargs`` are ``fully_shard``'s keyword arguments plus ``shard_modules``:
    module classes (or a predicate) whose instances become FSDP units of their
    own, so only one block's parameters are gathered at a time.
    """
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    kwargs = dict(kwargs)
    unknown = sorted(set(kwargs) - set(_FSDP2_KWARGS) - {"shard_modules"})
    if unknown:
        hints = "; ".join(f"{k}: use {_FSDP1_ONLY[k]}" for k in unknown if k in _FSDP1_ONLY)
        raise InvalidArgumentError(
            f"prepare_model(parallel_strategy='fsdp', parallel_strategy_kwargs=...): unknown key(s) {unknown}. "
            f"muster shards with FSDP2 fully_shard, which takes {', '.join(_FSDP2_KWARGS)} and shard_modules. "
            + (hints + "." if hints else "")
        )
    units = _unit_predicate(kwargs.pop("shard_modules", ()))
    kwargs.setdefault("mesh", init_device_mesh(device.type, (dist.get_world_size(),)))
    # Inner units first (post-order), then the root, as FSDP2 requires.
    for name, module in reversed(list(model.named_modules())):
        if name and units(module):
            fully_shard(module, **kwargs)
    fully_shard(model, **kwargs)
    return model


def _unit_predicate(spec: Any) -> ShardPredicate:
    if callable(spec) and not isinstance(spec, type):
        return spec
    classes = (spec,) if isinstance(spec, type) else tuple(spec)
    if not all(isinstance(c, type) and issubclass(c, torch.nn.Module) for c in classes):
        raise InvalidArgumentError(
            f"prepare_model(parallel_strategy_kwargs={{'shard_modules': {spec!r}}}): pass nn.Module classes "
            "(for example (nn.TransformerEncoderLayer,)) or a function module -> bool."
        )
    return lambda module: isinstance(module, classes)


@contextlib.contextmanager
def no_sync(model: torch.nn.Module) -> Iterator[None]:
    """Accumulate gradients locally: no gradient communication inside the block.

    Run the forward *and* backward passes of all micro-batches but the last
    inside ``with no_sync(model):`` (DDP decides in the forward pass whether
    the backward will communicate), then the last one outside it: its backward
    averages the accumulated gradients across workers once. Divide each
    micro-batch's loss by the number of micro-batches to get the gradient of
    the big batch.  Works for a DDP
    model (``DistributedDataParallel.no_sync``), an FSDP2 model
    (``set_requires_gradient_sync(False)``; gradients are kept unsharded until
    the synchronising step) and an unwrapped one (a no-op).
    """
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        with model.no_sync():
            yield
        return
    from torch.distributed.fsdp import FSDPModule

    if isinstance(model, FSDPModule):
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)
        return
    yield
