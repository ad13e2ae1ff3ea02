"""``SearchAlgorithm``: Ray's base class of the search algorithms that make the trials' configs.

muster's Tuner runs two of them, as Ray's does: ``BasicVariantGenerator`` (grid and random search, the
default) and ``SearchGenerator``, which drives a ``Searcher`` (``OptunaSearch``, a ``ConcurrencyLimiter``,
a searcher of your own). Ray's interface for writing a third kind (``next_trial``/``add_configurations``
over Ray's own ``Trial`` objects) is not ported: a subclass of your own is refused, naming ``Searcher``.
"""

from __future__ import annotations

from typing import Any


class SearchAlgorithm:
    """What the Tuner asks of a search algorithm besides making configs.

    ``set_search_properties`` takes the Tuner's metric, mode and param_space (False: refused);
    ``on_trial_result``/``on_trial_complete`` hear about the trials it made; ``total_samples``
    is how many configs it makes in all; ``is_finished``/``set_finished`` say whether it makes more.
    """

    _finished = False
    _metric: str | None = None

    @property
    def metric(self) -> str | None:
        return self._metric

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any], **spec: Any) -> bool:
        """Take the Tuner's ``metric``, ``mode`` and ``config`` (its param_space); True if accepted."""
        self._metric = self._metric or metric
        return True

    @property
    def total_samples(self) -> int:
        """How many configs it makes in all (known once the Tuner set it up)."""
        return int(getattr(self, "total", 0))

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        """An intermediate result of one of its trials."""

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        """One of its trials ended (``error``: it failed); ``result`` is its last result."""

    def is_finished(self) -> bool:
        return self._finished

    def set_finished(self) -> None:
        self._finished = True


__all__ = ["SearchAlgorithm"]
