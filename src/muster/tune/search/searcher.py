"""Search algorithms that learn from results: the ``Searcher`` interface, and
``ConcurrencyLimiter`` to cap how many of its suggestions run at once."""

from __future__ import annotations

import copy
import glob
import logging
import os
import pathlib
import sys
import tempfile
import uuid
from typing import Any

import cloudpickle

from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.train.storage import Storage
from muster.tune.search.search_algorithm import SearchAlgorithm
from muster.tune.search.variant_generator import (
    FINISHED,
    BasicVariantGenerator,
    _overlay,
    _walk,
    experiment_tag,
)

_log = logging.getLogger(__name__)


class Searcher:
    """Base class of model-based search algorithms (Ray's ``Searcher`` interface).

    Subclasses implement ``suggest`` and usually ``on_trial_complete``;
    ``suggest`` returns a config, ``None`` for "nothing now, ask again later",
    or ``Searcher.FINISHED``.
    """

    FINISHED = FINISHED
    CKPT_FILE_TMPL = "searcher-state-{}.pkl"

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

    # -- state, for Tuner.restore ------------------------------------------------------------
    def save(self, checkpoint_path: str) -> None:
        """Write this searcher's state to the file ``checkpoint_path``. ``Tuner.fit()`` calls it as
        the experiment goes (through ``save_to_dir``), and ``Tuner.restore`` gives the state back
        through ``restore``, so that a resumed search goes on from what it learned. A searcher that
        does not implement it starts a restored search afresh."""
        raise NotImplementedError

    def restore(self, checkpoint_path: str) -> None:
        """Load the state that ``save`` wrote to ``checkpoint_path``."""
        raise NotImplementedError

    def get_state(self) -> dict[str, Any]:
        raise NotImplementedError

    def set_state(self, state: dict[str, Any]) -> None:
        raise NotImplementedError

    def save_to_dir(self, checkpoint_dir: str, session_str: str = "default") -> bool:
        """``save`` into ``checkpoint_dir`` under ``CKPT_FILE_TMPL``, whole or not at all (a file
        written aside, then renamed). Returns False if the searcher does not implement ``save``."""
        final = os.path.join(checkpoint_dir, self.CKPT_FILE_TMPL.format(session_str))
        partial = os.path.join(checkpoint_dir, f".{uuid.uuid4().hex}-{os.path.basename(final)}")
        try:
            self.save(partial)
        except NotImplementedError:
            return False
        if not os.path.exists(partial):
            return False
        os.replace(partial, final)
        return True

    def restore_from_dir(self, checkpoint_dir: str) -> None:
        """``restore`` from the newest state file ``save_to_dir`` left in ``checkpoint_dir``."""
        found = glob.glob(os.path.join(glob.escape(checkpoint_dir), self.CKPT_FILE_TMPL.format("*")))
        if not found:
            raise FileNotFoundError(
                f"{type(self).__name__}.restore_from_dir({checkpoint_dir!r}): no "
                f"{self.CKPT_FILE_TMPL.format('*')} there; it holds what save_to_dir() writes."
            )
        self.restore(max(found, key=os.path.getmtime))

    def add_evaluated_point(
        self,
        parameters: dict[str, Any],
        value: float,
        error: bool = False,
        pruned: bool = False,
        intermediate_values: list[float] | None = None,
    ) -> None:
        """Tell the searcher the outcome of a config evaluated outside this search, where it can use one."""
        raise NotImplementedError


def _dump(path: str, state: Any) -> None:
    with open(path, "wb") as f:
        cloudpickle.dump(state, f)


def _load(path: str) -> Any:
    with open(path, "rb") as f:
        return cloudpickle.load(f)


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

    def save(self, checkpoint_path: str) -> None:
        if not isinstance(self.searcher, Searcher):
            raise NotImplementedError  # a BasicVariantGenerator: Tuner.restore counts what it made
        save_wrapped(checkpoint_path, {"live": self._live, "batch_done": self._batch_done}, self.searcher)

    def restore(self, checkpoint_path: str) -> None:
        if not isinstance(self.searcher, Searcher):
            raise NotImplementedError
        state = restore_wrapped(checkpoint_path, self.searcher)
        self._live, self._batch_done = state["live"], state["batch_done"]


def save_wrapped(checkpoint_path: str, own: dict[str, Any], inner: Searcher) -> None:
    """Write a wrapping searcher's ``own`` state and the ``inner`` searcher's (what its ``save`` writes)
    to the one file ``checkpoint_path``. Raises NotImplementedError, writing nothing, where ``inner``
    keeps no state: a restored search then starts afresh, and says so."""
    aside = checkpoint_path + ".inner"
    inner.save(aside)
    try:
        with open(aside, "rb") as f:
            _dump(checkpoint_path, {**own, "inner": f.read()})
    finally:
        os.remove(aside)


def restore_wrapped(checkpoint_path: str, inner: Searcher) -> dict[str, Any]:
    """Give ``inner`` its state back from a file ``save_wrapped`` wrote; returns the wrapper's own."""
    state = _load(checkpoint_path)
    aside = checkpoint_path + ".inner"
    with open(aside, "wb") as f:
        f.write(state.pop("inner"))
    try:
        inner.restore(aside)
    finally:
        os.remove(aside)
    return dict(state)


