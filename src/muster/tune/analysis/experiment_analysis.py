"""``ExperimentAnalysis``: Ray's older view of a finished experiment (what ``tune.run`` returns).

It reads what a ``Tuner`` wrote (the experiment state and the trials' folders) through the same
reader as ``Tuner.get_results``; "best" is ranked as ``ResultGrid.get_best_result`` ranks it.
"""

from __future__ import annotations

import logging
import math
import posixpath
from typing import Any

from muster.exceptions import InvalidArgumentError
from muster.train.checkpoint import Checkpoint
from muster.train._internal.result_base import Result
from muster.train.storage import Storage
from muster.tune.result_grid import _SCOPES, ResultGrid, best_index, lookup
from muster.tune.trial import Trial
from muster.tune.experiment_state import EXPERIMENT_STATE

_log = logging.getLogger(__name__)
DEFAULT_METRIC = "_metric"  # Ray's name for the metric of a run given a mode and no metric
TRAINING_ITERATION = "training_iteration"


def _flatten_as_ray(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with its nested dicts as ``a/b`` keys, in Ray's order (its ``flatten_dict``): the
    other keys keep their places, and each level of nesting goes after them, so ``nested/a`` and
    ``config/x`` are the last columns of ``results_df`` (an empty dict leaves no key, as in Ray)."""
    flat = dict(result)
    while any(isinstance(v, dict) for v in flat.values()):
        added = {f"{k}/{sub}": v for k, value in flat.items() if isinstance(value, dict) for sub, v in value.items()}
        flat = {k: v for k, v in flat.items() if not isinstance(v, dict)}
        flat.update(added)
    return flat


class ExperimentAnalysis:
    """The trials of an experiment, their results and checkpoints.

    Args:
        experiment_checkpoint_path: the experiment's folder (``<storage_path>/<name>``), or its
            ``experiment_state.json``.
        storage_filesystem: a pyarrow or fsspec filesystem for the path (default: from the path).
        trials: the trials to analyse (default: the experiment's, from its saved state).
        default_metric / default_mode: what "best" means when a method is not told (``tune.run``
            passes its ``metric``/``mode``). A mode without a metric uses Ray's ``"_metric"``.

    Raises:
        InvalidArgumentError: no muster experiment at the path, or a mode other than "min"/"max".
    """

    def __init__(self, experiment_checkpoint_path: str, *, storage_filesystem: Any = None,
                 trials: list[Trial] | None = None, default_metric: str | None = None,
                 default_mode: str | None = None, _results: ResultGrid | None = None):
        if default_mode not in (None, "min", "max"):
            raise InvalidArgumentError(f"ExperimentAnalysis(default_mode={default_mode!r}): use 'min', 'max' or None.")
        self.default_metric = default_metric or (DEFAULT_METRIC if default_mode else None)
        self.default_mode = default_mode
        path = str(experiment_checkpoint_path)
        if path.endswith(".json"):
            path = posixpath.dirname(path.replace("\\", "/"))
        storage = Storage.at(path, storage_filesystem)
        if not storage.exists(storage.join(storage.run_dir, EXPERIMENT_STATE)):
            raise InvalidArgumentError(
                f"ExperimentAnalysis({experiment_checkpoint_path!r}): no {EXPERIMENT_STATE} there. Pass the "
                "experiment's folder, <storage_path>/<name> (what tune.run(...).experiment_path names)."
            )
        from muster.tune.tuner import read_experiment

        saved, grid = read_experiment(storage)
        if _results is not None and len(_results) == len(saved):
            grid = _results  # the run's own results: errors as raised, metrics as reported
        self._experiment_path = storage.uri
        self._by_id = {t.trial_id: r for t, r in zip(saved, grid)}
        self.trials = list(trials) if trials is not None else saved
        for trial in self.trials:  # Ray's last_result: the last result, with its config and whether it finished
            trial.last_result = dict(self._result(trial).metrics or {"trial_id": trial.trial_id})

    # -- the experiment ---------------------------------------------------------------------------
    @property
    def experiment_path(self) -> str:
        """The experiment's folder in storage (a local path or a URL)."""
        return self._experiment_path

    def get_all_configs(self, prefix: bool = False) -> dict[str, dict[str, Any]]:
        """``{trial_id: config}``; with ``prefix``, each config flattened to ``config/a/b`` keys."""
        return {t.trial_id: _flatten_as_ray({"config": t.config}) if prefix else t.config for t in self.trials}

    @property
    def results(self) -> dict[str, dict[str, Any]]:
        """``{trial_id: last result}`` of every trial."""
        return {t.trial_id: t.last_result for t in self.trials}

    @property
    def results_df(self) -> Any:
        """Every trial's last result as a pandas DataFrame indexed by ``trial_id`` (``a/b`` columns)."""
        import pandas as pd

        rows = [_flatten_as_ray({**t.last_result, "trial_id": t.trial_id}) for t in self.trials]
        return pd.DataFrame.from_records(rows, index="trial_id")

    @property
    def trial_dataframes(self) -> dict[str, Any]:
        """``{trial_id: DataFrame of every result the trial reported}`` (empty for a trial that reported none)."""
        import pandas as pd

        return {t.trial_id: self._result(t).metrics_dataframe if self._result(t).all_reports else pd.DataFrame()
                for t in self.trials}

    def dataframe(self, metric: str | None = None, mode: str | None = None) -> Any:
        """One row per trial that reported: its last result, or with ``metric`` and ``mode`` its
        best-ever result (lowest or highest ``metric``), with its ``config/...`` columns and
        ``logdir`` (the trial's folder). The defaults are not used here, as in Ray.

        Raises:
            InvalidArgumentError: a mode other than "min"/"max", or a mode without a metric.
        """
        import pandas as pd

        if mode not in (None, "min", "max"):
            raise InvalidArgumentError(f"ExperimentAnalysis.dataframe(mode={mode!r}): use 'min', 'max' or None.")
        if mode and not metric:
            raise InvalidArgumentError(f"ExperimentAnalysis.dataframe(mode={mode!r}): pass the metric too.")
        rows = []
        configs = self.get_all_configs(prefix=True)
        for trial_id, df in self.trial_dataframes.items():
            if df.empty:
                continue
            at = len(df) - 1
            if mode and metric in df and df[metric].notna().any():
                at = int(df[metric].idxmax() if mode == "max" else df[metric].idxmin())
            row = df.iloc[at].to_dict()
            row.update(configs[trial_id], logdir=self._trial(trial_id).path)
            rows.append(row)
        return pd.DataFrame(rows)

    # -- the best trial ---------------------------------------------------------------------------
    def get_best_trial(self, metric: str | None = None, mode: str | None = None, scope: str = "last",
                       filter_nan_and_inf: bool = True) -> Trial | None:
        """The trial whose ``metric`` is best, or None (with a warning) when no trial reported it.

        Args:
            metric / mode: default to ``default_metric``/``default_mode``.
            scope: which of a trial's results count: ``"last"``, ``"avg"`` (all of them),
                ``"last-5-avg"``, ``"last-10-avg"``, or ``"all"`` (its best ever by ``mode``).
            filter_nan_and_inf: never pick a trial whose score is NaN or infinite.

        Raises:
            InvalidArgumentError: no metric or mode here nor by default, or an unknown scope.
        """
        if len(self.trials) == 1:  # as in Ray: the only trial, whatever it reported
            return self.trials[0]
        metric, mode = self._metric(metric, "get_best_trial"), self._mode(mode, "get_best_trial")
        if scope not in _SCOPES:
            raise InvalidArgumentError(f"ExperimentAnalysis.get_best_trial(scope={scope!r}): use one of "
                                       f"{', '.join(_SCOPES)}.")
        best = best_index([self._result(t) for t in self.trials], metric, mode, scope, filter_nan_and_inf)
        if best is None:
            _log.warning("ExperimentAnalysis: no trial reported %r%s; is that the metric's name?", metric,
                         " with a finite value" if filter_nan_and_inf else "")
            return None
        return self.trials[best]

    def get_best_config(self, metric: str | None = None, mode: str | None = None,
                        scope: str = "last") -> dict[str, Any] | None:
        """The config of ``get_best_trial(metric, mode, scope)``, or None."""
        trial = self.get_best_trial(metric, mode, scope)
        return trial.config if trial else None

    @property
    def best_trial(self) -> Trial | None:
        """``get_best_trial()`` by ``tune.run``'s metric and mode (their last results)."""
        self._defaults("best_trial", "get_best_trial(metric, mode)")
        return self.get_best_trial()

    @property
    def best_config(self) -> dict[str, Any] | None:
        """The best trial's config (by ``tune.run``'s metric and mode)."""
        self._defaults("best_config", "get_best_config(metric, mode)")
        return self.get_best_config()

    @property
    def best_checkpoint(self) -> Checkpoint | None:
        """The best trial's best checkpoint, both by ``tune.run``'s metric and mode."""
        self._defaults("best_checkpoint", "get_best_checkpoint(trial, metric, mode)")
        trial = self.best_trial
        if trial is None:
            raise InvalidArgumentError(
                f"ExperimentAnalysis.best_checkpoint: no trial reported {self.default_metric!r}; check "
                "tune.run(metric=...), or call get_best_checkpoint(trial, metric, mode)."
            )
        return self.get_best_checkpoint(trial)

    @property
    def best_result(self) -> dict[str, Any]:
        """The best trial's last result (by ``tune.run``'s metric and mode)."""
        self._defaults("best_result", "get_best_trial(metric, mode).last_result")
        return self._best("best_result").last_result

    @property
    def best_result_df(self) -> Any:
        """``best_result`` as a one-row pandas DataFrame indexed by ``trial_id``."""
        import pandas as pd

        return pd.DataFrame.from_records([_flatten_as_ray(self.best_result)], index="trial_id")

    @property
    def best_dataframe(self) -> Any:
        """Every result of the best trial (by ``tune.run``'s metric and mode) as a DataFrame."""
        self._defaults("best_dataframe", "trial_dataframes[get_best_trial(metric, mode).trial_id]")
        return self.trial_dataframes[self._best("best_dataframe").trial_id]

    # -- checkpoints -----------------------------------------------------------------------------
    def get_best_checkpoint(self, trial: Trial | str, metric: str | None = None,
                            mode: str | None = None) -> Checkpoint | None:
        """The trial's kept checkpoint whose reported ``metric`` is best; None if it has none with a
        (non-NaN) value for it.

        Args:
            trial: a trial of ``trials``, or its folder (``trial.path``).
            metric: default ``default_metric``, else ``"training_iteration"``.
            mode: default ``default_mode``.

        Raises:
            InvalidArgumentError: no mode here nor by default, or ``trial`` is not this experiment's.
        """
        metric = metric or self.default_metric or TRAINING_ITERATION
        mode = self._mode(mode, "get_best_checkpoint")
        scored = []
        for checkpoint, metrics in self._result(trial).best_checkpoints:
            value = lookup(metrics, metric)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value):
                scored.append((value if mode == "max" else -value, checkpoint))
        if not scored:
            _log.error("ExperimentAnalysis: no checkpoint of trial %s reported %r.", trial, metric)
            return None
        return max(scored, key=lambda x: x[0])[1]

    def get_last_checkpoint(self, trial: Trial | str | None = None, metric: str = TRAINING_ITERATION,
                            mode: str = "max") -> Checkpoint | None:
        """The trial's latest kept checkpoint (highest ``training_iteration``); without a trial, that of
        ``get_best_trial(metric, mode)``."""
        chosen = trial or self.get_best_trial(metric, mode)
        return self.get_best_checkpoint(chosen, TRAINING_ITERATION, "max") if chosen else None

    # -- helpers ---------------------------------------------------------------------------------
    def _trial(self, trial_id: str) -> Trial:
        return next(t for t in self.trials if t.trial_id == trial_id)

    def _result(self, trial: Trial | str) -> Result:
        if isinstance(trial, Trial) and trial.trial_id in self._by_id:
            return self._by_id[trial.trial_id]
        for t in self.trials:
            if isinstance(trial, str) and trial.rstrip("/") in (t.path.rstrip("/"), t.local_path.rstrip("/")):
                return self._by_id[t.trial_id]
        raise InvalidArgumentError(
            f"ExperimentAnalysis: {trial!r} is not a trial of {self._experiment_path}; pass one of "
            "analysis.trials or its path."
        )

    def _best(self, what: str) -> Trial:
        trial = self.best_trial
        if trial is None:
            raise InvalidArgumentError(f"ExperimentAnalysis.{what}: no trial reported {self.default_metric!r}; "
                                       "check tune.run(metric=...).")
        return trial

    def _defaults(self, what: str, instead: str) -> None:
        if not self.default_metric or not self.default_mode:
            raise InvalidArgumentError(
                f"ExperimentAnalysis.{what} needs tune.run(metric=..., mode=...) (got metric="
                f"{self.default_metric!r}, mode={self.default_mode!r}); or call {instead}."
            )

    def _metric(self, metric: str | None, what: str) -> str:
        metric = metric or self.default_metric
        if not metric:
            raise InvalidArgumentError(f"ExperimentAnalysis.{what}: no metric; pass metric=... "
                                       "(or tune.run(metric=...)).")
        return metric

    def _mode(self, mode: str | None, what: str) -> str:
        mode = mode or self.default_mode
        if mode not in ("min", "max"):
            raise InvalidArgumentError(f"ExperimentAnalysis.{what}(mode={mode!r}): pass mode='min' or 'max' "
                                       "(or tune.run(mode=...)).")
        return mode

