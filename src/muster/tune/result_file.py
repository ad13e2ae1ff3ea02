"""A trial's ``result.json`` settled, once its run ended, as Ray's ``JsonLoggerCallback`` leaves it.

A trial's run records each report in ``result.json`` as it comes, before the Tune controller decides on
it; Ray's logger writes a result only after its controller acted on it. Where the two differ, the trial's
thread settles the file after the run ended, before the controller hears of the end:

- the result the stopper (``RunConfig(stop=...)``) or a scheduler stopped the trial on says
  ``"done": true``, as Ray marks it before logging it (``progress.csv`` and the loggers had it so already);
- a trial the experiment's stop ended (a stopper's ``stop_all``, ``time_budget_s``, ``fail_fast``) keeps
  no result reported after the last one the controller took: Ray drops those with the trial's pending
  results, so its ``result.json``, ``progress.csv`` and ``metrics_dataframe`` end with ``Result.metrics``.
"""

from __future__ import annotations

import logging
from typing import Any

from muster.train._internal.checkpoint_manager import round_of
from muster.train._internal.result_base import lead_rank
from muster.train.storage import RESULTS, Storage

_log = logging.getLogger(__name__)


def settle_result_file(storage: Storage, last_result: dict[str, Any] | None, stopped_on: bool,
                       experiment_stopped: bool) -> None:
    """Mark the row of ``last_result`` (the last result the controller took) ``done`` where the trial was
    ``stopped_on`` it, or drop the rows reported after it where the experiment's stop ended the trial.
    A trial with no result taken, or whose row is not found, is left as recorded."""
    at = (last_result or {}).get("training_iteration")
    if at is None or not (stopped_on or experiment_stopped):
        return
    lines = storage.read_results()
    rows = [storage.parse_result(line) for line in lines]
    lead = lead_rank(rows)
    taken = next((i for i in reversed(range(len(rows)))
                  if rows[i].get("_rank") == lead and rows[i].get("training_iteration") == at), None)
    if taken is None:
        return
    if experiment_stopped:
        last_round = round_of(rows[taken])
        kept = [line for i, (line, row) in enumerate(zip(lines, rows)) if i <= taken or round_of(row) <= last_round]
    elif rows[taken].get("done") is not True:
        rows[taken]["done"] = True
        kept = [*lines[:taken], storage.format_result(rows[taken]), *lines[taken + 1:]]
    else:
        return
    if kept != lines:
        _log.debug("muster: settling %s (%d of %d rows kept)", storage.run_dir, len(kept), len(lines))
        storage.write_text(storage.join(storage.run_dir, RESULTS), "".join(line + "\n" for line in kept))