class SearchGenerator(SearchAlgorithm):
    """Drives a ``Searcher`` for ``num_samples`` trials; constants of the
    param_space the searcher does not handle are merged into each config.

    The Tuner wraps a ``TuneConfig(search_alg=)`` searcher in one; passing
    ``SearchGenerator(searcher)`` itself does the same, as in Ray.

    Raises:
        InvalidTypeError: ``searcher`` is not a ``Searcher``.
    """

    def __init__(self, searcher: Searcher):
        if not isinstance(searcher, Searcher):
            raise InvalidTypeError(
                f"SearchGenerator({searcher!r}): pass a muster.tune.search.Searcher (OptunaSearch, a "
                "ConcurrencyLimiter, a Searcher subclass of your own); a BasicVariantGenerator goes to "
                "TuneConfig(search_alg=...) as it is."
            )
        self.searcher = searcher
        self._save_failed = False
        self.total = 0
        self._made = 0
        self._constants: dict[str, Any] = {}
        self._suggested: dict[str, dict[str, Any]] = {}  # each new trial's suggestion, until it is made

    @property
    def metric(self) -> str | None:
        return self.searcher.metric

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any], **spec: Any) -> bool:
        return self.searcher.set_search_properties(metric, mode, config, **spec)

    def setup(self, space: dict[str, Any], num_samples: int, skip: int = 0) -> None:
        self.total, self._made = (sys.maxsize if num_samples == -1 else num_samples), skip  # -1: without end
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
        self._suggested[trial_id] = config
        return _overlay(copy.deepcopy(self._constants), config)

    def experiment_tag(self, index: int, config: dict[str, Any]) -> str:
        """The tag of the ``index``-th trial (from 0) as Ray's SearchGenerator makes it: counted
        from 1, over every value of the config (nested dicts flattened)."""
        return experiment_tag(index + 1, dict(_leaves(config)))

    def evaluated_params(self, trial_id: str, config: dict[str, Any]) -> dict[str, Any]:
        """Ray's ``Trial.evaluated_params``: the searcher's suggestion for the trial (without the
        space's constants), nested dicts flattened with ``/``."""
        suggested = self._suggested.pop(trial_id, {})
        return {"/".join(str(key) for key in path): value for path, value in _leaves(suggested)}

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        self.searcher.on_trial_complete(trial_id, result=result, error=error)

    def save_to_dir(self, checkpoint_dir: str, session_str: str = "default") -> bool:
        try:
            return self.searcher.save_to_dir(checkpoint_dir, session_str)
        except Exception:  # a user's searcher that cannot save must not stop the experiment
            if not self._save_failed:
                _log.warning("%s.save() failed; a restored search would start it afresh",
                             type(self.searcher).__name__, exc_info=True)
            self._save_failed = True
            return False

    def restore_from_dir(self, checkpoint_dir: str) -> None:
        self.searcher.restore_from_dir(checkpoint_dir)

    def save_to(self, experiment: Storage) -> None:
        """Keep the searcher's state in the experiment folder, for ``Tuner.restore``."""
        with tempfile.TemporaryDirectory() as d:
            if self.save_to_dir(d):
                for name in os.listdir(d):
                    data = pathlib.Path(d, name).read_bytes()
                    experiment.write_bytes(experiment.join(experiment.run_dir, name), data)

    def restore_from(self, experiment: Storage) -> bool:
        """Give the searcher the state ``save_to`` kept; False if there is none."""
        name = self.searcher.CKPT_FILE_TMPL.format("default")
        path = experiment.join(experiment.run_dir, name)
        if not experiment.exists(path):
            return False
        with tempfile.TemporaryDirectory() as d:
            pathlib.Path(d, name).write_bytes(experiment.read_bytes(path))
            try:
                self.restore_from_dir(d)
            except Exception as exc:  # noqa: BLE001 - any failure to read it back says the same
                raise InvalidArgumentError(
                    f"Tuner.restore: the search state {path} is unreadable ({type(exc).__name__}: {exc}); "
                    f"{type(self.searcher).__name__}.restore() could not load it. Delete that file to restore "
                    "the experiment with the search started afresh (its trials are kept), or put back a copy."
                ) from exc
        return True


def _leaves(config: dict[str, Any], path: tuple = ()) -> list[tuple[tuple, Any]]:
    out: list[tuple[tuple, Any]] = []
    for key, value in config.items():
        out += _leaves(value, (*path, key)) if isinstance(value, dict) else [((*path, key), value)]
    return out


def _without_domains(space: Any) -> Any:
    """The param_space with every domain and grid removed (what a searcher does not sample)."""
    searchable = {path for path, _ in _walk(space)}

    def strip(node: Any, path: tuple) -> Any:
        if isinstance(node, dict):
            return {k: strip(v, (*path, k)) for k, v in node.items() if (*path, k) not in searchable}
        return node

    return strip(space, ())
