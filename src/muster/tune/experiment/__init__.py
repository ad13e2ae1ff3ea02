"""Ray's ``ray.tune.experiment``: the :class:`Trial` its callbacks and schedulers are typed with."""

from muster.tune.trial import Trial

__all__ = ["Trial"]
