"""Sharded checkpoints with ``torch.distributed.checkpoint`` (DCP).

Every rank writes only its own shard (``__<rank>_0.distcp``) and rank 0 the
index (``.metadata``); every rank reports its folder, and muster's report
merges the files of all ranks into one committed checkpoint.  Loading reads
the index and fetches exactly the pieces each rank's parameters need, so a
checkpoint saved by N workers reloads on M workers — sharded (FSDP), replicated
(DDP) or a single unwrapped model — and into a plain model after training.

    with tempfile.TemporaryDirectory() as folder:
        ckpt = save_sharded(folder, model, optimizer, extra={"epoch": epoch})
        muster.train.report(metrics, checkpoint=ckpt)        # every rank

    if (ckpt := muster.train.get_checkpoint()) is not None:
        extra = load_sharded(ckpt, model, optimizer)          # every rank
        start_epoch = extra["epoch"] + 1
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator

import torch

from muster.exceptions import InvalidArgumentError
from muster.train.checkpoint import Checkpoint

_EXTRA_FILE = "extra.pt"


def _options() -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    # Flat optimizer keys (state.<fqn>.exp_avg, param_groups.<fqn>.lr) match across world sizes.
    return StateDictOptions(flatten_optimizer_state_dict=True)


def _state(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    if optimizer is None:
        return {"model": get_model_state_dict(model, options=_options())}
    model_sd, optim_sd = get_state_dict(model, optimizer, options=_options())
    return {"model": model_sd, "optimizer": optim_sd}


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def save_sharded(
    folder: str | os.PathLike,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    extra: dict[str, Any] | None = None,
) -> Checkpoint:
    """Write this rank's shard of ``model`` (and ``optimizer``) into ``folder``.

    Every rank must call it (it runs collectives), each with a local folder of
    its own or one they share.  Pass the returned checkpoint to
    ``muster.train.report`` on every rank.

    Args:
        folder: a local folder (created if missing).
        model: the prepared model (FSDP, DDP or unwrapped).
        optimizer: its optimizer, saved sharded alongside (optional).
        extra: small picklable values (epoch, step, ...), saved by rank 0.

    Returns:
        ``Checkpoint.from_directory(folder)``.
    """
    import torch.distributed.checkpoint as dcp

    path = os.fspath(folder)
    os.makedirs(path, exist_ok=True)
    dcp.save(_state(model, optimizer), checkpoint_id=path)
    if extra is not None and _rank() == 0:
        torch.save(extra, os.path.join(path, _EXTRA_FILE))
    return Checkpoint.from_directory(path)


@contextlib.contextmanager
def _local(checkpoint: Checkpoint | str | os.PathLike) -> Iterator[str]:
    if isinstance(checkpoint, Checkpoint):
        with checkpoint.as_directory() as folder:
            yield folder
    else:
        yield os.fspath(checkpoint)


def load_sharded(
    checkpoint: Checkpoint | str | os.PathLike,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
) -> dict[str, Any]:
    """Load a ``save_sharded`` checkpoint into ``model`` (and ``optimizer``), in place.

    Every rank must call it, after ``prepare_model`` (and after creating the
    optimizer). The world size may differ from the one that saved.

    Args:
        checkpoint: a ``Checkpoint`` (such as ``muster.train.get_checkpoint()``) or a local folder.
        model: the prepared model.
        optimizer: load its state too (the checkpoint must hold one).

    Returns:
        The ``extra`` dict that was saved (empty if none).

    Raises:
        ValueError: the folder holds no sharded checkpoint, or no optimizer state was saved.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

    with _local(checkpoint) as folder:
        if not os.path.exists(os.path.join(folder, ".metadata")):
            raise InvalidArgumentError(
                f"load_sharded({checkpoint!r}): no torch.distributed.checkpoint index (.metadata) in {folder!r}. "
                "Save with muster.train.torch.save_sharded on every rank, and report the folder from every rank."
            )
        state = _state(model, optimizer)
        try:
            dcp.load(state, checkpoint_id=folder)
        except Exception as exc:
            if optimizer is not None and "optimizer" in str(exc):
                raise InvalidArgumentError(
                    f"load_sharded({checkpoint!r}, optimizer=...): the checkpoint has no optimizer state "
                    f"({exc}). Save it with save_sharded(folder, model, optimizer), or load without optimizer."
                ) from exc
            raise
        if optimizer is None:
            set_model_state_dict(model, state["model"], options=_options())
        else:
            set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"],
                           options=_options())
        extra_path = os.path.join(folder, _EXTRA_FILE)
        if os.path.exists(extra_path):
            return dict(torch.load(extra_path, map_location="cpu", weights_only=False))
    return {}
