"""``muster.tune.analysis``: Ray's ``ray.tune.analysis`` (``ExperimentAnalysis``, what ``tune.run`` returns)."""

from muster.tune.analysis.experiment_analysis import ExperimentAnalysis

__all__ = ["ExperimentAnalysis"]
