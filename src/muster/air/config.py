"""``muster.air.config``: Ray's ``ray.air.config`` classes (defined in ``muster.tune.air_config``, which
``muster.tune``'s own ``RunConfig`` and ``FailureConfig`` extend, as Ray's ``ray.tune`` ones do)."""

from muster.tune.air_config import CheckpointConfig, FailureConfig, RunConfig

__all__ = ["CheckpointConfig", "FailureConfig", "RunConfig"]
