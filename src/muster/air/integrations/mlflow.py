"""``ray.air.integrations.mlflow``: ``MLflowLoggerCallback`` for ``RunConfig(callbacks=[...])``.

The callback is :class:`muster.observe.loggers.MLflowLoggerCallback`; see
docs/observability.md.
"""

from __future__ import annotations

from typing import Any

from muster.observe.loggers import MLflowLoggerCallback

__all__ = ["MLflowLoggerCallback"]


def __getattr__(name: str) -> Any:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.air.integrations.mlflow", name)
