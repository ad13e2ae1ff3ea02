"""Ray Train V2's calls about reported checkpoints and preemption, inside ``train_loop_per_worker``.

``get_all_reported_checkpoints`` reads the run's committed checkpoints (and
the metrics reported with each) from storage, after this worker's uploads
are done and no round is being committed.  ``get_preemption_info`` is always
None: muster's engine receives no preemption notices.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import Enum
from typing import Any

from muster.train._internal import session as _session
from muster.train.checkpoint import Checkpoint
from muster.train.config import CheckpointConsistencyMode
from muster.train.storage import MANIFEST, STAGING, Storage

_DEFAULT_WAIT_S = 120.0


class ReportedCheckpointStatus(Enum):
    COMMITTED = "COMMITTED"
    PENDING_VALIDATION = "PENDING_VALIDATION"
    VALIDATED = "VALIDATED"
    VALIDATION_TIMEOUT = "VALIDATION_TIMEOUT"
    VALIDATION_FAILED = "VALIDATION_FAILED"


@dataclass
class ReportedCheckpoint:
    """A committed checkpoint and the metrics reported with it."""

    checkpoint: Checkpoint
    metrics: dict[str, Any]
    status: ReportedCheckpointStatus = ReportedCheckpointStatus.COMMITTED


@dataclass(frozen=True)
class PreemptionInfo:
    """Ray's notice of an imminent preemption (never produced on muster's engine)."""

    deadline_ms: int | None
    preempted_node_to_ranks: dict[str, list[int]]


def get_preemption_info() -> PreemptionInfo | None:
    """Imminent preemption of this run's nodes: always None here (muster gets no preemption notices)."""
    _session.get_session("get_preemption_info")
    return None


def get_all_reported_checkpoints(
    consistency_mode: CheckpointConsistencyMode = CheckpointConsistencyMode.VALIDATED,
    timeout_s: float | None = None,
) -> list[ReportedCheckpoint]:
    """Every committed checkpoint of this run so far, oldest first (those retention deleted are gone).

    Waits for this worker's asynchronous uploads and for any round being
    committed (up to ``timeout_s``, default 120 s).

    Raises:
        TimeoutError: a round was still being committed after ``timeout_s``.
        RuntimeError: called outside a training worker.
    """
    if not isinstance(consistency_mode, CheckpointConsistencyMode):
        raise ValueError(f"get_all_reported_checkpoints(consistency_mode={consistency_mode!r}): pass a "
                         "muster.train.CheckpointConsistencyMode.")
    session = _session.get_session("get_all_reported_checkpoints")
    session.drain()
    storage = Storage.at(session.context.get_run_dir())
    staging = storage.join(storage.run_dir, STAGING)
    deadline = time.monotonic() + (_DEFAULT_WAIT_S if timeout_s is None else timeout_s)
    while storage.exists(staging) and storage.listdir(staging):
        if time.monotonic() > deadline:
            raise TimeoutError(f"get_all_reported_checkpoints: a checkpoint was still being committed after "
                               f"{timeout_s or _DEFAULT_WAIT_S} s; pass a larger timeout_s.")
        time.sleep(0.05)
    out = []
    for r in storage.committed_rounds():
        path = storage.checkpoint_dir(r)
        manifest = storage.read_json(storage.join(path, MANIFEST))
        out.append(ReportedCheckpoint(Checkpoint(path, storage.fs), dict(manifest.get("metrics", {}))))
    return out
