"""Population Based Bandits (PB2; Parker-Holder et al., 2020).

PB2 exploits as :class:`PopulationBasedTraining` does (a trial in the bottom
``quantile_fraction`` restarts from a top trial's checkpoint) but explores by
GP bandit: at every perturbation point each trial's ``(time, score, config)``
is recorded; the change in score per unit of time between a trial's points
is modelled with a time-varying GP (:mod:`muster.tune.schedulers.pb2_gp`) and
the new config is the one in ``hyperparam_bounds`` with the highest UCB.
Fitting the GP takes seconds with many observations, so it runs on a thread of
its own: the exploited trial (paused) restarts once its config is chosen, and
the controller handles the other trials' results meanwhile.
"""

from __future__ import annotations

import copy
import functools
import math
import numbers
import threading
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np

from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.tune.schedulers.pb2_gp import select_config
from muster.tune.schedulers.pbt import PopulationBasedTraining
from muster.tune.schedulers.trial_scheduler import PendingConfig

if TYPE_CHECKING:
    from muster.tune.trial import Trial

_MAX_POINTS = 1000  # the GP sees at most this many recent observations, as Ray's

Path = tuple[str, ...]


def _flat_bounds(bounds: dict[str, Any], prefix: Path = ()) -> dict[Path, tuple[float, float]]:
    """``{path: (low, high)}`` for every leaf of ``bounds``, checked to be ``[low, high]`` with low <= high."""
    out: dict[Path, tuple[float, float]] = {}
    for key, value in bounds.items():
        path = prefix + (key,)
        name = "/".join(map(str, path))
        if isinstance(value, dict):
            out.update(_flat_bounds(value, path))
            continue
        if not isinstance(value, (list, tuple)) or len(value) != 2:
            raise InvalidArgumentError(
                f"PB2(hyperparam_bounds): {name!r} is {value!r}; give each hyperparameter a [low, high] pair, "
                f"e.g. {{{key!r}: [0.0001, 0.1]}}."
            )
        low, high = value
        if not all(isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) for v in value):
            raise InvalidTypeError(
                f"PB2(hyperparam_bounds): {name!r} is {value!r}; low and high must be finite numbers."
            )
        if low > high:
            raise InvalidArgumentError(
                f"PB2(hyperparam_bounds): {name!r} is {value!r}, with low > high; write it as [{high!r}, {low!r}]."
            )
        out[path] = (float(low), float(high))
    return out


def _get(config: dict[str, Any], path: Path) -> Any:
    value: Any = config
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _set(config: dict[str, Any], path: Path, value: Any) -> None:
    for key in path[:-1]:
        config = config.setdefault(key, {})
    config[path[-1]] = value


class _SerialJobs:
    """Runs functions one at a time, in the order given, each on its own daemon thread (which waits
    for the one before), so none holds a thread once the work is done."""

    def __init__(self) -> None:
        self._last: Future[Any] | None = None

    def submit(self, fn: Callable[[], Any]) -> Future[Any]:
        before = self._last
        done: Future[Any] = Future()

        def run() -> None:
            if before is not None:
                futures.wait([before])
            if done.set_running_or_notify_cancel():
                try:
                    done.set_result(fn())
                except BaseException as exc:  # noqa: BLE001 - handed to the controller, which raises it
                    done.set_exception(exc)

        self._last = done
        threading.Thread(target=run, name="muster-pb2-fit", daemon=True).start()
        return done


