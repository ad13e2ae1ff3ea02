"""``muster.air``'s configuration classes: Ray's ``ray.air.RunConfig`` and ``FailureConfig`` are the legacy
(Tune's) classes, not Ray Train V2's, and these are their counterparts (``muster.tune``'s extend them, as
Ray's ``ray.tune`` ones do; they live in ``muster.tune`` so that ``muster.tune`` never imports ``muster.air``).

Each is a subclass of muster's own class (so a ``Tuner`` and a trainer take it) that holds what Ray's holds:
Tune's options (``stop``, ``callbacks``, ``progress_reporter``, ``log_to_file``, ``verbose``, ``sync_config``;
``fail_fast="raise"``), and refuses Ray Train V2's (``worker_runtime_env``, ``logging_config``, the
preemption settings), as Ray's do. A trainer's ``fit()`` refuses a ``RunConfig`` of this module that sets
Tune's options, which no trainer uses, naming the fix (Ray Train V2 refuses any ``ray.air.RunConfig``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from muster.exceptions import InvalidArgumentError
from muster.train.config import FailureConfig as _TrainFailureConfig
from muster.train.config import RunConfig as _TrainRunConfig
from muster.tune.callback import Callback as _TuneCallback
from muster.tune.tune_config import CheckpointConfig

# Ray Train V2's settings that Ray's legacy classes have not, with their defaults
_V2_RUN_OPTIONS = {"worker_runtime_env": None, "logging_config": None}
_V2_FAILURE_OPTIONS = {"controller_failure_limit": -1, "max_preemption_failures": -1,
                       "relax_collectives_on_preemption": False, "preemption_grace_s": 0.0}


def _refuse_v2(config: Any, options: dict[str, Any], cls: str) -> None:
    for name, default in options.items():
        value = getattr(config, name)
        if value != default:
            raise InvalidArgumentError(
                f"muster.{config._package}.{cls}({name}={value!r}): {name} is Ray Train V2's, which Ray's "
                f"ray.{config._package}.{cls} has not (Ray refuses it too). Use muster.train.{cls}({name}=...)."
            )


class FailureConfig(_TrainFailureConfig):
    """Ray's ``ray.air.FailureConfig`` (Tune's): ``max_failures`` and ``fail_fast``.

    Args:
        max_failures: retries of a failed trial or run from its latest checkpoint (-1: forever).
        fail_fast: ``True`` ends a Tune experiment at the first trial error, ``"raise"`` also raises
            it from ``Tuner.fit()``; either needs ``max_failures=0``, as in Ray.

    Ray Train V2's ``controller_failure_limit`` and preemption settings are refused (Ray's class has
    none): they are ``muster.train.FailureConfig``'s.
    """

    _package: ClassVar[str] = "air"  # where the class is public (``muster.tune``'s subclass says "tune")

    def __post_init__(self) -> None:
        fail_fast: Any = self.fail_fast
        if not (isinstance(fail_fast, bool) or (isinstance(fail_fast, str) and fail_fast.upper() == "RAISE")):
            raise InvalidArgumentError(
                f"FailureConfig(fail_fast={fail_fast!r}): use True, False or 'raise' (raise the first trial "
                "error from Tuner.fit())."
            )
        if fail_fast and self.max_failures != 0:
            raise InvalidArgumentError(
                f"FailureConfig(fail_fast={fail_fast!r}, max_failures={self.max_failures!r}): fail_fast stops at "
                "the first error, so it needs max_failures=0 (Ray refuses this too). Drop one of them."
            )
        _refuse_v2(self, _V2_FAILURE_OPTIONS, "FailureConfig")
        super().__post_init__()


class RunConfig(_TrainRunConfig):
    """Ray's ``ray.air.RunConfig``: the legacy class, which Ray's ``tune.RunConfig`` extends.

    It takes Tune's options (``stop``, ``callbacks``, ``progress_reporter``, ``log_to_file``,
    ``verbose``, ``sync_config``) with muster's own (``worker_timeout_s``, ``stall_report_s``, ...);
    its defaults are ``muster.air.CheckpointConfig`` and ``muster.air.FailureConfig``. Ray Train
    V2's ``worker_runtime_env`` and ``logging_config`` are refused, as Ray's class has neither: they
    are ``muster.train.RunConfig``'s.

    A ``Tuner`` takes it as its own ``RunConfig``. A trainer's ``fit()`` refuses one that sets Tune's
    options (Ray Train V2's trainers refuse every ``ray.air.RunConfig``), and runs with one that sets none.
    """

    _package: ClassVar[str] = "air"

    def __post_init__(self) -> None:
        _refuse_v2(self, _V2_RUN_OPTIONS, "RunConfig")
        self.checkpoint_config = self.checkpoint_config or CheckpointConfig()
        self.failure_config = self.failure_config or FailureConfig()
        super().__post_init__()

    def _check_for_trainer(self, trainer: str) -> None:
        super()._check_for_trainer(trainer)
        tune_only = {"stop": self.stop, "progress_reporter": self.progress_reporter, "sync_config": self.sync_config,
                     "log_to_file": self.log_to_file or None,
                     "callbacks": [cb for cb in self.callbacks or [] if isinstance(cb, _TuneCallback)] or None}
        used = {name: value for name, value in tune_only.items() if value is not None}
        if used:
            given = ", ".join(f"{name}={value!r}" for name, value in used.items())
            raise InvalidArgumentError(
                f"{trainer}(run_config=muster.{self._package}.RunConfig({given})): {', '.join(used)} "
                f"{'is' if len(used) == 1 else 'are'} Ray Tune's, which a trainer does not use (Ray Train V2 "
                f"refuses a ray.{self._package}.RunConfig: 'Use ray.train.RunConfig instead'). Pass a "
                "muster.train.RunConfig "
                f"without {'it' if len(used) == 1 else 'them'}, or run the trainer as a Tune trial: "
                "muster.tune.Tuner(trainer, run_config=muster.tune.RunConfig(...)).fit()."
            )


__all__ = ["CheckpointConfig", "FailureConfig", "RunConfig"]
