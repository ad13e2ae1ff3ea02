"""Who hears of a run's reports and commits: one list, one call per event.

The controller keeps a list of listeners -- the live view, the run record,
the run store's recorder, the user's ``RunConfig(callbacks=...)`` -- and
hands each report and each commit to every one of them, in list order.
"""

from __future__ import annotations

from typing import Any, Protocol

from muster.exceptions import by_rank
from muster.train._internal.policies import CheckpointRecord
from muster.train.checkpoint import Checkpoint


class RunListener(Protocol):
    def on_report(self, row: dict[str, Any], timing: dict[str, float] | None) -> None: ...

    def on_checkpoint(self, record: CheckpointRecord) -> None: ...


def _name(record: CheckpointRecord) -> str:
    return record.path.rstrip("/").rsplit("/", 1)[-1]


class ViewListener:
    """The live progress view (``observe.progress.ProgressView``)."""

    def __init__(self, view: Any):
        self.view = view

    def on_report(self, row: dict[str, Any], timing: dict[str, float] | None) -> None:
        self.view.on_report(row, lead=row.get("_rank") == 0)

    def on_checkpoint(self, record: CheckpointRecord) -> None:
        self.view.on_checkpoint(_name(record))


class RecordListener:
    """The run folder's state file (``RunRecord``): the latest checkpoint."""

    def __init__(self, record: Any, status: str):
        self.record, self.status = record, status

    def on_report(self, row: dict[str, Any], timing: dict[str, float] | None) -> None:
        pass

    def on_checkpoint(self, record: CheckpointRecord) -> None:
        self.record.mark(self.status, record)


class RecorderListener:
    """The run store (``observe.recorder.RunRecorder``)."""

    def __init__(self, recorder: Any):
        self.recorder = recorder

    def on_report(self, row: dict[str, Any], timing: dict[str, float] | None) -> None:
        self.recorder.report(row, timing)

    def on_checkpoint(self, record: CheckpointRecord) -> None:
        self.recorder.checkpoint(record.round, record.path, record.metrics)


class UserCallbacks:
    """``RunConfig(callbacks=[...])``: any of ``on_run_start``, ``on_report``,
    ``on_checkpoint``, ``on_run_end`` on each object, and Ray V2's ``UserCallback``
    hooks, ``after_report`` and ``after_exception``, which get ``run_context`` first."""

    def __init__(self, callbacks: list[Any], filesystem: Any, run_context: Any = None):
        self.callbacks, self.filesystem, self.run_context = callbacks, filesystem, run_context

    def call(self, hook: str, *args: Any) -> None:
        for cb in self.callbacks:
            fn = getattr(cb, hook, None)
            if fn is not None:
                fn(*args)

    def on_report(self, row: dict[str, Any], timing: dict[str, float] | None) -> None:
        self.call("on_report", row)

    def on_checkpoint(self, record: CheckpointRecord) -> None:
        self.call("on_checkpoint", Checkpoint(record.path, self.filesystem), record.metrics)

    def on_round(self, round_: int, metrics: dict[int, dict[str, Any]], record: CheckpointRecord | None) -> None:
        if not any(hasattr(cb, "after_report") for cb in self.callbacks):
            return
        checkpoint = Checkpoint(record.path, self.filesystem) if record is not None else None
        self.call("after_report", self.run_context, [metrics[rank] for rank in sorted(metrics)], checkpoint)

    def on_failure(self, error: BaseException) -> None:
        """An attempt ended with ``error``; Ray's hook hears of it when a rank caused it, with what the
        rank's code raised (Ray V2 unwraps its ``UserExceptionWithTraceback`` so), not muster's wrapper."""
        failed = by_rank(error)
        if failed:
            self.call("after_exception", self.run_context, failed)

