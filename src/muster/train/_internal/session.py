"""The per-worker training session behind ``report``/``get_checkpoint``/``get_context``.

``report`` never waits for other ranks: it stages this rank's files (if any)
in storage, hands the report to the driver, and returns once the driver has
recorded it.  Committing the round is the controller's job.
"""

from __future__ import annotations

import math
import numbers
import threading
import time
from dataclasses import dataclass
from typing import Any

from muster.core import context as core_context
from muster.train.checkpoint import Checkpoint
from muster.train.context import TrainContext
from muster.train.storage import Storage


@dataclass
class SessionSpec:
    """Everything a worker needs to start an attempt (sent by the controller)."""

    context: TrainContext
    storage: Storage
    start_round: int
    checkpoint: Checkpoint | None


class Session:
    def __init__(self, spec: SessionSpec):
        self.context = spec.context
        self.storage = spec.storage
        self.round = spec.start_round
        self.checkpoint = spec.checkpoint
        self._lock = threading.Lock()

    def report(self, metrics: dict[str, Any], checkpoint: Checkpoint | None) -> None:
        clean = _plain_metrics(metrics)
        with self._lock:
            self.round += 1
            round_index = self.round
            files: dict[str, int] | None = None
            if checkpoint is not None:
                files = self._stage(checkpoint, round_index)
            core_context.send_event(
                {
                    "kind": "report",
                    "rank": self.context.world_rank,
                    "round": round_index,
                    "metrics": clean,
                    "files": files,
                    "time": time.time(),
                },
                wait=True,
            )

    def _stage(self, checkpoint: Checkpoint, round_index: int) -> dict[str, int]:
        if not isinstance(checkpoint, Checkpoint):
            raise TypeError(
                f"report(checkpoint={checkpoint!r}): pass a muster.train.Checkpoint, e.g. "
                "Checkpoint.from_directory(folder)."
            )
        with checkpoint.as_directory() as folder:
            return self.storage.upload_dir(folder, self.storage.staging_dir(round_index))


def _plain_metrics(metrics: Any) -> dict[str, Any]:
    """Metrics as JSON-ready Python values (0-d tensors and numpy scalars become numbers)."""
    if not isinstance(metrics, dict):
        raise TypeError(
            f"report(metrics=...) takes a dict such as {{'loss': 0.1}}, got {type(metrics).__name__}."
        )
    return {str(k): _plain(v, str(k)) for k, v in metrics.items()}


def _plain(value: Any, key: str) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        v = float(value)
        return v if math.isfinite(v) else str(v)
    if hasattr(value, "item") and hasattr(value, "shape") and math.prod(value.shape) == 1:
        return _plain(value.item(), key)
    if isinstance(value, dict):
        return {str(k): _plain(v, f"{key}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{key}[{i}]") for i, v in enumerate(value)]
    raise TypeError(
        f"report(metrics): metrics[{key!r}] is a {type(value).__name__}, which cannot be recorded. "
        "Report numbers, strings, or lists/dicts of them (call .item() on a one-element tensor)."
    )


_session: Session | None = None


def set_session(session: Session | None) -> None:
    global _session
    _session = session


def get_session(api: str) -> Session:
    if _session is None:
        raise RuntimeError(
            f"muster.train.{api}() works only inside train_loop_per_worker while a Trainer runs it; "
            "it was called outside a training worker."
        )
    return _session

