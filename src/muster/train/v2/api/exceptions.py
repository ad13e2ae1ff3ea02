"""``ray.train.v2.api.exceptions``: every name is muster's ``TrainingFailedError``."""

from muster.train import ControllerError, PreemptionError, TrainingFailedError, WorkerGroupError

__all__ = ["ControllerError", "PreemptionError", "TrainingFailedError", "WorkerGroupError"]