class PB2(PopulationBasedTraining):
    """Population Based Bandits: PBT's exploit, with configs explored by a time-varying GP-UCB bandit.

    Args:
        time_attr: the result field that measures progress (it must increase).
        metric / mode: what to optimise (or set them on TuneConfig).
        perturbation_interval: how often (in ``time_attr``) a trial is ranked and recorded.
        hyperparam_bounds: ``{name: [low, high]}`` (nested dicts for nested configs), required; a trial whose
            config lacks a name starts from a uniform draw in its bounds.
        quantile_fraction: the top and bottom fraction compared (<= 0.5).
        log_config / require_attrs / synch: as :class:`PopulationBasedTraining`'s.
        custom_explore_fn: ``config -> config``, applied to the config the bandit chose.
        seed: for reproducible draws (muster's; Ray's PB2 uses numpy's global state).

    Raises:
        InvalidArgumentError: no ``hyperparam_bounds``, or one that is not ``[low, high]`` with low <= high.
        InvalidTypeError: a bound that is not a finite number.
    """

    def __init__(
        self,
        time_attr: str = "time_total_s",
        metric: str | None = None,
        mode: str | None = None,
        perturbation_interval: float = 60.0,
        hyperparam_bounds: dict[str, Any] | None = None,
        quantile_fraction: float = 0.25,
        log_config: bool = True,
        require_attrs: bool = True,
        synch: bool = False,
        custom_explore_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        seed: int | None = None,
    ):
        if not hyperparam_bounds:
            raise InvalidArgumentError(
                f"PB2(hyperparam_bounds={hyperparam_bounds!r}): give the range of each hyperparameter to explore, "
                "e.g. PB2(hyperparam_bounds={'lr': [0.0001, 0.1]})."
            )
        self._bounds = _flat_bounds(hyperparam_bounds)
        super().__init__(
            time_attr=time_attr, metric=metric, mode=mode, perturbation_interval=perturbation_interval,
            hyperparam_mutations=hyperparam_bounds, quantile_fraction=quantile_fraction, resample_probability=0.0,
            custom_explore_fn=custom_explore_fn, log_config=log_config, require_attrs=require_attrs, synch=synch,
            seed=seed,
        )
        self.np_rng = np.random.default_rng(seed)
        # one row per perturbation point: (trial id, time, hyperparameter values, signed score)
        self.data: list[tuple[str, float, tuple[float, ...], float]] = []
        self._running: np.ndarray | None = None  # configs already chosen at the latest time step
        self._last_explore_time = -math.inf
        self._jobs: _SerialJobs | None = None  # the GP fits, off the controller's thread

    def on_trial_add(self, controller: Any, trial: Trial) -> None:
        for path, (low, high) in self._bounds.items():
            value = _get(trial.config, path)
            if value is None:
                _set(trial.config, path, float(self.np_rng.uniform(low, high)))
            elif isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise InvalidTypeError(
                    f"PB2: trial {trial.trial_id}'s config has {'/'.join(map(str, path))}={value!r}, but PB2 searches "
                    f"that key as a number in hyperparam_bounds [{low}, {high}]; give it a number (or leave it out of "
                    "the param_space: PB2 draws it), or drop it from hyperparam_bounds.")
        super().on_trial_add(controller, trial)

    def _values(self, config: dict[str, Any]) -> tuple[float, ...]:
        return tuple(float(_get(config, path)) for path in self._bounds)

    def _record(self, trial: Trial, t: float, score: float) -> None:
        self.data.append((trial.trial_id, float(t), self._values(trial.config), score))

    def _observations(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """Rows ``(time, score before, *config)``, the score's change per unit of time after each, and whose.

        Consecutive points of one trial with one config give an observation; a trial that exploited
        starts a new run of points from the donor's time and score (see ``_new_config``).
        """
        last: dict[tuple[str, tuple[float, ...]], tuple[float, float]] = {}
        rows, ys, owners = [], [], []
        for trial_id, t, values, score in sorted(self.data, key=lambda row: row[1]):
            before = last.get((trial_id, values))
            last[(trial_id, values)] = (t, score)
            if before is None or t <= before[0]:
                continue
            rows.append((t, before[1], *values))
            ys.append((score - before[1]) / (t - before[0]))
            owners.append(trial_id)
        rows, ys, owners = rows[-_MAX_POINTS:], ys[-_MAX_POINTS:], owners[-_MAX_POINTS:]
        return np.array(rows, dtype=float).reshape(-1, 2 + len(self._bounds)), np.array(ys, dtype=float), owners

    def _new_config(self, trial: Trial, donor: Trial) -> dict[str, Any] | PendingConfig:
        """The donor's config with the bandit's choice of hyperparameters, worked out off the controller's
        thread (fitting the GP can take seconds): the trial restarts once it is settled, the others go on."""
        x, y, owners = self._observations()
        donor_rows = [i for i, owner in enumerate(owners) if owner == donor.trial_id]
        donor_config = copy.deepcopy(donor.config)
        if not donor_rows:
            return self.explore_fn(donor_config) if self.explore_fn else donor_config
        newest = max(t for _, t, _, _ in self.data)
        # the trial goes on from the donor's weights: its next observation starts at the donor's time and score
        _, donor_time, _, donor_score = max((r for r in self.data if r[0] == donor.trial_id), key=lambda r: r[1])
        rng = np.random.default_rng(self.np_rng.integers(2**63))  # drawn here, so a seed makes the choice repeatable
        job = functools.partial(self._choose, x, y, x[donor_rows[-1], :2], newest, donor_config, rng)

        def finish(values: list[Any]) -> dict[str, Any]:  # on the controller's thread
            new_config = copy.deepcopy(donor_config)
            for path, value in zip(self._bounds, values):
                _set(new_config, path, value)
            self.data.append((trial.trial_id, donor_time, self._values(new_config), donor_score))
            return self.explore_fn(new_config) if self.explore_fn else new_config

        if self._jobs is None:
            self._jobs = _SerialJobs()
        return PendingConfig(self._jobs.submit(job), finish)

    def _choose(self, x: np.ndarray, y: np.ndarray, newpoint: np.ndarray, newest: float,
                donor_config: dict[str, Any], rng: np.random.Generator) -> list[Any]:
        """The bandit's hyperparameter values (each of the donor's type), in ``self._bounds``' order. Runs
        on PB2's fitting thread, one exploit at a time in the order they were decided, so that each sees
        the configs the ones before it chose at the same time step (``self._running``)."""
        if newest > self._last_explore_time:
            self._running = None  # a new time step: nothing chosen at it yet
        lows, highs = zip(*self._bounds.values())
        bounds = np.array([lows, highs], dtype=float)
        chosen = np.clip(select_config(x, y, self._running, newpoint, bounds, rng), bounds[0], bounds[1])
        values: list[Any] = []
        for (path, (low, high)), value in zip(self._bounds.items(), chosen):
            old = _get(donor_config, path)
            if isinstance(old, int) and not isinstance(old, bool):
                value = min(max(round(value), math.ceil(low)), math.floor(high))
            values.append(type(old)(value) if isinstance(old, (int, float)) else float(value))
        picked = np.array([values], dtype=float)
        if newest > self._last_explore_time:
            self._last_explore_time, self._running = newest, picked
        else:
            self._running = picked if self._running is None else np.vstack([self._running, picked])
        return values

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_jobs": None}  # its thread's futures do not pickle (the Tuner saves the scheduler)

    def debug_string(self) -> str:
        return f"PB2: {self.num_perturbations} perturbations"
