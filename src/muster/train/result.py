"""``Result``: what ``fit()`` returns, and what ``Result.from_path`` reads back (a training run's, or
a Tune trial's: ``result_base.Result``, which this one extends)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from muster.exceptions import InvalidArgumentError, MusterError, TrainingFailedError
from muster.observe.trial_rows import CONTROLLER_KEYS, trial_result
from muster.train._internal import policies
from muster.train._internal.checkpoint_manager import OWN_RUN_KEYS, RUN_KEYS, round_of
from muster.train._internal.policies import CheckpointRecord
from muster.train._internal.result_base import Result as TuneResult, lead_rank
from muster.train.checkpoint import Checkpoint
from muster.train.storage import RUN_STATE, Storage


@dataclass
class Result(TuneResult):
    """The outcome of a training run: what ``fit()`` returns (Ray's ``ray.train.Result``).

    A ``muster.tune.Result`` too, as Ray's is, with the same attributes. Its metrics are what the
    training function reported, as Ray Train V2's (no ``training_iteration``, ``timestamp`` or
    ``checkpoint_dir_name`` but those it reported itself, with its values); its ``config`` is None.

    Attributes:
        return_value: what the training function returned on rank 0 (Ray Train V2's), or None where it
            returned nothing or the run did not finish by itself (a Tune stop); it must pickle. It is not
            stored: ``Result.from_path`` has None, as Ray's.
    """

    return_value: Any = None

    @property
    def metrics_dataframe(self) -> Any:
        """Every report of the result's rank (rank 0 normally) as a pandas DataFrame, each round once: the
        reported metrics as they are (a nested dict is one column of dicts), as Ray Train V2's. A report a
        failed attempt made after the checkpoint the next attempt resumed from is not in it (that round ran
        again); ``all_metrics_dataframe`` and ``all_reports`` keep every attempt's."""
        rank = lead_rank(self.all_reports)
        return self._frame([r for r in kept(self.all_reports) if r.get("_rank") == rank])

    def _frame(self, rows: list[dict[str, Any]], keep: tuple[str, ...] = ()) -> Any:
        import pandas as pd

        return pd.DataFrame([_reported(r, keep) for r in rows])


def read(path: str, storage_filesystem: Any = None, trial: bool | None = None) -> TuneResult:
    """``Result.from_path``; ``trial``: build a Tune trial's result (with Tune's keys) or a training
    run's, whatever the folder holds (None: as the run folder says it is)."""
    storage = Storage.at(path, storage_filesystem)
    if not storage.exists(storage.run_dir):
        raise InvalidArgumentError(f"Result.from_path({path!r}): no such run folder.")
    reports = [storage.parse_result(line) for line in storage.read_results()]
    records = []
    for r in storage.committed_rounds():
        ckpt_dir = storage.checkpoint_dir(r)
        records.append(CheckpointRecord(r, ckpt_dir, storage.checkpoint_metrics(r)[0]))
    state_path = storage.join(storage.run_dir, RUN_STATE)
    state = storage.read_json(state_path) if storage.exists(state_path) else {}
    order = state.get("checkpoint_config", {})
    ranked = policies.rank_best(
        records, order.get("checkpoint_score_attribute"), order.get("checkpoint_score_order", "max")
    )
    as_trial = is_trial(state) if trial is None else trial  # a Tune trial's error is its ResultGrid's to give
    return build(storage, reports, ranked, None if as_trial else _recorded_error(state, storage.uri), as_trial,
                 num_to_keep=order.get("num_to_keep"))


def _recorded_error(run_state: dict[str, Any], uri: str) -> BaseException | None:
    """The error of a run whose folder says it failed (None for one that did not): what its ``fit()`` raised,
    from the root causes it recorded (their text; the exceptions themselves are not kept)."""
    if run_state.get("status") != "ERRORED":
        return None
    causes: list[BaseException] = [MusterError(text) for text in run_state.get("failures") or []]
    return TrainingFailedError(causes, uri, max_failures=max(len(causes) - 1, 0))


def is_trial(run_state: dict[str, Any]) -> bool:
    """Whether a run folder's state (``RunRecord.state``) is a Tune trial's: Tune records its trial id there."""
    return run_state.get("trial_id") is not None


def build(
    storage: Storage, reports: list[dict[str, Any]], ranked: list[CheckpointRecord], error: BaseException | None,
    trial: bool, return_value: Any = None, num_to_keep: int | None = None,
) -> TuneResult:
    """The result of a run from its recorded rows: a Tune trial's (a ``muster.tune.Result``, with
    Ray Tune's results) when ``trial``, else a training run's (a ``Result``, with ``return_value``).
    ``ranked``: its committed checkpoints, best first; ``best_checkpoints`` holds the ``num_to_keep`` best,
    as Ray's (retention also keeps the latest, which is ``checkpoint`` but not among them unless it is)."""
    shown = trial_result if trial else _reported
    lead = lead_rank(reports)
    mine = [r for r in (reports if trial else kept(reports)) if r.get("_rank") == lead]
    latest = max(ranked, key=lambda r: r.round) if ranked else None
    extra = {} if trial else {"return_value": return_value}
    return (TuneResult if trial else Result)(
        metrics=shown(mine[-1]) if mine else None,
        checkpoint=Checkpoint(latest.path, storage.fs) if latest else None,
        path=storage.uri,
        error=error,
        best_checkpoints=[(Checkpoint(r.path, storage.fs), shown(r.metrics)) for r in ranked[:num_to_keep]],
        all_reports=list(reports),
        filesystem=storage.fs,
        **extra,
    )


def kept(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` (every rank's, as recorded) without those rolled back: the reports an attempt made after
    the checkpoint the next attempt resumed from (the latest committed when it started), whose rounds
    ran again. Rounds keep counting across attempts, so those are an attempt's rows of a round past it."""
    committed = {round_of(r) for r in rows if r.get("checkpoint_dir_name")}
    attempts = sorted({int(r.get("_attempt") or 0) for r in rows})
    resumed_at: dict[int, int] = {}  # attempt -> the round the next attempt resumed from
    for attempt, after in zip(attempts, attempts[1:]):
        before = {round_of(r) for r in rows if int(r.get("_attempt") or 0) < after}
        resumed_at[attempt] = max(committed & before, default=0)
    return [r for r in rows if round_of(r) <= resumed_at.get(int(r.get("_attempt") or 0), round_of(r))]


def _public(row: dict[str, Any], keep: tuple[str, ...] = ()) -> dict[str, Any]:
    """``row`` without the controller's bookkeeping keys (but ``keep``); the user's own ``_`` keys stay."""
    return {k: v for k, v in row.items() if k not in CONTROLLER_KEYS or k in keep}


def _reported(row: dict[str, Any], keep: tuple[str, ...] = ()) -> dict[str, Any]:
    """``row`` as the training function reported it: without any key the controller added (but ``keep``),
    with the values it reported itself under the controller's keys (``training_iteration``...)."""
    own = row.get(OWN_RUN_KEYS) or {}
    return {k: own[k] if k in own else v for k, v in _public(row, keep).items() if k not in RUN_KEYS or k in own}
