"""``prepare_trainer``: check that a Lightning Trainer is set up to run on muster's workers."""

from __future__ import annotations

import warnings

import lightning.pytorch as pl

import muster.train as train
from muster.exceptions import InvalidTypeError, TrainerSetupError
from muster.train.lightning.environment import MusterLightningEnvironment
from muster.train.lightning.strategies import MusterDDPStrategy, MusterFSDPStrategy


def prepare_trainer(trainer: pl.Trainer) -> pl.Trainer:
    """Validate ``trainer`` for this run and return it (Ray's ``prepare_trainer``).

    Call it inside ``train_loop_per_worker`` after building the Trainer.

    Raises:
        TypeError: ``trainer`` is not a ``lightning.pytorch.Trainer``.
        TrainerSetupError: (a ``RuntimeError``) its cluster environment is not ``MusterLightningEnvironment``,
            or its world size differs from the run's (each worker would train alone).
    """
    if not isinstance(trainer, pl.Trainer):
        raise InvalidTypeError(
            f"prepare_trainer expects a lightning.pytorch.Trainer, got {type(trainer).__name__}. "
            "(muster supports the `lightning` package; import Trainer from lightning.pytorch.)"
        )
    strategy = trainer.strategy
    if not isinstance(strategy, (MusterDDPStrategy, MusterFSDPStrategy)):
        warnings.warn(
            f"prepare_trainer: Trainer(strategy={type(strategy).__name__}) is not one of muster's; pass "
            "strategy=MusterDDPStrategy() or MusterFSDPStrategy() (RayDDPStrategy / RayFSDPStrategy) so Lightning "
            "uses muster's devices, ranks and process group.",
            stacklevel=2,
        )
    environment = getattr(strategy, "cluster_environment", None)
    if environment is not None and not isinstance(environment, MusterLightningEnvironment):
        raise TrainerSetupError(
            f"prepare_trainer: the Trainer's cluster environment is {type(environment).__name__}; pass "
            "plugins=[MusterLightningEnvironment()] (RayLightningEnvironment) so Lightning takes its ranks from muster."
        )
    expected = train.get_context().get_world_size()
    if trainer.world_size != expected:
        raise TrainerSetupError(
            f"prepare_trainer: the Trainer's world size is {trainer.world_size} but this run has {expected} workers "
            f"(strategy {type(strategy).__name__}); with a single-device strategy each worker would train alone. "
            "Use strategy=MusterDDPStrategy() or MusterFSDPStrategy(), devices='auto' and num_nodes=1."
        )
    return trainer
