"""Ray's ``ray.tune.experiment.trial``: ``from muster.tune.experiment.trial import Trial``."""

from muster.tune.trial import Trial

__all__ = ["Trial"]
