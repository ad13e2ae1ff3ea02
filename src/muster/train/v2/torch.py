"""``ray.train.v2.torch`` -> :mod:`muster.train.torch`."""

from muster.train.torch import *  # noqa: F403
from muster.train.torch import __all__  # noqa: F401
