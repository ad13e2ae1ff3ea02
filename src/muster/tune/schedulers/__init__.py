"""Trial schedulers: FIFO, ASHA, HyperBand, median stopping, population-based training."""

from typing import Any

from muster.tune.schedulers.async_hyperband import (
    ASHAScheduler,
    AsyncHyperBandScheduler,
)
from muster.tune.schedulers.hyperband import HyperBandScheduler
from muster.tune.schedulers.median_stopping import MedianStoppingRule
from muster.tune.schedulers.pbt import PopulationBasedTraining
from muster.tune.schedulers.trial_scheduler import FIFOScheduler, TrialScheduler


def __getattr__(name: str) -> Any:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.tune.schedulers", name)


__all__ = [
    "ASHAScheduler",
    "AsyncHyperBandScheduler",
    "FIFOScheduler",
    "HyperBandScheduler",
    "MedianStoppingRule",
    "PopulationBasedTraining",
    "TrialScheduler",
]
