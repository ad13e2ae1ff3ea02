"""Ray's ``ray.tune.experiment``: :class:`Experiment` (``tune.run_experiments``' unit) and the
:class:`Trial` its callbacks and schedulers are typed with."""

from muster.tune.experiment.experiment import Experiment
from muster.tune.trial import Trial

__all__ = ["Experiment", "Trial"]
