"""``muster.air``: Ray's AIR names, kept for older scripts (``from ray.air import ScalingConfig``),
and its experiment-tracking integrations (``muster.air.integrations.mlflow``).

The classes are ``muster.train``'s own, except ``CheckpointConfig``: as Ray's ``ray.air.CheckpointConfig`` is
the Tune/AIR one, which still takes ``checkpoint_frequency``/``checkpoint_at_end``, this is ``muster.tune``'s.
``ray.air.session`` became ``ray.train``'s functions.
"""

from __future__ import annotations

from typing import Any

from muster.train import Checkpoint, FailureConfig, Result, RunConfig, ScalingConfig
from muster.tune.tune_config import CheckpointConfig

__all__ = ["Checkpoint", "CheckpointConfig", "FailureConfig", "Result", "RunConfig", "ScalingConfig"]


def __getattr__(name: str) -> Any:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.air", name)
