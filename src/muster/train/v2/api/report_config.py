"""``ray.train.v2.api.report_config``."""

from muster.train.config import CheckpointConsistencyMode, CheckpointUploadMode

__all__ = ["CheckpointConsistencyMode", "CheckpointUploadMode"]
