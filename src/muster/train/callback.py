"""Ray Train V2's ``UserCallback``: hooks the driver calls as a run goes.

``RunConfig(callbacks=[...])`` takes these, alongside muster's own hooks
(``on_report``, ``on_checkpoint``, ``on_run_start``, ``on_run_end``, ``on_run_failed``; see
``RunConfig``). Both kinds run in the driver, never in a worker.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from muster.train.checkpoint import Checkpoint
    from muster.train.config import RunConfig, ScalingConfig


@dataclass
class TrainRunContext:
    """What a ``UserCallback`` is told about the run it watches (Ray V2's ``TrainRunContext``).

    Attributes:
        run_id: a fresh hex id for this ``fit()``.
        run_config / scaling_config / train_loop_config: as the trainer was given them.
        backend_config: the trainer's backend (``TorchConfig`` for a ``TorchTrainer``).
        dataset_config: the trainer's ``DataConfig``, or None.
    """

    run_config: RunConfig
    train_loop_config: dict[str, Any] | None
    scaling_config: ScalingConfig
    backend_config: Any = None
    dataset_config: Any = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def get_run_config(self) -> RunConfig:
        return self.run_config


class UserCallback:
    """Subclass and override either hook; pass instances in ``RunConfig(callbacks=[...])``.

    Both hooks run in the driver, in the thread that heard the event: keep them short
    (a slow ``after_report`` delays the ``report()`` call of the rank whose report completed
    the round). An exception raised in ``after_report`` is raised in that rank's ``report()``,
    so it fails the attempt like an error of that rank, and ``FailureConfig`` decides.
    """

    def after_report(self, run_context: TrainRunContext, metrics: list[dict[str, Any]],
                     checkpoint: Checkpoint | None) -> None:
        """Called once per round, after every rank that reports has reported it.

        Args:
            run_context: the run's ``TrainRunContext``.
            metrics: the metrics each rank passed to ``report()``, in rank order (``metrics[i]``
                is rank i's when every rank reports; with the ``if rank == 0: report(...)``
                pattern, only the reporting ranks' are here).
            checkpoint: the round's committed checkpoint, already in storage; None when no
                rank passed files this round.
        """

    def after_exception(self, run_context: TrainRunContext, worker_exceptions: dict[int, BaseException]) -> None:
        """Called when an attempt fails because a rank raised or died, before any restart.

        Args:
            run_context: the run's ``TrainRunContext``.
            worker_exceptions: ``{rank: error}`` for the rank whose failure ended the attempt
                (muster stops the gang at the first failure, so there is one entry): the exception
                the rank's code raised, as in Ray (``isinstance(error, torch.cuda.OutOfMemoryError)``
                works), or muster's ``WorkerCrashedError`` for a rank that died.
        """
