"""Turning a ``param_space`` into trial configs: grids crossed, domains sampled.

``BasicVariantGenerator`` is the default search algorithm (random search plus
grid search, as in Ray): every grid point is tried ``num_samples`` times, and
each time the random domains are drawn afresh. Each of ``points_to_evaluate``
takes the place of one of those ``num_samples`` passes, as in Ray.
"""

from __future__ import annotations

import copy
import itertools
import random
import re
import sys
from collections.abc import Iterator
from typing import Any

from muster.exceptions import InvalidArgumentError
from muster.tune.search.sample import Domain, Function
from muster.tune.search.search_algorithm import SearchAlgorithm

Path = tuple[Any, ...]
FINISHED = "FINISHED"


def _walk(space: Any, path: Path = ()) -> Iterator[tuple[Path, Any]]:
    """Every leaf that is a grid or a domain, with its path of keys."""
    if isinstance(space, dict):
        if set(space) == {"grid_search"}:
            yield path, space
            return
        for key, value in space.items():
            yield from _walk(value, (*path, key))
    elif isinstance(space, Domain):
        yield path, space
    elif isinstance(space, (list, tuple)):
        for i, value in enumerate(space):
            yield from _walk(value, (*path, i))


def _set(config: Any, path: Path, value: Any) -> None:
    for key in path[:-1]:
        config = config[key]
    config[path[-1]] = value


def grid_points(space: dict[str, Any]) -> list[dict[Path, Any]]:
    """The cartesian product of every ``grid_search`` in ``space`` (one empty point without any), in
    Ray's order: the grids sorted by their paths, the first one's values changing fastest
    (``a=1,b=3``, ``a=2,b=3``, ``a=1,b=4``, ...)."""
    grids = sorted(((path, leaf["grid_search"]) for path, leaf in _walk(space) if isinstance(leaf, dict)),
                   key=lambda grid: [(type(key).__name__, key) for key in grid[0]])
    if not grids:
        return [{}]
    paths = [p for p, _ in grids]
    return [dict(zip(paths, values[::-1])) for values in itertools.product(*(v for _, v in reversed(grids)))]


def resolve(space: dict[str, Any], point: dict[Path, Any], rng: random.Random,
            fixed: dict[Path, Any] | None = None) -> dict[str, Any]:
    """One concrete config: the grid ``point`` filled in, every domain drawn (those in ``fixed`` take its value)."""
    config = _unlist(copy.deepcopy(space))
    for path, value in point.items():
        _set(config, path, value)
    for _ in range(_NESTING):  # a drawn value may hold domains of its own (a choice of dicts): drawn in turn
        drawn = [(path, leaf) for path, leaf in _walk(config) if isinstance(leaf, Domain)
                 and not isinstance(leaf, Function)]
        if not drawn:
            break
        for path, leaf in drawn:
            _set(config, path, fixed[path] if fixed is not None and path in fixed else leaf.draw(rng))
    for path, leaf in list(_walk(config)):  # sample_from last: it may read the values drawn above
        if isinstance(leaf, Function):
            _set(config, path, leaf.draw(rng, config))
    return _tuples_back(config, space)


_NESTING = 16  # how deep domains inside drawn values are drawn (Ray's choice of dicts of domains)


def _unlist(space: Any) -> Any:
    """Tuples become lists so a path can be assigned into them."""
    if isinstance(space, dict):
        return {k: _unlist(v) for k, v in space.items()}
    if isinstance(space, tuple):
        return [_unlist(v) for v in space]
    if isinstance(space, list):
        return [_unlist(v) for v in space]
    return space


def _tuples_back(config: Any, space: Any) -> Any:
    """The lists ``_unlist`` made of ``space``'s tuples are tuples again: a trial's config keeps the
    tuples of its space (``{"betas": (0.9, 0.999)}``), as Ray's does."""
    if isinstance(space, dict) and isinstance(config, dict) and set(space) != {"grid_search"}:
        return {k: _tuples_back(v, space[k]) if k in space else v for k, v in config.items()}
    if isinstance(space, (list, tuple)) and isinstance(config, list) and len(config) == len(space):
        items = [_tuples_back(c, s) for c, s in zip(config, space)]
        return tuple(items) if isinstance(space, tuple) else items
    return config


def experiment_tag(index: int, values: dict[Path, Any]) -> str:
    """Ray's ``experiment_tag``: ``"<index>_<key>=<value>,..."`` (see ``format_vars``); just
    ``"<index>"`` without any value."""
    return f"{index}_{format_vars(values)}" if values else str(index)


def format_vars(values: dict[Path, Any]) -> str:
    """``"key=value,..."`` as Ray's ``format_vars``: one per value, by the last key of its path
    (floats to 4 places, other values made safe for a folder name), in order of their paths."""
    ordered = sorted(values.items(), key=lambda x: str(x[0]))
    return ",".join(f"{_tag_value(path[-1])}={_tag_value(v)}" for path, v in ordered)


def _tag_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return re.sub(r"[^a-zA-Z0-9_-]+", "_", str(value)).strip("_")


def _at(config: Any, path: Path) -> Any:
    for key in path:
        config = config[key]
    return config


