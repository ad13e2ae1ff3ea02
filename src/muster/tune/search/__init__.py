"""Search algorithms: grid and random (``BasicVariantGenerator``), ``OptunaSearch`` (extra ``muster[tune]``),
and ``ConcurrencyLimiter``; ``SearchAlgorithm``, their base, and ``SearchGenerator``, which runs a ``Searcher``."""

from typing import Any

from muster.tune.search.repeater import Repeater
from muster.tune.search.search_algorithm import SearchAlgorithm
from muster.tune.search.searcher import ConcurrencyLimiter, SearchGenerator, Searcher
from muster.tune.search.sample import grid_search
from muster.tune.search.variant_generator import BasicVariantGenerator


def create_searcher(search_alg: str, **kwargs: Any) -> Any:
    """A search algorithm by Ray's name: ``"variant_generator"`` or ``"random"`` (the default
    ``BasicVariantGenerator``) or ``"optuna"``, made with ``kwargs``.

    Raises:
        ValueError: a name muster has no search algorithm for.
    """
    from muster.exceptions import InvalidArgumentError

    name = str(search_alg).lower()
    if name in ("variant_generator", "random"):
        return BasicVariantGenerator(**kwargs)
    if name == "optuna":
        from muster.tune.search.optuna import OptunaSearch

        return OptunaSearch(**kwargs)
    raise InvalidArgumentError(f"create_searcher({search_alg!r}): muster's search algorithms are 'variant_generator' "
                               "('random') and 'optuna'; Ray's others (hyperopt, bayesopt, ax, ...) are not ported.")


def __getattr__(name: str) -> Any:
    if name == "OptunaSearch":  # optuna is imported only when asked for
        from muster.tune.search.optuna import OptunaSearch

        return OptunaSearch
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.tune.search", name)


__all__ = ["BasicVariantGenerator", "ConcurrencyLimiter", "OptunaSearch", "Repeater", "SearchAlgorithm",
           "SearchGenerator", "Searcher", "create_searcher", "grid_search"]
