"""``ray.train.v2.api.reported_checkpoint``."""

from muster.train.reported import ReportedCheckpoint, ReportedCheckpointStatus

__all__ = ["ReportedCheckpoint", "ReportedCheckpointStatus"]
