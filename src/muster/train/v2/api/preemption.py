"""``ray.train.v2.api.preemption``."""

from muster.train.reported import PreemptionInfo

__all__ = ["PreemptionInfo"]
