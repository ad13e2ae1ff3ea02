"""``Result``: what ``fit()`` returns, and what ``Result.from_path`` reads back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from muster.exceptions import InvalidArgumentError
from muster.observe.tune_progress import flatten_config
from muster.train._internal import policies
from muster.train._internal.checkpoint_manager import OWN_RUN_KEYS, ROUND, RUN_KEYS
from muster.train._internal.policies import CheckpointRecord
from muster.train.checkpoint import Checkpoint
from muster.train.storage import RUN_STATE, Storage


@dataclass
class Result:
    """The outcome of a training run, or of a Tune trial.

    A training run's metrics are what the training function reported, as Ray Train V2's
    (no ``training_iteration``, ``timestamp`` or ``checkpoint_dir_name`` but those it reported
    itself, with its values); a Tune trial's
    carry what Tune adds to each result (those, ``time_total_s``, ``trial_id``...), as
    Ray Tune's do.

    Attributes:
        metrics: the last report of rank 0 (or of the lowest rank that
            reported), with or without a checkpoint.
        checkpoint: the latest committed checkpoint, or None.
        best_checkpoints: ``[(Checkpoint, metrics), ...]``, best first by
            ``CheckpointConfig``'s score (newest first without one).
        path: the run folder.
        error: the error that ended the run, if it failed.
        all_reports: every report of every rank, in arrival order, as recorded
            (with the controller's keys: ``training_iteration``, ``_rank``...).
        config: the hyperparameters of a Tune trial (None for a plain run).
    """

    metrics: dict[str, Any] | None
    checkpoint: Checkpoint | None
    path: str
    error: BaseException | None = None
    best_checkpoints: list[tuple[Checkpoint, dict[str, Any]]] = field(default_factory=list)
    all_reports: list[dict[str, Any]] = field(default_factory=list, repr=False)
    filesystem: Any = field(default=None, repr=False)
    config: dict[str, Any] | None = None
    _trial: bool = field(default=False, repr=False)  # a Tune trial's result (Ray Tune's), not a training run's

    @property
    def metrics_dataframe(self) -> Any:
        """Every report of the result's rank (rank 0 normally) as a pandas DataFrame. A training
        run's has the reported metrics as they are (a nested dict is one column of dicts), as Ray
        Train V2's; a Tune trial's has Tune's keys too and nested dicts as ``a/b`` columns, as Ray Tune's."""
        import pandas as pd

        rank = _lead_rank(self.all_reports)
        return pd.DataFrame([self._row(r) for r in self.all_reports if r.get("_rank") == rank])

    @property
    def all_metrics_dataframe(self) -> Any:
        """Every report of every rank (column ``_rank`` tells whose, ``_attempt`` which attempt)."""
        import pandas as pd

        return pd.DataFrame([self._row(r, keep=_WHOSE) for r in self.all_reports])

    def _row(self, row: dict[str, Any], keep: tuple[str, ...] = ()) -> dict[str, Any]:
        return flatten_config(_public(row, keep)) if self._trial else _reported(row, keep)

    def get_best_checkpoint(self, metric: str, mode: str) -> Checkpoint | None:
        """The committed checkpoint whose reported ``metric`` is best (``mode``: "max" or "min")."""
        if mode not in ("max", "min"):
            raise InvalidArgumentError(f"get_best_checkpoint(mode={mode!r}): use 'max' or 'min'.")
        records = [CheckpointRecord(i, c.path, m) for i, (c, m) in enumerate(self.best_checkpoints)]
        scored = [r for r in records if policies.score_of(r, metric) is not None]
        if not scored:
            if records:
                raise InvalidArgumentError(
                    f"get_best_checkpoint(metric={metric!r}): no checkpoint was reported with that metric; "
                    f"reported metrics are {sorted(self.best_checkpoints[0][1])}."
                )
            return None
        best = policies.rank_best(scored, metric, mode)[0]
        return self.best_checkpoints[best.round][0]

    @classmethod
    def from_path(cls, path: str, storage_filesystem: Any = None) -> "Result":
        """Read a run's result back from its folder (local or URL; or a path on ``storage_filesystem``,
        a pyarrow or fsspec filesystem, as in Ray): a training run's, or a Tune trial's."""
        return read(path, storage_filesystem)


def read(path: str, storage_filesystem: Any = None, trial: bool | None = None) -> Result:
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
    return build(storage, reports, ranked, None, is_trial(state) if trial is None else trial)


def is_trial(run_state: dict[str, Any]) -> bool:
    """Whether a run folder's state (``RunRecord.state``) is a Tune trial's: Tune records its trial id there."""
    return run_state.get("trial_id") is not None


def _lead_rank(reports: list[dict[str, Any]]) -> int | None:
    ranks = {int(r["_rank"]) for r in reports if r.get("_rank") is not None}
    return min(ranks) if ranks else None


def build(
    storage: Storage, reports: list[dict[str, Any]], ranked: list[CheckpointRecord], error: BaseException | None,
    trial: bool,
) -> Result:
    """The result of a run from its recorded rows; ``trial``: a Tune trial's (see ``Result``)."""
    shown = _public if trial else _reported
    lead = _lead_rank(reports)
    mine = [r for r in reports if r.get("_rank") == lead]
    latest = max(ranked, key=lambda r: r.round) if ranked else None
    return Result(
        metrics=shown(mine[-1]) if mine else None,
        checkpoint=Checkpoint(latest.path, storage.fs) if latest else None,
        path=storage.uri,
        error=error,
        best_checkpoints=[(Checkpoint(r.path, storage.fs), shown(r.metrics)) for r in ranked],
        all_reports=list(reports),
        filesystem=storage.fs,
        _trial=trial,
    )


# What the controller adds to each recorded row for itself: no user-visible result or frame shows
# them (``all_metrics_dataframe`` keeps _WHOSE, which it documents).
_WHOSE = ("_rank", "_attempt")
_BOOKKEEPING = frozenset(_WHOSE + (ROUND, OWN_RUN_KEYS))


def _public(row: dict[str, Any], keep: tuple[str, ...] = ()) -> dict[str, Any]:
    """``row`` without the controller's bookkeeping keys (but ``keep``); the user's own ``_`` keys stay."""
    return {k: v for k, v in row.items() if k not in _BOOKKEEPING or k in keep}


def _reported(row: dict[str, Any], keep: tuple[str, ...] = ()) -> dict[str, Any]:
    """``row`` as the training function reported it: without any key the controller added (but ``keep``),
    with the values it reported itself under the controller's keys (``training_iteration``...)."""
    own = row.get(OWN_RUN_KEYS) or {}
    return {k: own[k] if k in own else v for k, v in _public(row, keep).items() if k not in RUN_KEYS or k in own}
