"""``ray.train.v2`` -> ``muster.train.v2``: Ray Train V2's module paths, for scripts that import from them.

muster's Train *is* the V2 API (``muster.train``); these modules re-export it.
"""

from muster.train import *  # noqa: F403
from muster.train import __all__  # noqa: F401
