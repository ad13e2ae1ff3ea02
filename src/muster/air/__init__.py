"""``muster.air``: Ray's AIR names, kept for older scripts (``from ray.air import ScalingConfig``),
and its experiment-tracking integrations (``muster.air.integrations.mlflow``).

``ScalingConfig`` and ``Checkpoint`` are ``muster.train``'s; ``Result`` is Tune's (``muster.tune.Result``, the
base of ``muster.train.Result``), as Ray's ``ray.air.Result`` is. ``RunConfig``, ``FailureConfig`` and
``CheckpointConfig`` are Ray's legacy (Tune's) classes, as Ray's ``ray.air`` ones are, not Ray Train V2's: they
take Tune's options (``stop``, ``fail_fast="raise"``, ``checkpoint_frequency``...) and refuse Train V2's
(see ``muster.air.config``). ``ray.air.session`` became ``ray.train``'s functions.
"""

from __future__ import annotations

from typing import Any

from muster.air.config import CheckpointConfig, FailureConfig, RunConfig
from muster.train import Checkpoint, ScalingConfig
from muster.train._internal.result_base import Result

__all__ = ["Checkpoint", "CheckpointConfig", "FailureConfig", "Result", "RunConfig", "ScalingConfig"]


def __getattr__(name: str) -> Any:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.air", name)
