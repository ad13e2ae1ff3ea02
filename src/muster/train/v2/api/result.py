"""``ray.train.v2.api.result``."""

from muster.train.result import Result

__all__ = ["Result"]
