"""``ResultGrid``: every trial's ``Result``, with the best one and a table of all."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from muster.exceptions import InvalidArgumentError, MusterError
from muster.observe.trial_rows import logged_result
from muster.observe.tune_progress import flatten_config
from muster.train._internal.result_base import Result

_SCOPES = ("last", "avg", "last-5-avg", "last-10-avg", "all")


class TrialError(MusterError):
    """A trial's failure as read back from a restored experiment (the original exception is gone)."""


class ResultGrid:
    """The results of a ``Tuner.fit()``: one ``Result`` per trial, in trial order.

    Supports ``len``, indexing and iteration. ``errors`` lists the failed
    trials' errors.
    """

    def __init__(self, results: list[Result], experiment_path: str, metric: str | None, mode: str | None,
                 trial_ids: list[str], filesystem: Any = None):
        self._results, self.experiment_path = results, experiment_path
        self._metric, self._mode, self._ids = metric, mode, trial_ids
        self._filesystem = filesystem

    def __len__(self) -> int:
        return len(self._results)

    def __getitem__(self, i: int) -> Result:
        return self._results[i]

    def __iter__(self) -> Iterator[Result]:
        return iter(self._results)

    def __repr__(self) -> str:
        # Ray Tune's: each trial's result, as its repr shows it, indented
        shown = ",\n".join(result._repr(indent=2) for result in self)
        return f"ResultGrid<[\n{shown}\n]>"

    @property
    def filesystem(self) -> Any:
        """The filesystem the experiment is stored on (Ray's ``ResultGrid.filesystem``); an fsspec
        filesystem, as each ``Result.filesystem`` is (Ray's is pyarrow's)."""
        return self._filesystem

    @property
    def errors(self) -> list[BaseException]:
        return [r.error for r in self._results if r.error is not None]

    @property
    def num_errors(self) -> int:
        return len(self.errors)

    @property
    def num_terminated(self) -> int:
        return sum(1 for r in self._results if r.error is None)

    def get_best_result(
        self, metric: str | None = None, mode: str | None = None, scope: str = "last", filter_nan_and_inf: bool = True
    ) -> Result:
        """The trial whose ``metric`` is best.

        Args:
            metric / mode: default to ``TuneConfig``'s.
            scope: which of a trial's results count: ``"last"`` (default), ``"avg"``,
                ``"last-5-avg"``, ``"last-10-avg"``, or ``"all"`` (its best ever).
            filter_nan_and_inf: ignore NaN and infinite values.

        With a single trial and no metric or mode (here or in ``TuneConfig``), that trial is the
        best, as in Ray.

        Raises:
            InvalidArgumentError: no metric or mode, or no trial reported the metric.
        """
        if scope not in _SCOPES:
            raise InvalidArgumentError(f"get_best_result(scope={scope!r}): use one of {', '.join(_SCOPES)}.")
        metric, mode = metric or self._metric, mode or self._mode
        if len(self._results) == 1 and (metric is None or mode is None):
            return self._results[0]
        if not metric or mode not in ("min", "max"):
            raise InvalidArgumentError(
                f"get_best_result(metric={metric!r}, mode={mode!r}): name the metric and mode ('min' or 'max') "
                "here or in TuneConfig(metric=..., mode=...)."
            )
        best = best_index(self._results, metric, mode, scope, filter_nan_and_inf)
        if best is None:
            reported = sorted({k for r in self._results for k in (r.metrics or {})})
            raise InvalidArgumentError(
                f"get_best_result: no trial reported {metric!r}"
                + (" with a finite value" if filter_nan_and_inf else "")
                + f". Reported metrics: {reported or 'none'}."
            )
        return self._results[best]

    def get_dataframe(self, filter_metric: str | None = None, filter_mode: str | None = None) -> Any:
        """A pandas DataFrame, one row per trial: its last result (or its best by
        ``filter_metric``/``filter_mode``) as its ``metrics_dataframe`` has it (Ray's result rows:
        ``done`` is True only on a result the trial was stopped on), its ``config/...`` columns and
        ``logdir``, the trial's folder (``path`` too, muster's name for it). A trial that reported
        nothing has a row too, and a failed one its ``error`` (muster's)."""
        import pandas as pd

        if (filter_metric is None) != (filter_mode is None):
            raise InvalidArgumentError("get_dataframe: pass both filter_metric and filter_mode, or neither.")
        if filter_mode not in (None, "min", "max"):
            raise InvalidArgumentError(
                f"get_dataframe(filter_mode={filter_mode!r}): use 'min' or 'max' (the best row of "
                f"{filter_metric!r} per trial is its lowest or its highest)."
            )
        rows = []
        for r, trial_id in zip(self._results, self._ids):
            reports = _lead_reports(r)
            picked = reports[-1] if reports else {}
            if filter_metric and reports:
                values = [x for x in reports if isinstance(x.get(filter_metric), (int, float))]
                if values:
                    pick = min if filter_mode == "min" else max
                    picked = pick(values, key=lambda x: x[filter_metric])
            # a/b columns after the others, as Ray's (read from result.json with pandas.json_normalize)
            row = pd.json_normalize(logged_result(picked), sep="/").iloc[0].to_dict() if picked else {}
            row.update({f"config/{k}": v for k, v in flatten_config(r.config or {}).items()})
            row["trial_id"], row["logdir"], row["path"] = trial_id, r.path, r.path
            if r.error is not None:
                row["error"] = str(r.error)
            rows.append(row)
        return pd.DataFrame(rows)


