"""Ray Train V2's local mode (``ScalingConfig(num_workers=0)``): the training function runs in the driver.

``TrainWorker.run``'s counterpart for a run without workers. The controller calls :func:`run_in_driver`
on the thread that called ``fit()``; the function runs there as rank 0 of 1, with no process group, and
its session hands each report straight to the controller (``Controller.take_report``), which records and
commits it as a worker's: metrics and checkpoints land in the run folder, and ``fit()`` returns the
usual ``Result``. Ray 2.60 (``ray.train.v2._internal.execution.local_mode``) does the same without a run
folder: it keeps only the last reported metrics and checkpoint object.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any, Callable

from muster.exceptions import InvalidArgumentError
from muster.train._internal import session as session_mod
from muster.train._internal.backend import Backend
from muster.train._internal.worker import _takes_config

#: torchrun's variables: Ray's local mode joins a process group when it finds all of them
_TORCHRUN = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclass
class DriverRank:
    """The one rank of a local-mode run, as the run store records a gang member (``recorder.WorkerInfo``)."""

    rank: int = 0
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)


def check_alone(trainer: str, in_trial: bool) -> None:
    """Before a local-mode run starts: refuse where its function would share the driver with other runs.

    Raises:
        InvalidArgumentError: a Tune trial (trials run side by side in the driver), torchrun's process, or
            a process already running a local-mode run.
    """
    if in_trial:
        raise InvalidArgumentError(
            f"{trainer}(scaling_config=ScalingConfig(num_workers=0)) as a Tune trial: local mode runs the training "
            "function in the driver's own process, where Tune runs its trials side by side. Use "
            "ScalingConfig(num_workers=1) for the trials."
        )
    if all(name in os.environ for name in _TORCHRUN):
        raise InvalidArgumentError(
            f"ScalingConfig(num_workers=0) under torchrun (RANK={os.environ['RANK']}, "
            f"WORLD_SIZE={os.environ['WORLD_SIZE']}): muster's local mode runs one process, and Ray's torchrun "
            "form of it (one process group over torchrun's processes) is not supported. Launch the script with "
            "plain `python` and ScalingConfig(num_workers=<processes>): muster starts that many workers and sets "
            "torchrun's variables in each."
        )
    if session_mod.current_session() is not None:
        raise InvalidArgumentError(
            "ScalingConfig(num_workers=0): a local-mode run is already running in this process (a training "
            "function that fits another trainer with num_workers=0). Give the inner trainer num_workers=1, "
            "which runs it in a worker process of its own."
        )


def run_in_driver(
    train_fn: Callable[..., Any],
    config: dict[str, Any] | None,
    spec: session_mod.SessionSpec,
    backend: Backend,
    send: session_mod.SendFn,
) -> Any:
    """Run the training function here, in this process and on this thread; return what it returned.

    Its exception is raised as it is (Ray's local mode has no retries).
    """
    session = session_mod.Session(spec, send)
    backend.on_driver_start()
    session_mod.set_session(session)
    try:
        returned = train_fn(config if config is not None else {}) if _takes_config(train_fn) else train_fn()
        session.drain()
        return returned
    finally:
        session_mod.set_session(None)
        backend.on_driver_end()
