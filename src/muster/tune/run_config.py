"""``muster.tune.RunConfig`` and ``FailureConfig``: Ray Tune's, which extend Ray's legacy ``ray.air`` classes
(``muster.tune.air_config``) and change nothing but where they come from, as Ray's ``ray.tune`` ones do.

So they take Tune's options (``stop``, ``callbacks``, ``progress_reporter``, ``fail_fast="raise"``...) and
refuse Ray Train V2's (``worker_runtime_env``, ``logging_config``, ``controller_failure_limit``, the
preemption settings), which are ``muster.train.RunConfig``'s and ``FailureConfig``'s.
"""

from __future__ import annotations

from typing import ClassVar

from muster.tune import air_config


class FailureConfig(air_config.FailureConfig):
    """Ray Tune's ``FailureConfig``: ``max_failures`` and ``fail_fast`` (see ``muster.air.FailureConfig``)."""

    _package: ClassVar[str] = "tune"


class RunConfig(air_config.RunConfig):
    """Ray Tune's ``RunConfig`` (see ``muster.air.RunConfig``); its default ``failure_config`` is a
    ``muster.tune.FailureConfig``, and its ``checkpoint_config`` a ``muster.tune.CheckpointConfig``."""

    _package: ClassVar[str] = "tune"

    def __post_init__(self) -> None:
        self.failure_config = self.failure_config or FailureConfig()
        super().__post_init__()


__all__ = ["FailureConfig", "RunConfig"]