def best_index(results: list[Result], metric: str, mode: str, scope: str, finite_only: bool) -> int | None:
    """The index of the result whose ``metric`` scores best under ``scope`` and ``mode`` (the first of
    equals), or None when none reported it (with a finite value, under ``finite_only``)."""
    scored = []
    for i, r in enumerate(results):
        value = _score(_values(r, metric), scope, mode, finite_only)
        if value is not None:
            scored.append((value if mode == "max" else -value, -i))
    return -max(scored)[1] if scored else None


def _lead_reports(r: Result) -> list[dict[str, Any]]:
    """The lead rank's reports, up to the one the experiment acted on (``r.metrics``); none when it
    acted on none.

    A trial that a scheduler or stopper stopped may report more while the stop is on its way;
    those rows stay in its ``metrics_dataframe`` but rank nothing here, so the best trial is
    the one the experiment's summary names, and does not depend on timing (on Ray they never
    happen: the trial runs no further)."""
    ranks = [int(x["_rank"]) for x in r.all_reports if x.get("_rank") is not None]
    lead = min(ranks) if ranks else None
    reports = [x for x in r.all_reports if x.get("_rank") == lead]
    at = (r.metrics or {}).get("training_iteration")
    if at is None:
        return []  # none acted on (the experiment stopped before the controller took one)
    acted = [i for i, x in enumerate(reports) if x.get("training_iteration") == at]
    return reports[: acted[-1] + 1] if acted else reports


def _values(r: Result, metric: str) -> list[float]:
    out = []
    for x in _lead_reports(r):
        v = lookup(x, metric)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append(float(v))
    return out


def _score(values: list[float], scope: str, mode: str, finite_only: bool) -> float | None:
    if finite_only:
        values = [v for v in values if math.isfinite(v)]
    if not values:
        return None
    if scope == "last":
        return values[-1]
    if scope == "all":
        return min(values) if mode == "min" else max(values)
    window = {"avg": len(values), "last-5-avg": 5, "last-10-avg": 10}[scope]
    tail = values[-window:]
    return sum(tail) / len(tail)


def lookup(metrics: dict[str, Any], metric: str) -> Any:
    """``metrics[metric]``, or the nested value a flattened name ``a/b`` names (as Ray looks it up)."""
    if metric in metrics:
        return metrics[metric]
    value: Any = metrics
    for part in metric.split("/"):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value
