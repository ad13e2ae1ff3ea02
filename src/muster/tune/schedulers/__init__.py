"""Trial schedulers: FIFO, ASHA, HyperBand, median stopping, population-based training (and its replay), PB2."""

from typing import Any

from muster.tune.schedulers.async_hyperband import (
    ASHAScheduler,
    AsyncHyperBandScheduler,
)
from muster.tune.schedulers.hyperband import HyperBandScheduler
from muster.tune.schedulers.median_stopping import MedianStoppingRule
from muster.tune.schedulers.pb2 import PB2
from muster.tune.schedulers.pbt import PopulationBasedTraining
from muster.tune.schedulers.pbt_replay import PopulationBasedTrainingReplay
from muster.tune.schedulers.trial_scheduler import FIFOScheduler, TrialScheduler


#: ``create_scheduler``'s names (Ray's), for the schedulers muster has.
SCHEDULERS: dict[str, type] = {
    "fifo": FIFOScheduler, "async_hyperband": AsyncHyperBandScheduler, "asynchyperband": AsyncHyperBandScheduler,
    "asha": ASHAScheduler, "median_stopping_rule": MedianStoppingRule, "medianstopping": MedianStoppingRule,
    "hyperband": HyperBandScheduler, "pbt": PopulationBasedTraining, "pb2": PB2,
    "pbt_replay": PopulationBasedTrainingReplay,
}


def create_scheduler(scheduler: str, **kwargs: Any) -> TrialScheduler:
    """A scheduler by Ray's name (``"asha"``, ``"hyperband"``, ``"pbt"``...), made with ``kwargs``.

    Raises:
        ValueError: a name muster has no scheduler for.
    """
    from muster.exceptions import InvalidArgumentError

    cls = SCHEDULERS.get(str(scheduler).lower())
    if cls is None:
        raise InvalidArgumentError(f"create_scheduler({scheduler!r}): muster's schedulers are {sorted(SCHEDULERS)} "
                                   "(Ray's hb_bohb and resource_changing are not ported).")
    made: TrialScheduler = cls(**kwargs)
    return made


def __getattr__(name: str) -> Any:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.tune.schedulers", name)


__all__ = [
    "ASHAScheduler",
    "AsyncHyperBandScheduler",
    "FIFOScheduler",
    "HyperBandScheduler",
    "MedianStoppingRule",
    "PB2",
    "PopulationBasedTraining",
    "PopulationBasedTrainingReplay",
    "TrialScheduler",
    "create_scheduler",
]
