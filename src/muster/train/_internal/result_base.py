"""``Result``: a Tune trial's outcome (``muster.tune.Result``), and the base of ``muster.train.Result``.

As in Ray, where ``ray.tune.Result`` is the base and ``ray.train.Result`` extends it, a training
run's result is a Tune result too (``isinstance(train_result, tune.Result)``), while a trial's is
not a training run's. The class lives here, below both libraries, because Tune builds on Train.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from muster.core.filesystem import filesystem_name
from muster.exceptions import InvalidArgumentError, MusterError
from muster.observe.trial_rows import logged_result
from muster.train._internal import policies
from muster.train._internal.policies import CheckpointRecord
from muster.train.checkpoint import Checkpoint

# What the controller adds to each row to say whose report it is (``all_metrics_dataframe`` shows them)
WHOSE = ("_rank", "_attempt")

# The keys Ray Tune fills in itself, which a trial result's repr leaves out (Ray 2.60's ``Result._repr``
# hides ``ray.tune.result.AUTO_RESULT_KEYS`` and ``ray.tune.experimental.output.BLACKLISTED_KEYS``)
AUTO_KEYS = frozenset({
    "training_iteration", "time_total_s", "episodes_total", "timesteps_total", "node_ip", "hostname", "pid",
    "time_this_iter_s", "timestamp", "date", "time_since_restore", "timesteps_since_restore",
    "iterations_since_restore", "config", "checkpoint_dir_name", "done", "trial_id", "experiment_tag",
    "should_checkpoint", "_report_on",
})


class NoCheckpointError(MusterError, RuntimeError):
    """``get_best_checkpoint`` of a result with no checkpoint (a ``RuntimeError``, as Ray's)."""


class UnknownMetricError(InvalidArgumentError, RuntimeError):
    """``get_best_checkpoint`` with a metric no checkpoint was reported with (a ``RuntimeError``, as Ray's)."""


def lead_rank(reports: list[dict[str, Any]]) -> int | None:
    """The rank whose reports a result shows: the lowest that reported (rank 0 normally)."""
    ranks = {int(r["_rank"]) for r in reports if r.get("_rank") is not None}
    return min(ranks) if ranks else None


@dataclass
class Result:
    """The outcome of a Tune trial (``muster.tune.Result``); a training run's is a ``muster.train.Result``.

    Its metrics are Ray Tune's results: what the function reported, then what Tune adds to each
    result (``timestamp`` in whole seconds, ``done``, ``training_iteration``, ``trial_id``,
    ``time_total_s``, ``config``...).

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

    def __repr__(self) -> str:
        return self._repr(indent=0)

    def _repr(self, indent: int = 0) -> str:
        """Ray Tune's repr of a trial's result: one line each for its error (the class's name, only if it
        failed), its metrics (less the keys Tune fills in), path, filesystem and checkpoint, indented by
        ``indent``. A training run's ``muster.train.Result`` has the dataclass repr instead, as Ray Train V2's."""
        shown: dict[str, Any] = {"error": type(self.error).__name__} if self.error is not None else {}
        metrics = self.metrics
        if metrics:
            metrics = {k: v for k, v in metrics.items() if k not in AUTO_KEYS}
        shown.update(metrics=metrics, path=self.path, filesystem=filesystem_name(self.filesystem),
                     checkpoint=self.checkpoint)
        pad, inner = " " * indent, " " * (indent + 2)
        fields = ",\n".join(f"{inner}{key}={value!r}" for key, value in shown.items())
        return f"{pad}{type(self).__name__}(\n{fields}\n{pad})"

    @property
    def metrics_dataframe(self) -> Any:
        """Every report of the result's rank (rank 0 normally) as a pandas DataFrame. A trial's is
        Ray Tune's: its rows as Ray's ``result.json`` holds them (with ``done``, no ``experiment_tag``),
        nested dicts as ``a/b`` columns (``config/x`` too)."""
        rank = lead_rank(self.all_reports)
        return self._frame([r for r in self.all_reports if r.get("_rank") == rank])

    @property
    def all_metrics_dataframe(self) -> Any:
        """Every report of every rank (column ``_rank`` tells whose, ``_attempt`` which attempt)."""
        return self._frame(self.all_reports, keep=WHOSE)

    def _frame(self, rows: list[dict[str, Any]], keep: tuple[str, ...] = ()) -> Any:
        import pandas as pd

        # json_normalize: Ray reads its result.json so, nested dicts' columns after the others
        return pd.json_normalize([{**logged_result(r), **{k: r[k] for k in keep if k in r}} for r in rows], sep="/")

    def get_best_checkpoint(self, metric: str, mode: str) -> Checkpoint:
        """The committed checkpoint whose reported ``metric`` is best (``mode``: "max" or "min").

        Raises:
            NoCheckpointError: the result has no checkpoint (a ``RuntimeError``, as Ray's).
            InvalidArgumentError: ``mode`` is neither "max" nor "min".
            UnknownMetricError: no checkpoint was reported with ``metric`` (a ``RuntimeError``, as Ray's).
        """
        if not self.best_checkpoints:
            raise NoCheckpointError(
                f"get_best_checkpoint(metric={metric!r}, mode={mode!r}): the run at {self.path} has no checkpoint; "
                "pass checkpoint=Checkpoint.from_directory(...) to report() to save one."
            )
        if mode not in ("max", "min"):
            raise InvalidArgumentError(f"get_best_checkpoint(mode={mode!r}): use 'max' or 'min'.")
        records = [CheckpointRecord(i, c.path, m) for i, (c, m) in enumerate(self.best_checkpoints)]
        scored = [r for r in records if policies.score_of(r, metric) is not None]
        if not scored:
            raise UnknownMetricError(
                f"get_best_checkpoint(metric={metric!r}): no checkpoint was reported with that metric; "
                f"reported metrics are {sorted(self.best_checkpoints[0][1])}."
            )
        best = policies.rank_best(scored, metric, mode)[0]
        return self.best_checkpoints[best.round][0]

    @classmethod
    def from_path(cls, path: str, storage_filesystem: Any = None) -> Result:
        """Read a run's result back from its folder (local or URL; or a path on ``storage_filesystem``,
        a pyarrow or fsspec filesystem, as in Ray): a Tune trial's (a ``muster.tune.Result``), or a
        training run's (a ``muster.train.Result``), as the folder says it is."""
        from muster.train.result import read  # the reader knows both kinds

        return read(path, storage_filesystem)

