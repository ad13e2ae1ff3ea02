"""``TuneConfig``, ``with_resources`` and ``with_parameters``: Ray Tune's names and fields."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from muster.core import resources as res
from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.tune.trainable import as_function


@dataclass(kw_only=True)
class TuneConfig:
    """How the search runs.

    Args:
        metric / mode: what "best" means (``mode``: "min" or "max"); passed on
            to the scheduler and search algorithm unless they have their own.
        search_alg: default ``BasicVariantGenerator`` (grid and random search).
        scheduler: default ``FIFOScheduler`` (no early stopping).
        num_samples: how many times the param_space is sampled (each grid
            point is tried this many times).
        max_concurrent_trials: cap on trials running at once (default: as
            many as the resources hold).
        time_budget_s: stop every trial after this many seconds.
        reuse_actors: accepted for Ray compatibility; muster trials start in
            milliseconds from its forked workers, so there is nothing to reuse.
        trial_name_creator / trial_dirname_creator: not supported (raise).
    """

    metric: str | None = None
    mode: str | None = None
    search_alg: Any = None
    scheduler: Any = None
    num_samples: int = 1
    max_concurrent_trials: int | None = None
    time_budget_s: float | None = None
    reuse_actors: bool | None = None
    trial_name_creator: Callable[..., str] | None = None
    trial_dirname_creator: Callable[..., str] | None = None

    def __post_init__(self) -> None:
        if self.mode not in (None, "min", "max"):
            raise InvalidArgumentError(f"TuneConfig(mode={self.mode!r}): use 'min' or 'max'.")
        if self.mode is not None and self.metric is None:
            raise InvalidArgumentError(f"TuneConfig(mode={self.mode!r}) without a metric: pass metric='loss' (say) as well.")
        if isinstance(self.num_samples, bool) or not isinstance(self.num_samples, int) or self.num_samples == 0 \
                or self.num_samples < -1:
            raise InvalidArgumentError(f"TuneConfig(num_samples={self.num_samples!r}): use an integer >= 1.")
        if self.num_samples == -1:
            raise InvalidArgumentError(
                "TuneConfig(num_samples=-1) (sample forever) needs a stopping condition muster does not have; "
                "pass a number of samples, with time_budget_s to bound the time."
            )
        if self.max_concurrent_trials is not None and (
            isinstance(self.max_concurrent_trials, bool) or not isinstance(self.max_concurrent_trials, int)
            or self.max_concurrent_trials < 1
        ):
            raise InvalidArgumentError(f"TuneConfig(max_concurrent_trials={self.max_concurrent_trials!r}): use an integer >= 1.")
        if self.time_budget_s is not None and not self.time_budget_s > 0:
            raise InvalidArgumentError(f"TuneConfig(time_budget_s={self.time_budget_s!r}): use a number of seconds > 0.")
        if self.trial_name_creator is not None or self.trial_dirname_creator is not None:
            raise InvalidArgumentError(
                "TuneConfig(trial_name_creator/trial_dirname_creator) is not supported: trial folders are named "
                "<trainable>_<trial_id> so that Tuner.restore can find them. Leave them unset."
            )


def _resources(spec: Any) -> dict[str, float]:
    """``{"cpu": 2, "gpu": 1, "custom": 1}`` (Ray's lowercase keys accepted) as engine resources."""
    if not isinstance(spec, dict):
        raise InvalidArgumentError(
            f"tune.with_resources(trainable, {spec!r}): pass a dict such as {{'cpu': 2, 'gpu': 1}}. "
            "For a TorchTrainer, set its ScalingConfig instead."
        )
    names = {"cpu": "CPU", "gpu": "GPU", "memory": "memory"}
    mapped = {names.get(k.lower(), k) if isinstance(k, str) else k: v for k, v in spec.items()}
    return res.normalize(mapped, what="tune.with_resources")


class _Trainable:
    """A function trainable with its trial resources and extra arguments attached."""

    def __init__(self, fn: Callable[..., Any], resources: dict[str, float] | None, parameters: dict[str, Any]):
        self.fn, self.resources, self.parameters = fn, resources, parameters
        functools.update_wrapper(self, fn)

    def __call__(self, config: dict[str, Any], **kwargs: Any) -> Any:
        return self.fn(config, **kwargs)


def _parts(trainable: Callable[..., Any]) -> tuple[Callable[..., Any], dict[str, float] | None, dict[str, Any]]:
    if isinstance(trainable, _Trainable):
        return trainable.fn, trainable.resources, trainable.parameters
    return trainable, None, {}


def trial_resources(trainable: Callable[..., Any]) -> dict[str, float] | None:
    """What ``with_resources`` asked for (None: the default, 1 CPU)."""
    return _parts(trainable)[1]


def trial_parameters(trainable: Callable[..., Any]) -> dict[str, Any]:
    """What ``with_parameters`` attached."""
    return _parts(trainable)[2]


def with_resources(trainable: Callable[..., Any], resources: dict[str, float]) -> Callable[..., Any]:
    """The same function trainable, asking for ``resources`` per trial (default 1 CPU)."""
    if not callable(trainable):
        raise InvalidTypeError(f"tune.with_resources({trainable!r}, ...): pass the trainable function.")
    fn, _, parameters = _parts(as_function(trainable))
    return _Trainable(fn, _resources(resources), parameters)


def with_parameters(trainable: Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
    """The same function trainable, called as ``trainable(config, **kwargs)``.

    The values are sent to each trial's worker once per trial (large tensors
    and arrays travel through the engine's shared-memory transport).
    """
    if not callable(trainable):
        raise InvalidTypeError(f"tune.with_parameters({trainable!r}, ...): pass the trainable function.")
    fn, resources, parameters = _parts(as_function(trainable))
    return _Trainable(fn, resources, {**parameters, **kwargs})
