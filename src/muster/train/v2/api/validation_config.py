"""``ray.train.v2.api.validation_config``."""

from muster.train.validation import ValidationConfig, ValidationFn, ValidationTaskConfig

__all__ = ["ValidationConfig", "ValidationFn", "ValidationTaskConfig"]
