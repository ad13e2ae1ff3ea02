"""A trial, and one run of it.

Every trial is an ordinary muster training run in its own folder under the
experiment (``<storage_path>/<experiment>/<trial_name>/``): a function
trainable runs as a one-worker run, a ``TorchTrainer`` as its gang.  So a
trial gets, for free, what a run has: committed checkpoints, restarts from
the latest one under ``FailureConfig``, exact mid-epoch resume, every report
kept, and a ``Result`` that ``Result.from_path`` reads back.

A ``TrialRun`` drives one stretch of a trial on a thread of the driver (the
workers are the engine's processes); a trial that is paused and restarted
(population-based training) gets a new ``TrialRun`` on the same folder.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from muster.core.resources import fmt
from muster.train._internal.backend import Backend
from muster.train.checkpoint import Checkpoint
from muster.train.config import RunConfig, ScalingConfig
from muster.train.controller import Controller, ControllerHooks
from muster.train.result import Result
from muster.train.run_state import RunRecord
from muster.train.storage import Storage

PENDING, RUNNING, PAUSED, TERMINATED, ERROR = "PENDING", "RUNNING", "PAUSED", "TERMINATED", "ERROR"


@dataclass
class Trial:
    """One configuration being tried. ``status`` is Ray's: PENDING, RUNNING, PAUSED, TERMINATED or ERROR."""

    trial_id: str
    trial_name: str
    config: dict[str, Any]
    path: str
    resources: dict[str, float]
    status: str = PENDING
    last_result: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    num_results: int = 0
    # set by a scheduler that pauses the trial to restart it: (config, checkpoint, donor trial id)
    restart_plan: tuple[dict[str, Any], Checkpoint | None, str] | None = None
    run: "TrialRun | None" = field(default=None, repr=False)
    ending_as: str | None = field(default=None, repr=False)  # the status a stop request ends it in

    def to_json(self) -> dict[str, Any]:
        return {
            "trial_id": self.trial_id,
            "trial_name": self.trial_name,
            "config": self.config,
            "status": self.status,
            "last_result": self.last_result,
            "error": self.error,
            "path": self.path,
            "resources": self.resources,
            "num_results": self.num_results,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Trial":
        return cls(
            d["trial_id"], d["trial_name"], d["config"], d["path"], d.get("resources", {}),
            status=d.get("status", PENDING), last_result=d.get("last_result") or {}, error=d.get("error"),
            num_results=d.get("num_results", 0),
        )

    def __str__(self) -> str:
        return self.trial_name


@dataclass
class RunPlan:
    """What a trial runs: built from the trainable and the trial's config."""

    train_fn: Callable[..., Any]
    train_config: dict[str, Any] | None
    scaling: ScalingConfig
    backend: Backend
    run_config: RunConfig  # checkpoint/failure settings and worker timeout for the trial

    @property
    def resources(self) -> dict[str, float]:
        return self.scaling.total_resources

    def describe(self) -> str:
        return f"{self.scaling.num_workers} x {fmt(self.scaling.worker_resources)}"


class TrialRun:
    """One stretch of a trial: a training run's controller on a driver thread.

    Results (rank 0's reports, with Tune's fields added) and the end (a
    ``Result`` or the error) are put on ``events`` as ``("result", trial,
    run, row)`` and ``("end", trial, run, outcome)``.
    """

    def __init__(
        self,
        trial: Trial,
        plan: RunPlan,
        storage: Storage,
        extra: dict[str, Any],
        events: "queue.Queue[tuple[str, Trial, TrialRun, Any]]",
        start_from: Checkpoint | None = None,
        time_offset: float = 0.0,
    ):
        self.trial, self.plan, self.storage, self.events = trial, plan, storage, events
        self.extra, self.start_from, self.time_offset = extra, start_from, time_offset
        self.controller: Controller | None = None
        self._started_wall = time.time()
        self._last_time: dict[int, float] = {}
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._main, name=f"muster-trial-{trial.trial_id}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Kill the trial's workers; the run ends as STOPPED with its checkpoints kept."""
        self._stop.set()
        if self.controller is not None:
            self.controller.request_stop()

    # -- on the trial's thread ----------------------------------------------------------
    def _main(self) -> None:
        outcome: Any
        try:
            record = RunRecord(self.storage, "Trial", self.extra)
            record.open(allow_finished=True)
            run_config = RunConfig(
                name=self.storage.name,
                storage_path=self.storage.storage_path,
                checkpoint_config=self.plan.run_config.checkpoint_config,
                failure_config=self.plan.run_config.failure_config,
                worker_timeout_s=self.plan.run_config.worker_timeout_s,
                storage_filesystem=self.storage.fs,
                callbacks=[_Forward(self)],
                verbose=0,
            )
            self.controller = Controller(
                self.plan.train_fn, self.plan.train_config, self.plan.scaling, run_config, self.plan.backend, record,
                hooks=ControllerHooks(on_metrics=self._add_tune_fields, start_from=self.start_from),
            )
            if self._stop.is_set():
                self.controller.request_stop()
            result: Result = self.controller.run()
            result.config = self.trial.config
            outcome = result
        except BaseException as exc:  # noqa: BLE001 - the trial's failure, handed to the controller
            outcome = exc
        self.events.put(("end", self.trial, self, outcome))

    def _add_tune_fields(self, rank: int, metrics: dict[str, Any], t: float) -> dict[str, Any]:
        last = self._last_time.get(rank, self._started_wall)
        self._last_time[rank] = t
        out = dict(metrics)
        out.setdefault("time_this_iter_s", max(t - last, 0.0))
        out.setdefault("time_total_s", self.time_offset + max(t - self._started_wall, 0.0))
        out["trial_id"] = self.trial.trial_id
        return out


class _Forward:
    """The RunConfig callback that hands rank 0's reports to the Tune controller."""

    def __init__(self, run: TrialRun):
        self.run = run

    def on_report(self, row: dict[str, Any]) -> None:
        if row.get("_rank") == 0:
            self.run.events.put(("result", self.run.trial, self.run, row))
