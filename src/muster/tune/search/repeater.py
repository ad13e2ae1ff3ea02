"""Ray's ``Repeater``: each configuration the wrapped searcher suggests runs ``repeat`` times (seeds, noisy
objectives), and the searcher hears of it once, with the mean of the repeats' metric."""

from __future__ import annotations

import copy
import math
from typing import Any

from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.tune.search.searcher import Searcher, restore_wrapped, save_wrapped

#: the config key that tells a trial which repeat it is (Ray's name)
TRIAL_INDEX = "__trial_index__"


class _Group:
    """The trials of one suggested configuration."""

    def __init__(self, first_trial_id: str, config: dict[str, Any], size: int):
        self.first_trial_id, self.config, self.size = first_trial_id, config, size
        self.trials: list[str] = []
        self.scores: dict[str, float] = {}
        self.ended: set[str] = set()

    def full(self) -> bool:
        return len(self.trials) >= self.size


class Repeater(Searcher):
    """Runs each configuration of ``searcher`` ``repeat`` times; with ``set_index``, each trial's config
    holds ``__trial_index__`` (0 .. repeat-1). When all the repeats of a configuration have ended, the
    searcher's ``on_trial_complete`` gets the first trial's id and the mean of their metric (NaN where none
    reported one). Set ``num_samples`` to a multiple of ``repeat``.

    Its state (the groups of repeats, the scores they collected) is saved with the wrapped searcher's, so
    ``Tuner.restore`` goes on with a group left part-way (Ray's ``save`` keeps only the wrapped searcher's).
    """

    def __init__(self, searcher: Searcher, repeat: int = 1, set_index: bool = True):
        if not isinstance(searcher, Searcher):
            raise InvalidTypeError(f"Repeater({searcher!r}): wrap a Searcher (OptunaSearch(...), your own subclass).")
        if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
            raise InvalidArgumentError(f"Repeater(repeat={repeat!r}): pass how many times to run each "
                                       "configuration, an integer >= 1.")
        super().__init__(searcher.metric, searcher.mode)
        self.searcher, self.repeat, self._set_index = searcher, repeat, set_index
        self._current: _Group | None = None
        self._group_of: dict[str, _Group] = {}

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any], **spec: Any) -> bool:
        accepted = self.searcher.set_search_properties(metric, mode, config, **spec)
        self.metric, self.mode = self.searcher.metric, self.searcher.mode
        return accepted

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if self._current is None or self._current.full():
            config = self.searcher.suggest(trial_id)
            if not isinstance(config, dict):
                return config  # None (ask later) or FINISHED
            self._current = _Group(trial_id, config, self.repeat)
        group = self._current
        config = copy.deepcopy(group.config)
        if self._set_index:
            config[TRIAL_INDEX] = len(group.trials)
        group.trials.append(trial_id)
        self._group_of[trial_id] = group
        return config

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        """Intermediate results are not passed on: the searcher hears of a configuration once, at the end."""

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        group = self._group_of.get(trial_id)
        if group is None:
            return
        value = (result or {}).get(self.metric) if self.metric else None
        group.scores[trial_id] = float(value) if isinstance(value, (int, float)) else math.nan
        group.ended.add(trial_id)
        if group.full() and group.ended == set(group.trials):
            scores = [s for s in group.scores.values() if not math.isnan(s)]
            mean = sum(scores) / len(scores) if scores else math.nan
            self.searcher.on_trial_complete(group.first_trial_id, result={self.metric: mean} if self.metric else None,
                                            error=error and not scores)

    # -- state, for Tuner.restore ------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """The repeater's own state, without the wrapped searcher (as Ray's)."""
        return {"current": self._current, "group_of": self._group_of}

    def set_state(self, state: dict[str, Any]) -> None:
        self._current, self._group_of = state["current"], state["group_of"]

    def save(self, checkpoint_path: str) -> None:
        save_wrapped(checkpoint_path, {"repeater": self.get_state()}, self.searcher)

    def restore(self, checkpoint_path: str) -> None:
        self.set_state(restore_wrapped(checkpoint_path, self.searcher)["repeater"])
