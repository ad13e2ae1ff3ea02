"""A Tune trial's recorded rows as Ray Tune's results.

The controller records each report of a trial as a row of ``result.json`` with its own
bookkeeping in it (``_rank``, ``_attempt``...). What the user sees of such a row is Ray's
result, in one shape everywhere: the result callbacks, stoppers and schedulers get, a
``Result``'s ``metrics``, its ``metrics_dataframe``, and the loggers' files.
"""

from __future__ import annotations

from typing import Any

from muster.observe.recorder import OWN_RUN_KEYS

#: what the controller keeps in a row for itself: no result shows it (the user's own ``_`` keys stay)
CONTROLLER_KEYS = frozenset({"_rank", "_attempt", "_round", OWN_RUN_KEYS})
#: the keys Tune adds to a trial's results, in the order Ray's results hold them after the reported metrics
TUNE_KEYS = (
    "timestamp", "checkpoint_dir_name", "should_checkpoint", "done", "training_iteration", "trial_id", "date",
    "time_this_iter_s", "time_total_s", "pid", "hostname", "node_ip", "config", "time_since_restore",
    "iterations_since_restore", "experiment_tag",
)


def trial_result(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` as Ray Tune's result: the reported metrics, then Tune's keys in Ray's order; ``done``
    False unless the row says otherwise; ``timestamp`` in whole seconds (Ray's ``int(time.time())``)
    unless the function reported one itself; none of the controller's keys."""
    out = {k: v for k, v in row.items() if k not in CONTROLLER_KEYS}
    out.setdefault("done", False)
    own = row.get(OWN_RUN_KEYS) or {}
    if "timestamp" in own:
        out["timestamp"] = own["timestamp"]
    elif isinstance(out.get("timestamp"), float):
        out["timestamp"] = int(out["timestamp"])
    ordered = {k: v for k, v in out.items() if k not in TUNE_KEYS}
    ordered.update((k, out[k]) for k in TUNE_KEYS if k in out)
    return ordered


def logged_result(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` as Ray's loggers write it (``result.json``, ``progress.csv``; Ray's ``metrics_dataframe``
    is read from them): ``trial_result`` without ``experiment_tag``, which Ray's trial adds to its last
    result only after the loggers had it."""
    out = trial_result(row)
    out.pop("experiment_tag", None)
    return out