class BasicVariantGenerator(SearchAlgorithm):
    """Grid search crossed with random search; Ray's default search algorithm.

    Args:
        points_to_evaluate: configs (complete or partial) to try first; a
            partial one has its missing keys drawn from the space, and makes
            one trial per grid point of the grids it leaves open. Each point
            counts as one of ``num_samples`` (as in Ray): ``num_samples=3``
            with one point is the point plus 2 passes over the space; with
            as many points as samples or more, only the points are tried.
        max_concurrent: at most this many of its trials at once (0: no limit).
        random_state: a seed (or ``random.Random``) for reproducible draws. Without one the
            draws follow numpy's global generator, as Ray's do: ``np.random.seed(...)`` before
            making the search makes its configs repeat.
        constant_grid_search: draw the random values once per pass over the grid and keep them for
            every grid point of that pass, as Ray's (default: new draws for each grid point). A
            ``sample_from`` function is still called for each grid point.
    """

    def __init__(
        self,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        max_concurrent: int = 0,
        random_state: int | random.Random | None = None,
        constant_grid_search: bool = False,
    ):
        if points_to_evaluate is not None and not all(isinstance(p, dict) for p in points_to_evaluate):
            raise InvalidArgumentError(
                f"BasicVariantGenerator(points_to_evaluate={points_to_evaluate!r}): pass a list of config dicts."
            )
        if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int) or max_concurrent < 0:
            raise InvalidArgumentError(
                f"BasicVariantGenerator(max_concurrent={max_concurrent!r}): use an integer >= 0.")
        self.points_to_evaluate = list(points_to_evaluate or [])
        self.max_concurrent = max_concurrent
        self.constant_grid_search = bool(constant_grid_search)
        self._constant: dict[int, dict[Path, Any]] = {}  # pass -> its random values, with constant_grid_search
        if random_state is None:
            import numpy as np

            random_state = int(np.random.randint(0, 2**31 - 1))  # one draw: np.random.seed governs it
        self.rng = random_state if isinstance(random_state, random.Random) else random.Random(random_state)
        self._queue: list[tuple[dict[str, Any], dict[Path, Any], int]] = []  # (space, grid point, pass)
        # num_samples=-1: after the queue, endless passes over these grid points, the next one numbered
        self._endless: tuple[list[dict[Path, Any]], int] | None = None
        self._space: dict[str, Any] = {}
        self._live: set[str] = set()
        self.total = 0

    def setup(self, space: dict[str, Any], num_samples: int, skip: int = 0) -> None:
        """Plan ``num_samples`` passes over the grid; ``skip`` variants already made (a restored run).

        Each point to evaluate replaces one pass: it is written into the space
        and the grids it leaves open are crossed (Ray's rule). ``num_samples=-1``: passes
        without end, after the points (Ray's "until a stopping condition is met").
        """
        self._space = space
        plan: list[tuple[dict[str, Any], dict[Path, Any], int]] = []
        for run, given in enumerate(self.points_to_evaluate):
            preset = _preset(space, given)
            plan += [(preset, point, run) for point in grid_points(preset)]
        first, passes = len(self.points_to_evaluate), max(num_samples - len(self.points_to_evaluate), 0)
        grid = grid_points(space)
        if num_samples == -1:
            self.total = sys.maxsize  # Ray's count of samples without end
            run, into = divmod(max(skip - len(plan), 0), len(grid) or 1)  # a restored run's place
            self._queue = plan[skip:] + [(space, point, first + run) for point in grid[into:]]
            self._endless = (grid, first + run + 1) if grid else None
            return
        plan += [(space, point, first + run) for run in range(passes) for point in grid]
        self.total = len(plan)
        self._queue = plan[skip:]

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if not self._queue and self._endless:  # num_samples=-1: one more pass over the grid
            grid, run = self._endless
            self._queue, self._endless = [(self._space, point, run) for point in grid], (grid, run + 1)
        if not self._queue:
            return FINISHED
        if self.max_concurrent and len(self._live) >= self.max_concurrent:
            return None
        space, point, run = self._queue.pop(0)
        fixed = None
        if self.constant_grid_search:  # this pass's random values, drawn at its first grid point
            fixed = self._constant.get(run)
            if fixed is None:
                fixed = self._constant[run] = {path: leaf.draw(self.rng) for path, leaf in _walk(space)
                                               if isinstance(leaf, Domain) and not isinstance(leaf, Function)}
        config = resolve(space, point, self.rng, fixed)
        self._live.add(trial_id)
        return config

    def experiment_tag(self, index: int, config: dict[str, Any]) -> str:
        """The tag of the ``index``-th trial (from 0), over the values its grids and domains took."""
        return experiment_tag(index, self._searched(config))

    def evaluated_params(self, trial_id: str, config: dict[str, Any]) -> dict[str, Any]:
        """Ray's ``Trial.evaluated_params``: the values the trial's grids and domains took, by their
        paths joined with ``/`` (``{"opt/lr": 0.1}``); constants of the space are not among them."""
        return {"/".join(str(key) for key in path): value for path, value in self._searched(config).items()}

    def _searched(self, config: dict[str, Any]) -> dict[Path, Any]:
        values = {}
        for path, leaf in _walk(self._space):
            if isinstance(leaf, Function):  # Ray resolves sample_from after it made the tag (its placeholders)
                continue
            try:
                values[path] = _at(config, path)
            except (KeyError, IndexError, TypeError):  # a point to evaluate that left it out
                continue
        return values

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        pass

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        self._live.discard(trial_id)


def _preset(space: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """``space`` with a point's values written in: a value replaces the grid or domain at its key,
    nested dicts are merged key by key, and keys the space lacks are added."""
    out = dict(space)
    for key, value in given.items():
        here = out.get(key)
        if isinstance(value, dict) and isinstance(here, dict) and set(here) != {"grid_search"}:
            out[key] = _preset(here, value)
        else:
            out[key] = value
    return out


def _overlay(base: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in given.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _overlay(out[key], value)
        else:
            out[key] = value
    return out
