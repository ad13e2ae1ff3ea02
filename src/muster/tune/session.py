"""What a trainable calls inside its trial: ``tune.report``, ``tune.get_checkpoint``, ``tune.get_context``.

A function trial is a one-worker training run, so these are the training
session's own calls; ``get_context`` adds the trial's identity.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from muster.exceptions import InvalidTypeError
from muster.train import get_checkpoint as _train_get_checkpoint
from muster.train import get_context as _train_get_context
from muster.train import report as _train_report
from muster.train.checkpoint import Checkpoint
from muster.train.context import TrainContext

_trial: dict[str, Any] | None = None


def report(metrics: dict[str, Any], *, checkpoint: Checkpoint | None = None, **kwargs: Any) -> None:
    """Report this trial's metrics for one iteration, with an optional checkpoint.

    Tune adds ``training_iteration`` (1, 2, ...), ``time_total_s``,
    ``time_this_iter_s``, ``timestamp`` and ``trial_id``. The scheduler sees
    the result at once and may stop the trial.
    """
    _train_report(metrics, checkpoint, **kwargs)


def get_checkpoint() -> Checkpoint | None:
    """The checkpoint to resume from: the trial's latest (after a failure or a
    restored experiment), another trial's (population-based training), or None."""
    return _train_get_checkpoint()


@dataclass
class TuneContext:
    """Who this trial is. Ray's ``TuneContext`` methods."""

    _train: TrainContext
    _trial: dict[str, Any]

    def get_trial_id(self) -> str:
        return str(self._trial["trial_id"])

    def get_trial_name(self) -> str:
        return str(self._trial["trial_name"])

    def get_trial_dir(self) -> str:
        return str(self._trial["path"])

    def get_trial_resources(self) -> Any:
        """What the trial holds, as Ray gives it: a ``PlacementGroupFactory`` (``required_resources``,
        ``head_cpus``, ``bundles``) of one bundle, the trial's resources."""
        from muster.tune.tune_config import PlacementGroupFactory

        return PlacementGroupFactory([dict(self._trial["resources"])])

    def get_experiment_name(self) -> str:
        return str(self._trial["experiment"])

    def get_world_rank(self) -> int:
        return self._train.get_world_rank()

    def get_world_size(self) -> int:
        return self._train.get_world_size()

    def get_attempt(self) -> int:
        return self._train.get_attempt()


def get_context() -> TuneContext:
    """This trial's id, name, folder and resources (inside a trainable only)."""
    if _trial is None:
        raise RuntimeError(
            "muster.tune.get_context() works only inside a trainable that a Tuner runs; it was called elsewhere."
        )
    return TuneContext(_train_get_context(), _trial)


class FunctionTrial:
    """The training function of a function trainable's trial (runs in the worker)."""

    def __init__(self, fn: Callable[..., Any], parameters: dict[str, Any], trial: dict[str, Any]):
        self.fn, self.parameters, self.trial = fn, parameters, trial

    def __call__(self, config: dict[str, Any]) -> None:
        global _trial
        _trial = self.trial
        try:
            final = self.fn(config, **self.parameters)
        finally:
            _trial = None
        if isinstance(final, dict):  # Ray: a returned dict is the trial's last result
            report(final)
        elif final is not None:
            raise InvalidTypeError(
                f"trainable {getattr(self.fn, '__name__', self.fn)!r} returned a {type(final).__name__}; a "
                "trainable returns None or a dict of final metrics (report the rest with tune.report)."
            )
