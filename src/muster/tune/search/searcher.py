"""Search algorithms that learn from results: the ``Searcher`` interface, and
``ConcurrencyLimiter`` to cap how many of its suggestions run at once."""

from __future__ import annotations

import copy
from typing import Any

from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.tune.search.variant_generator import (
    FINISHED,
    BasicVariantGenerator,
    _overlay,
    _walk,
)


class Searcher:
    """Base class of model-based search algorithms (Ray's ``Searcher`` interface).

    Subclasses implement ``suggest`` and usually ``on_trial_complete``;
    ``suggest`` returns a config, ``None`` for "nothing now, ask again later",
    or ``Searcher.FINISHED``.
    """

    FINISHED = FINISHED

    def __init__(self, metric: str | None = None, mode: str | None = None):
        if mode not in (None, "min", "max"):
            raise InvalidArgumentError(f"{type(self).__name__}(mode={mode!r}): use 'min' or 'max'.")
        self.metric, self.mode = metric, mode

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any], **spec: Any) -> bool:
        """Take the Tuner's metric, mode and param_space unless set already. Returns True if accepted."""
        self.metric = self.metric or metric
        self.mode = self.mode or mode
        return True

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        raise NotImplementedError

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        """An intermediate result of a trial this searcher suggested."""

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        """A trial ended (``error``: it failed); ``result`` is its last result."""


class ConcurrencyLimiter(Searcher):
    """Lets at most ``max_concurrent`` of ``searcher``'s trials run at once.

    Args:
        searcher: the search algorithm to limit.
        max_concurrent: the cap (>= 1).
        batch: wait until the whole batch of ``max_concurrent`` trials ended
            before suggesting more.
    """

    def __init__(self, searcher: Searcher | BasicVariantGenerator, max_concurrent: int, batch: bool = False):
        if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int) or max_concurrent < 1:
            raise InvalidArgumentError(f"ConcurrencyLimiter(max_concurrent={max_concurrent!r}): use an integer >= 1.")
        super().__init__(getattr(searcher, "metric", None), getattr(searcher, "mode", None))
        self.searcher, self.max_concurrent, self.batch = searcher, max_concurrent, batch
        self._live: set[str] = set()
        self._batch_done = 0

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any], **spec: Any) -> bool:
        inner = getattr(self.searcher, "set_search_properties", None)
        return inner(metric, mode, config, **spec) if inner else True

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if len(self._live) >= self.max_concurrent or (self.batch and self._batch_done and self._live):
            return None
        if self.batch and not self._live:
            self._batch_done = 0
        config = self.searcher.suggest(trial_id)
        if isinstance(config, dict):
            self._live.add(trial_id)
        return config

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        if trial_id in self._live:
            self._live.discard(trial_id)
            self._batch_done += 1
        self.searcher.on_trial_complete(trial_id, result=result, error=error)


class SearchGenerator:
    """Drives a ``Searcher`` for ``num_samples`` trials; constants of the
    param_space the searcher does not handle are merged into each config."""

    def __init__(self, searcher: Searcher):
        self.searcher = searcher
        self.total = 0
        self._made = 0
        self._constants: dict[str, Any] = {}

    def setup(self, space: dict[str, Any], num_samples: int, skip: int = 0) -> None:
        self.total, self._made = num_samples, skip
        self._constants = _without_domains(space)

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if self._made >= self.total:
            return FINISHED
        config = self.searcher.suggest(trial_id)
        if config is None or config == FINISHED:
            return config
        if not isinstance(config, dict):
            raise InvalidTypeError(
                f"{type(self.searcher).__name__}.suggest() returned {config!r}; a Searcher returns a config dict, "
                "None (ask again later) or Searcher.FINISHED."
            )
        self._made += 1
        return _overlay(copy.deepcopy(self._constants), config)

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        self.searcher.on_trial_complete(trial_id, result=result, error=error)


def _without_domains(space: Any) -> Any:
    """The param_space with every domain and grid removed (what a searcher does not sample)."""
    searchable = {path for path, _ in _walk(space)}

    def strip(node: Any, path: tuple) -> Any:
        if isinstance(node, dict):
            return {k: strip(v, (*path, k)) for k, v in node.items() if (*path, k) not in searchable}
        return node

    return strip(space, ())
