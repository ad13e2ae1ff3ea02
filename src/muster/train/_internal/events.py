"""What training workers tell the controller, and what the controller's own queue carries.

Every message is a frozen dataclass; receivers dispatch on its type, never
on a string key.  Worker messages cross the process boundary (pickled), so
they hold plain values only.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Union


# -- worker -> controller (sent over the worker's event link) --------------------------
@dataclass(frozen=True)
class Report:
    """One ``train.report()`` of one rank: its round, metrics, staged files and resume state."""

    rank: int
    round: int
    metrics: dict[str, Any]
    files: dict[str, dict[str, int]] | None
    state: bytes | None
    time: float
    timing: dict[str, float] | None = None


@dataclass(frozen=True)
class ReportStarted:
    """A rank entered ``report()`` for ``round`` (sent before its files are uploaded, so the
    controller knows at once which ranks report); with ``async_upload`` the call returns
    before the upload and a ``Report`` (or ``UploadFailed``) follows from the upload thread."""

    rank: int
    round: int
    async_upload: bool = False


@dataclass(frozen=True)
class UploadFailed:
    """An async upload failed: no ``Report`` follows for that round."""

    rank: int
    round: int
    error: str


@dataclass(frozen=True)
class Sample:
    """A worker's system figures (CPU, RSS, GPU), sent every few seconds."""

    rank: int
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FitRequest:
    """A function running in a worker (a Tune trial's, a task's, an actor's) called ``trainer.fit()``:
    the driver runs it. ``after_round``: the last round the caller's own training session reported
    (0 outside one)."""

    trainer: Any
    after_round: int = 0


@dataclass(frozen=True)
class FitReply:
    """The driver's answer to a ``FitRequest``: the trainer's ``Result``, and ``last_round``, where the
    driver recorded the trainer's reports as the caller's own (a Tune trial's), the last round it
    used (the caller's next report takes the one after); None where it recorded none."""

    result: Any
    last_round: int | None = None


WorkerMessage = Union[Report, ReportStarted, UploadFailed, Sample, FitRequest]


# -- the controller's own queue (reader threads and futures -> the control loop) --------
@dataclass(frozen=True)
class WorkerDone:
    """A rank's loop returned or raised (``future`` holds which)."""

    member: Any  # worker_group.Member
    future: Future


@dataclass(frozen=True)
class WorkerDied:
    """A rank's process ended without returning."""

    member: Any  # worker_group.Member
    error: BaseException


@dataclass(frozen=True)
class StopRequested:
    """``Controller.request_stop()``: end the run early, as a success."""


ControlEvent = Union[WorkerDone, WorkerDied, StopRequested]
