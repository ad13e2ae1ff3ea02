"""Search algorithms: grid and random (``BasicVariantGenerator``), ``OptunaSearch`` (extra ``muster[tune]``),
and ``ConcurrencyLimiter``."""

from typing import Any

from muster.tune.search.searcher import ConcurrencyLimiter, Searcher
from muster.tune.search.variant_generator import BasicVariantGenerator


def __getattr__(name: str) -> Any:
    if name == "OptunaSearch":  # optuna is imported only when asked for
        from muster.tune.search.optuna import OptunaSearch

        return OptunaSearch
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.tune.search", name)


__all__ = ["BasicVariantGenerator", "ConcurrencyLimiter", "OptunaSearch", "Searcher"]
