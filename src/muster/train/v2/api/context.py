"""``ray.train.v2.api.context``."""

from muster.train.context import TrainContext

__all__ = ["TrainContext"]
