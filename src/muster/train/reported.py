"""Ray Train V2's calls about reported checkpoints and preemption, inside ``train_loop_per_worker``.

``get_all_reported_checkpoints`` reads the run's committed checkpoints (and
the metrics reported with each) from storage, once the latest round in which
this worker reported a checkpoint is committed.  ``get_preemption_info`` is always
None: muster's engine receives no preemption notices.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import Enum
from typing import Any

from muster.exceptions import InvalidArgumentError
from muster.train._internal import session as _session
from muster.train.checkpoint import Checkpoint
from muster.train.config import CheckpointConsistencyMode
from muster.train.result import _reported
from muster.train.storage import MANIFEST, Storage

_DEFAULT_WAIT_S = 120.0
_last_checkpoint_round: dict[int, int] = {}  # id(session) -> its latest round that reported a checkpoint


def note_report(checkpoint: Checkpoint | None) -> None:
    """Called after each ``report``: remember the round if it carried a checkpoint."""
    if checkpoint is not None:
        session = _session.get_session("report")
        _last_checkpoint_round[id(session)] = session.round


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

    Waits for this worker's asynchronous uploads and until the latest round
    in which it reported a checkpoint is committed (with ``VALIDATED``, the
    default, also until that checkpoint's validation ended; up to ``timeout_s``,
    default 120 s; a round in which no rank's checkpoint folder had files is
    never committed, so do not wait on one).

    Raises:
        TimeoutError: that round was not committed within ``timeout_s``.
        RuntimeError: called outside a training worker.
    """
    if not isinstance(consistency_mode, CheckpointConsistencyMode):
        raise InvalidArgumentError(f"get_all_reported_checkpoints(consistency_mode={consistency_mode!r}): pass a "
                         "muster.train.CheckpointConsistencyMode.")
    session = _session.get_session("get_all_reported_checkpoints")
    session.drain()
    storage = Storage.at(session.context.get_run_dir())
    wanted = _last_checkpoint_round.get(id(session))
    deadline = time.monotonic() + (_DEFAULT_WAIT_S if timeout_s is None else timeout_s)
    while wanted is not None and not storage.exists(storage.join(storage.checkpoint_dir(wanted), MANIFEST)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"get_all_reported_checkpoints: the checkpoint of round {wanted} was not committed "
                               f"within {timeout_s or _DEFAULT_WAIT_S} s; pass a larger timeout_s.")
        time.sleep(0.05)
    if wanted is not None and consistency_mode is CheckpointConsistencyMode.VALIDATED:
        while storage.checkpoint_metrics(wanted)[1] == ReportedCheckpointStatus.PENDING_VALIDATION.value:
            if time.monotonic() > deadline:
                raise TimeoutError(f"get_all_reported_checkpoints: the validation of round {wanted}'s checkpoint did "
                                   f"not end within {timeout_s or _DEFAULT_WAIT_S} s; pass a larger timeout_s, or "
                                   "consistency_mode=CheckpointConsistencyMode.COMMITTED not to wait for it.")
            time.sleep(0.05)
    out = []
    for r in storage.committed_rounds():
        metrics, status = storage.checkpoint_metrics(r)
        out.append(ReportedCheckpoint(Checkpoint(storage.checkpoint_dir(r), storage.fs), _reported(metrics),
                                      ReportedCheckpointStatus(status)))
    return out
