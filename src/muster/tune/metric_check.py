"""Ray Tune's strict metric check: a result that reports metrics, but not the one the experiment ranks
trials by, ends ``fit()`` with an error naming the metric and what was reported; else a misspelled
metric would leave a scheduler doing nothing and ``get_best_result`` failing only at the end."""

from __future__ import annotations

from typing import Any

from muster.core import settings
from muster.exceptions import InvalidArgumentError
from muster.observe.trial_rows import TUNE_KEYS
from muster.tune.result_grid import lookup

#: Ray's placeholder metric name (nothing asked for one)
_DEFAULT_METRIC = "_metric"


def wanted_metrics(metric: Any, scheduler: Any, searcher: Any) -> list[str]:
    """The metrics the experiment ranks trials by: TuneConfig's, the scheduler's and the searcher's (a
    searcher may rank by several). TuneConfig's is handed to the other two, so where the user set one
    cannot be told here."""
    out: list[str] = []
    for value in (metric, getattr(scheduler, "metric", None), getattr(searcher, "metric", None)):
        for name in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(name, str) and name and name != _DEFAULT_METRIC and name not in out:
                out.append(name)
    return out


def check_reported(trial_id: str, result: dict[str, Any], wanted: list[str]) -> None:
    """Raise unless ``result`` holds every wanted metric; a result with no metric of the user's own
    (only Tune's automatic keys) is not checked.

    Raises:
        InvalidArgumentError: naming the first metric missing and the metrics reported.
    """
    own = [k for k in result if k not in TUNE_KEYS]
    if not own or not settings.tune_strict_metric_checking():
        return
    for name in wanted:
        if name not in result and lookup(result, name) is None:  # "val/acc" as a path: Ray flattens results
            raise InvalidArgumentError(
                f"trial {trial_id} reported {sorted(own)} without {name!r}, the metric this experiment ranks "
                f"trials by. Fix: report {name!r} in every tune.report(...) call, or correct metric={name!r} "
                "where you set it (TuneConfig, the scheduler or the search algorithm); or set "
                "TUNE_DISABLE_STRICT_METRIC_CHECKING=1 to let such results through (as in Ray)."
            )

