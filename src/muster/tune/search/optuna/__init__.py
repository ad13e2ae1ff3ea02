"""``OptunaSearch``: Optuna's samplers (TPE by default) as a Tune search algorithm.

Needs ``pip install "muster[tune]"`` (it installs optuna).  The param_space's
domains become Optuna distributions, asked for with Optuna's ask/tell
interface; each trial's last result is told back when the trial ends.

``space`` may also be a define-by-run function, as in Ray: ``space(trial)``
calls ``trial.suggest_float(...)`` and friends on the Optuna trial and may
return a dict of constants to add.  Parameter names with ``/`` become nested
config keys.  A list ``metric`` with a list ``mode`` makes a multi-objective
study (each trial's last result is told back as one value per metric).
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.tune.search.sample import (
    Categorical,
    Domain,
    Float,
    Function,
    Integer,
    Normal,
)
from muster.tune.search.searcher import Searcher, _dump, _load
from muster.tune.search.variant_generator import _walk

_log = logging.getLogger("muster.tune")


class OptunaSearch(Searcher):
    """Args:
        space: a param_space (tune domains), or a define-by-run function
            ``space(optuna_trial) -> dict | None``; default: the Tuner's ``param_space``.
        metric / mode: default: ``TuneConfig``'s; lists of equal length for a
            multi-objective study (``metric=["loss", "size"], mode=["min", "min"]``).
        points_to_evaluate: configs to try first.
        evaluated_rewards: the metric each of ``points_to_evaluate`` already
            reached: they are told to the study as finished trials instead of run.
        sampler: an ``optuna.samplers.BaseSampler``; default ``TPESampler(seed=seed)``.
        seed: seed of the default sampler.
        study_name: the Optuna study's name (default ``"optuna"``, as Ray's).
        storage: where the study keeps its trials: an ``optuna.storages.BaseStorage`` (e.g. ``RDBStorage``) or
            its URL (``"sqlite:///optuna.db"``); default Optuna's in-memory storage. A study of that name
            already there is loaded and added to, as in Ray (``load_if_exists``).
    """

    def __init__(
        self,
        space: dict[str, Any] | Callable[[Any], dict[str, Any] | None] | None = None,
        metric: str | list[str] | None = None,
        mode: str | list[str] | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        sampler: Any = None,
        seed: int | None = None,
        evaluated_rewards: list[Any] | None = None,
        study_name: str | None = None,
        storage: Any = None,
    ):
        try:
            import optuna
        except ImportError as exc:
            raise ImportError(
                'OptunaSearch needs optuna: pip install "muster[tune]" (or pip install optuna).'
            ) from exc
        self._metrics: list[str] | None = list(metric) if isinstance(metric, (list, tuple)) else None
        self._modes: list[str] | None = list(mode) if isinstance(mode, (list, tuple)) else None
        _check_objectives(self._metrics, self._modes)
        first_metric = self._metrics[0] if self._metrics else metric
        first_mode = self._modes[0] if self._modes else mode
        super().__init__(first_metric if isinstance(first_metric, str) else None,
                         first_mode if isinstance(first_mode, str) else None)
        self._optuna = optuna
        optuna.logging.set_verbosity(logging.WARNING)
        self._sampler = sampler or optuna.samplers.TPESampler(seed=seed)
        if storage is not None and not isinstance(storage, (str, optuna.storages.BaseStorage)):
            raise InvalidTypeError(
                f"OptunaSearch(storage={storage!r}): pass an optuna.storages.BaseStorage (e.g. "
                "optuna.storages.RDBStorage('sqlite:///optuna.db')) or its URL, or None for memory.")
        self._study_name, self._storage = study_name or "optuna", storage
        self._points = list(points_to_evaluate or [])
        self._rewards = list(evaluated_rewards) if evaluated_rewards is not None else None
        if self._rewards is not None and len(self._rewards) != len(self._points):
            raise InvalidArgumentError(
                f"OptunaSearch(evaluated_rewards=...): {len(self._rewards)} reward(s) for {len(self._points)} "
                "points_to_evaluate; give one reward per point, in the same order."
            )
        if self._rewards is not None and callable(space) and not isinstance(space, dict):
            raise InvalidArgumentError(
                "OptunaSearch(evaluated_rewards=...) needs a param_space of tune domains, not a define-by-run "
                "function: Optuna needs each parameter's distribution to record a finished trial."
            )
        self._space: dict[str, Any] | None = None
        self._define_by_run: Callable[[Any], dict[str, Any] | None] | None = None
        self._study: Any = None
        self._live: dict[str, Any] = {}
        self._last: dict[str, dict[str, Any]] = {}
        if callable(space) and not isinstance(space, dict):
            self._define_by_run = space
        elif space is not None:
            self._set_space(space)

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any], **spec: Any) -> bool:
        if isinstance(metric, (list, tuple)) or isinstance(mode, (list, tuple)):
            self._metrics = list(metric) if isinstance(metric, (list, tuple)) else self._metrics
            self._modes = list(mode) if isinstance(mode, (list, tuple)) else self._modes
            _check_objectives(self._metrics, self._modes)
            metric = self._metrics[0] if self._metrics else None
            mode = self._modes[0] if self._modes else None
        super().set_search_properties(metric, mode, config)
        if self._space is None and self._define_by_run is None:
            self._set_space(config)
        return True

    def _set_space(self, space: dict[str, Any]) -> None:
        leaves = list(_walk(space))
        for path, leaf in leaves:
            if isinstance(leaf, dict):
                raise InvalidArgumentError(
                    f"OptunaSearch: grid_search at {'/'.join(map(str, path))} is not supported; use "
                    "tune.choice([...]) (Optuna samples it) or the default search algorithm for grids."
                )
            if isinstance(leaf, (Normal, Function)):
                raise InvalidArgumentError(
                    f"OptunaSearch: {leaf!r} at {'/'.join(map(str, path))} has no Optuna equivalent; use uniform, "
                    "loguniform, randint, qrandint or choice."
                )
        self._space = space
        self._leaves: list[tuple[tuple[Any, ...], Domain]] = [(p, d) for p, d in leaves if isinstance(d, Domain)]

    def _ensure_study(self) -> None:
        if self._study is None:
            if not self.metric or self.mode not in ("min", "max"):
                raise InvalidArgumentError(
                    f"OptunaSearch needs a metric and mode (got {self.metric!r}, {self.mode!r}): pass them to "
                    "OptunaSearch(metric=..., mode=...) or TuneConfig(metric=..., mode=...)."
                )
            if self._metrics and self._modes:
                directions: Any = ["minimize" if m == "min" else "maximize" for m in self._modes]
                self._study = self._optuna.create_study(sampler=self._sampler, directions=directions,
                                                        study_name=self._study_name, storage=self._storage,
                                                        load_if_exists=True)
            else:
                direction: Any = "minimize" if self.mode == "min" else "maximize"
                self._study = self._optuna.create_study(sampler=self._sampler, direction=direction,
                                                        study_name=self._study_name, storage=self._storage,
                                                        load_if_exists=True)
            if self._rewards is not None:
                for point, reward in zip(self._points, self._rewards):
                    self.add_evaluated_point(point, reward)
                return
            for point in self._points:
                self._study.enqueue_trial({"/".join(map(str, p)): v for p, v in _flatten(point)})

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        if self._space is None and self._define_by_run is None:
            raise InvalidArgumentError("OptunaSearch has no search space: pass space=... or Tuner(param_space=...).")
        self._ensure_study()
        ot = self._study.ask()
        self._live[trial_id] = ot
        config: dict[str, Any] = {}
        if self._define_by_run is not None:
            constants = self._define_by_run(ot)
            if constants is not None and not isinstance(constants, dict):
                raise InvalidTypeError(
                    f"OptunaSearch: the define-by-run space returned {type(constants).__name__}; return None "
                    "or a dict of constant config values."
                )
            for name, value in {**ot.params, **(constants or {})}.items():
                _set_path(config, tuple(str(name).split("/")), value)
            return config
        for path, domain in self._leaves:
            _set_path(config, path, _ask(ot, "/".join(map(str, path)), domain))
        return config

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        self._last[trial_id] = result

    def add_evaluated_point(
        self,
        parameters: dict[str, Any],
        value: Any,
        error: bool = False,
        pruned: bool = False,
        intermediate_values: list[float] | None = None,
    ) -> None:
        """Tell the study a config evaluated elsewhere (``value``: its metric, a list for several)."""
        if self._space is None:
            raise InvalidArgumentError(
                "OptunaSearch.add_evaluated_point needs the search space first: pass space=... (tune domains); "
                "a define-by-run function cannot describe a finished trial to Optuna."
            )
        self._ensure_study()
        given = dict(_flatten(parameters))
        params, distributions = {}, {}
        for path, domain in self._leaves:
            name = "/".join(map(str, path))
            if path not in given:
                raise InvalidArgumentError(
                    f"OptunaSearch.add_evaluated_point: parameters {parameters!r} lack {name!r}; give a value for "
                    f"every searched parameter ({', '.join('/'.join(map(str, p)) for p, _ in self._leaves)})."
                )
            distributions[name], params[name] = _distribution(domain), _as_param(domain, given[path])
        state = self._optuna.trial.TrialState
        kind = state.FAIL if error else state.PRUNED if pruned else state.COMPLETE
        values = value if isinstance(value, (list, tuple)) else [value]
        self._study.add_trial(self._optuna.trial.create_trial(
            state=kind, params=params, distributions=distributions,
            values=None if kind == state.FAIL else [float(v) for v in values],
            intermediate_values=dict(enumerate(intermediate_values or [])),
        ))

    def get_state(self) -> dict[str, Any]:
        """The study (every trial told so far), the sampler and the trials still running."""
        return {k: v for k, v in self.__dict__.items() if k != "_optuna"}

    def set_state(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def save(self, checkpoint_path: str) -> None:
        _dump(checkpoint_path, self.get_state())

    def restore(self, checkpoint_path: str) -> None:
        self.set_state(_load(checkpoint_path))

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        ot = self._live.pop(trial_id, None)
        if ot is None:
            return
        result = result or self._last.pop(trial_id, None)
        names = self._metrics or ([self.metric] if self.metric else [])
        found = [(result or {}).get(m) for m in names]
        values = [float(v) for v in found if isinstance(v, (int, float))]
        state = self._optuna.trial.TrialState
        if error or not values or len(values) != len(found):
            self._study.tell(ot, state=state.FAIL)
        elif self._metrics:
            self._study.tell(ot, values)
        else:
            self._study.tell(ot, values[0])


def _check_objectives(metrics: list[str] | None, modes: list[str] | None) -> None:
    if metrics is None and modes is None:
        return
    if metrics is None or modes is None or len(metrics) != len(modes) or not metrics:
        raise InvalidArgumentError(
            f"OptunaSearch: metric={metrics!r}, mode={modes!r}; a multi-objective search takes a list of "
            "metrics and a list of modes of the same length, e.g. metric=['loss', 'size'], mode=['min', 'min']."
        )
    bad = [m for m in modes if m not in ("min", "max")]
    if bad:
        raise InvalidArgumentError(f"OptunaSearch: mode={modes!r}; each mode is 'min' or 'max'.")


def _set_path(config: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    node = config
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value


def _ask(ot: Any, name: str, d: Domain) -> Any:
    """Sample ``d`` as ``name`` on the Optuna trial ``ot``."""
    dist = _distribution(d)
    if isinstance(d, Float):
        return ot.suggest_float(name, dist.low, dist.high, log=dist.log, step=dist.step)
    if isinstance(d, Integer):
        return ot.suggest_int(name, dist.low, dist.high, log=dist.log, step=dist.step)
    choice = ot.suggest_categorical(name, dist.choices)
    return _as_param(d, choice, decode=True)


def _distribution(d: Domain) -> Any:
    """The Optuna distribution ``d`` is sampled from (a choice of Python objects: of their indexes)."""
    from optuna import distributions as dist

    if isinstance(d, Float):
        if d.log_base is not None and d.q and d not in _told_unquantized:  # Optuna takes no step on a log scale
            _told_unquantized.append(d)
            _log.warning("OptunaSearch: %r is drawn on a log scale without its q=%s (Optuna takes no step with "
                         "log=True), as Ray's OptunaSearch does. Use tune.quniform for steps.", d, d.q)
        return dist.FloatDistribution(d.lower, d.upper, log=d.log_base is not None,
                                      step=None if d.log_base is not None else d.q)
    if isinstance(d, Integer):
        if d.log and d.q and d.q > 1:
            raise InvalidArgumentError(
                f"OptunaSearch cannot draw {d!r} on a log scale with q={d.q}: Optuna takes only step 1 with "
                "log=True. Use tune.lograndint (no q), or tune.qrandint (no log scale).")
        return dist.IntDistribution(d.lower, d.upper if d.inclusive else d.upper - 1, log=d.log, step=d.q or 1)
    if isinstance(d, Categorical):
        return dist.CategoricalDistribution(d.categories if _plain(d) else list(range(len(d.categories))))
    raise InvalidArgumentError(f"OptunaSearch: cannot sample {d!r}.")


_told_unquantized: list[Domain] = []  # the quantized log-scale domains warned about (once each)


def _plain(d: Categorical) -> bool:
    return all(c is None or isinstance(c, (bool, int, float, str)) for c in d.categories)


def _as_param(d: Domain, value: Any, decode: bool = False) -> Any:
    """``value`` of ``d`` as Optuna records it (``decode``: the other way)."""
    if not isinstance(d, Categorical) or _plain(d):
        return value
    if decode:
        return d.categories[value]
    if value not in d.categories:
        raise InvalidArgumentError(f"OptunaSearch: {value!r} is not one of {d.categories!r}.")
    return d.categories.index(value)


def _flatten(config: dict[str, Any], path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    out = []
    for k, v in config.items():
        out += _flatten(v, (*path, k)) if isinstance(v, dict) else [((*path, k), v)]
    return out
