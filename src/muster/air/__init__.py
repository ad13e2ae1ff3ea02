"""``muster.air``: Ray's AIR names, kept for older scripts (``from ray.air import ScalingConfig``),
and its experiment-tracking integrations (``muster.air.integrations.mlflow``).

The classes are ``muster.train``'s own; ``ray.air.session`` became ``ray.train``'s functions.
"""

from __future__ import annotations

from typing import Any

from muster.train import Checkpoint, CheckpointConfig, FailureConfig, Result, RunConfig, ScalingConfig

__all__ = ["Checkpoint", "CheckpointConfig", "FailureConfig", "Result", "RunConfig", "ScalingConfig"]


def __getattr__(name: str) -> Any:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.air", name)
