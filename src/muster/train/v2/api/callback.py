"""``ray.train.v2.api.callback``."""

from muster.train.callback import UserCallback

__all__ = ["UserCallback"]
