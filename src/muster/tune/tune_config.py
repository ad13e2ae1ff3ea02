"""``TuneConfig``, ``CheckpointConfig``, ``with_resources`` and ``with_parameters``: Ray Tune's names and fields."""

from __future__ import annotations

import datetime
import enum
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union

from muster.core import resources as res
from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.train.config import CheckpointConfig as _TrainCheckpointConfig
from muster.tune.trainable import ClassTrainable, Trainable, as_function


@dataclass(kw_only=True)
class TuneConfig:
    """How the search runs.

    Args:
        metric / mode: what "best" means (``mode``: "min" or "max"); passed on
            to the scheduler and search algorithm unless they have their own.
        search_alg: default ``BasicVariantGenerator`` (grid and random search).
        scheduler: default ``FIFOScheduler`` (no early stopping).
        num_samples: how many times the param_space is sampled (each grid
            point is tried this many times); -1: without end, until ``time_budget_s`` or a
            stopper's ``stop_all`` ends the run (as in Ray).
        max_concurrent_trials: cap on trials running at once (default, None or 0: as
            many as the resources hold, as in Ray).
        time_budget_s: stop every trial after this many seconds (or a ``datetime.timedelta``, kept
            as its seconds).
        reuse_actors: accepted for Ray compatibility; muster trials start in
            milliseconds from its forked workers, so there is nothing to reuse.
        trial_name_creator: a function of a new trial returning its name (``str(trial)``, the
            progress lines, ``get_context().get_trial_name()``).
        trial_dirname_creator: a function of a new trial returning its folder's name (one level,
            unique; characters other than letters, digits and ``_ . = + -`` become ``_``).
    """

    metric: str | None = None
    mode: str | None = None
    search_alg: Any = None
    scheduler: Any = None
    num_samples: int = 1
    max_concurrent_trials: int | None = None
    time_budget_s: float | datetime.timedelta | None = None
    reuse_actors: bool | None = None
    trial_name_creator: Callable[..., str] | None = None
    trial_dirname_creator: Callable[..., str] | None = None

    def __post_init__(self) -> None:
        if self.mode not in (None, "min", "max"):
            raise InvalidArgumentError(f"TuneConfig(mode={self.mode!r}): use 'min' or 'max'.")
        if isinstance(self.num_samples, bool) or not isinstance(self.num_samples, int) or self.num_samples == 0 \
                or self.num_samples < -1:
            raise InvalidArgumentError(
                f"TuneConfig(num_samples={self.num_samples!r}): use an integer >= 1, or -1 to sample until a "
                "stopping condition (time_budget_s=, a stopper's stop_all) ends the run.")
        if self.max_concurrent_trials == 0 and not isinstance(self.max_concurrent_trials, bool):
            self.max_concurrent_trials = None  # Ray's "None or 0: no limit"
        if self.max_concurrent_trials is not None and (
            isinstance(self.max_concurrent_trials, bool) or not isinstance(self.max_concurrent_trials, int)
            or self.max_concurrent_trials < 1
        ):
            raise InvalidArgumentError(
                f"TuneConfig(max_concurrent_trials={self.max_concurrent_trials!r}): use an integer >= 1, or None "
                "(or 0) for no limit.")
        if isinstance(self.time_budget_s, datetime.timedelta):  # Ray takes one too
            self.time_budget_s = self.time_budget_s.total_seconds()
        budget = self.time_budget_s
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, float))):
            raise InvalidTypeError(
                f"TuneConfig(time_budget_s={budget!r}): pass a number of seconds or a datetime.timedelta.")
        if budget is not None and not budget > 0:
            raise InvalidArgumentError(f"TuneConfig(time_budget_s={budget!r}): use a number of seconds > 0.")
        for name in ("trial_name_creator", "trial_dirname_creator"):
            if getattr(self, name) is not None and not callable(getattr(self, name)):
                raise InvalidTypeError(f"TuneConfig({name}={getattr(self, name)!r}): pass a function of the trial "
                                       "returning a str, e.g. lambda trial: f'trial_{trial.trial_id}'.")


@dataclass
class ResumeConfig:
    """Ray's ``tune.ResumeConfig`` (experimental there too): how ``Tuner.restore(path, trainable,
    _resume_config=ResumeConfig(...))`` treats the trials of each status, in place of its
    ``resume_unfinished``/``resume_errored``/``restart_errored`` flags.

    Args:
        finished: trials that finished (default ``SKIP``: not run again).
        unfinished: trials that were pending, running or paused (default ``RESUME``).
        errored: trials that failed (default ``SKIP``: they stay failed).
        Each is a ``ResumeConfig.ResumeType`` or its value (``"resume"``, ``"restart"``, ``"skip"``).
    """

    class ResumeType(str, enum.Enum):
        """``RESUME`` a trial from its latest checkpoint, ``RESTART`` it from scratch (its folder and
        results are removed), or ``SKIP`` it (a finished or unfinished trial counts as finished, a
        failed one stays failed)."""

        RESUME = "resume"
        RESTART = "restart"
        SKIP = "skip"

    finished: str = ResumeType.SKIP
    unfinished: str = ResumeType.RESUME
    errored: str = ResumeType.SKIP

    def __post_init__(self) -> None:
        for name in ("finished", "unfinished", "errored"):
            value = getattr(self, name)
            try:
                setattr(self, name, ResumeConfig.ResumeType(value))
            except ValueError:
                raise InvalidArgumentError(
                    f"ResumeConfig({name}={value!r}): use ResumeConfig.ResumeType.RESUME, RESTART or SKIP "
                    "(or 'resume', 'restart', 'skip')."
                ) from None


_NAMES = {"cpu": "CPU", "gpu": "GPU", "memory": "memory"}
Resources = Union[dict[str, float], "PlacementGroupFactory", Callable[[dict[str, Any]], Any]]


@dataclass(kw_only=True)
class CheckpointConfig(_TrainCheckpointConfig):
    """``muster.train.CheckpointConfig`` (retention) plus Ray Tune's two settings for class trainables.

    Args:
        checkpoint_frequency: save a ``tune.Trainable`` every this many
            iterations (0: not periodically). Default ``None``: every
            iteration, so that failure restarts and population-based training
            always have a checkpoint (Ray saves on demand when it pauses a
            trial; muster stops a trial's process at once instead).
        checkpoint_at_end: also save the trial's last iteration: when ``step()``
            returns ``done``, or a stop condition or the scheduler stops (or
            pauses) the trial on that result (default for a class trainable:
            True, as in Ray).
        num_to_keep / checkpoint_score_attribute / checkpoint_score_order: see
            ``muster.train.CheckpointConfig``.

    A function trainable (and a ``TorchTrainer``) saves its own checkpoints
    by passing one to ``report``: as in Ray, the Tuner refuses these two
    settings for them.
    """

    checkpoint_frequency: int | None = None
    checkpoint_at_end: bool | None = None

    def _check_trainable_settings(self) -> None:
        freq = self.checkpoint_frequency
        if freq is not None and (isinstance(freq, bool) or not isinstance(freq, int) or freq < 0):
            raise InvalidArgumentError(
                f"CheckpointConfig(checkpoint_frequency={freq!r}): use an integer >= 0 (0: no periodic "
                "checkpoints), or None to save every iteration."
            )
        if self.checkpoint_at_end is not None and not isinstance(self.checkpoint_at_end, bool):
            raise InvalidArgumentError(
                f"CheckpointConfig(checkpoint_at_end={self.checkpoint_at_end!r}): use True, False or None."
            )


def _resources(spec: Any, what: str = "tune.with_resources") -> dict[str, float]:
    """``{"cpu": 2, "gpu": 1, "custom": 1}`` (Ray's lowercase keys accepted) as one worker's resources.

    As in Ray, a dict without a CPU entry asks for no CPU (``{"gpu": 1}`` is one GPU and
    0 CPUs), and an empty dict is the default, 1 CPU.
    """
    if not isinstance(spec, dict):
        raise InvalidArgumentError(
            f"{what}: got {spec!r}; pass a dict such as {{'cpu': 2, 'gpu': 1}}, or a function "
            "config -> dict for per-trial resources. For a TorchTrainer, set its ScalingConfig instead."
        )
    if not spec:
        return {"CPU": 1.0}
    mapped = {_NAMES.get(k.lower(), k) if isinstance(k, str) else k: v for k, v in spec.items()}
    normal = res.normalize(mapped, what=what)
    if not normal:
        raise InvalidArgumentError(
            f"{what}: {spec!r} asks for nothing, so a trial could never be placed; ask for at least "
            "{'cpu': 1} (or leave with_resources out for the default of 1 CPU)."
        )
    return {"CPU": 0.0, **normal}  # the explicit 0 keeps ScalingConfig's default CPU out


class PlacementGroupFactory:
    """Ray's resource request for a trial: ``bundles`` (dicts) and a ``strategy``.

    On one machine a trial's bundles are held together, so a trial asks for their sum
    (``[{"cpu": 1}, {"cpu": 2, "gpu": 1}]`` is 3 CPUs and 1 GPU), and its trainable holds the head bundle,
    as Ray's (see ``head_bundle``); the strategy is accepted and checked, as muster's placement groups are.
    """

    def __init__(self, bundles: list[dict[str, float]], strategy: str = "PACK", *args: Any, **kwargs: Any):
        if not isinstance(bundles, list) or not bundles or not all(isinstance(b, dict) for b in bundles):
            raise InvalidArgumentError(
                f"PlacementGroupFactory({bundles!r}): pass a non-empty list of resource dicts, e.g. [{{'cpu': 1}}]."
            )
        if strategy not in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"):
            raise InvalidArgumentError(
                f"PlacementGroupFactory(strategy={strategy!r}): use PACK, SPREAD, STRICT_PACK or STRICT_SPREAD."
            )
        self.bundles, self.strategy = [dict(b) for b in bundles], strategy

    @property
    def required_resources(self) -> dict[str, float]:
        """The bundles' sum, with Ray's upper-case names."""
        total: dict[str, float] = {}
        for bundle in self.bundles:
            for key, value in bundle.items():
                name = _NAMES.get(key.lower(), key) if isinstance(key, str) else key
                total[name] = total.get(name, 0.0) + float(value)
        return total

    @property
    def head_cpus(self) -> float:
        """The first bundle's CPUs (Ray's trial "head")."""
        return float(next((v for k, v in self.bundles[0].items() if isinstance(k, str) and k.lower() == "cpu"), 0.0))

    def __repr__(self) -> str:
        return f"PlacementGroupFactory({self.bundles!r}, strategy={self.strategy!r})"


def _check_resources(spec: Any) -> Resources:
    """A dict (normalized) or a placement group factory (kept whole) is checked now; a function of the
    config is called for each trial."""
    if isinstance(spec, PlacementGroupFactory):
        _resources(spec.required_resources)  # checked now; kept whole, as the trial's context gives it back
        return spec
    if callable(spec):
        return spec
    return _resources(spec)


class _Trainable:
    """A function trainable with its trial resources and extra arguments attached."""

    def __init__(self, fn: Callable[..., Any], resources: Resources | None, parameters: dict[str, Any]):
        self.fn, self.resources, self.parameters = fn, resources, parameters
        functools.update_wrapper(self, fn)

    def __call__(self, config: dict[str, Any], **kwargs: Any) -> Any:
        """``fn(config, **parameters)``, as Ray's wrapper is called: the ``with_parameters`` values go in."""
        return self.fn(config, **{**self.parameters, **kwargs})

    def named(self, name: str) -> _Trainable:
        """Itself under ``name``, which names its experiment and trials."""
        vars(self).update(__name__=name, __qualname__=name)
        return self


def _parts(trainable: Callable[..., Any]) -> tuple[Callable[..., Any], Resources | None, dict[str, Any]]:
    if isinstance(trainable, _Trainable):
        return trainable.fn, trainable.resources, trainable.parameters
    return trainable, None, {}


def renamed(trainable: Callable[..., Any], name: str) -> Callable[..., Any]:
    """The same function trainable (its resources and parameters too) under another ``__name__``,
    which names its experiment and trials (``wrap_function(fn, name=...)``)."""
    return _Trainable(*_parts(trainable)).named(name)


def _named_as(given: Callable[..., Any], out: _Trainable) -> _Trainable:
    """``out`` under the name of the trainable it was made from (a ``renamed`` one keeps its name)."""
    return out.named(vars(given)["__name__"]) if isinstance(given, _Trainable) else out


def trial_function(trainable: Callable[..., Any]) -> Callable[..., Any]:
    """The function (or ``ClassTrainable``) under ``with_resources``/``with_parameters``."""
    return _parts(trainable)[0]


def trial_request(
    trainable: Callable[..., Any], config: dict[str, Any]
) -> tuple[dict[str, float] | None, PlacementGroupFactory | None]:
    """What ``with_resources`` asks for one worker of the trial with ``config``: its resources (None: the
    default, 1 CPU), and the ``PlacementGroupFactory`` they came from, if one did (the trial holds its
    bundles' sum; ``tune.get_context().get_trial_resources()`` gives the factory back, bundles and all, as Ray's).

    Raises:
        InvalidArgumentError / InvalidTypeError: a resources function returned something other
            than a dict (or None for the default).
    """
    fn, spec, _ = _parts(trainable)
    name, where = getattr(spec, "__name__", repr(spec)), "tune.with_resources"
    if spec is None and isinstance(fn, ClassTrainable) and _sizes_itself(fn.cls):
        spec, name = fn.cls.default_resource_request, f"{fn.cls.__name__}.default_resource_request"
        where = name  # a Trainable class that sizes its own trials, as Ray's asks it to
    if spec is None or isinstance(spec, dict):
        return spec, None
    got = spec if isinstance(spec, PlacementGroupFactory) else spec(config)
    if got is None:
        return None, None
    factory = got if isinstance(got, PlacementGroupFactory) else None
    if factory is not None:
        got = factory.required_resources
    if not isinstance(got, dict):
        raise InvalidTypeError(
            f"{where}: the resources function {name} returned {got!r} for config {config!r}; "
            "return a dict such as {'cpu': 2, 'gpu': 1} (or None for the default, 1 CPU)."
        )
    return _resources(got, what=f"{where} (what {name} returned for config {config!r})"), factory


def head_bundle(factory: PlacementGroupFactory | None) -> dict[str, float] | None:
    """What a trial's trainable itself holds, as Ray places it: the factory's first bundle (Ray's upper-case
    names, no zero amounts; ``{}`` for an empty head), the other bundles being for what it starts; None
    without a factory (the trainable holds all the trial's resources)."""
    if factory is None:
        return None
    head = {_NAMES.get(k.lower(), k) if isinstance(k, str) else k: v for k, v in factory.bundles[0].items()}
    return res.normalize(head, what=f"{factory!r}: its head bundle (bundles[0])")


def _sizes_itself(cls: type[Trainable]) -> bool:
    """Whether a Trainable subclass overrides ``default_resource_request``."""
    own = getattr(cls.default_resource_request, "__func__", None)
    return own is not getattr(Trainable.default_resource_request, "__func__", None)


def trial_parameters(trainable: Callable[..., Any]) -> dict[str, Any]:
    """What ``with_parameters`` attached."""
    return _parts(trainable)[2]


def with_resources(trainable: Callable[..., Any], resources: Resources) -> Callable[..., Any]:
    """The same trainable, asking for ``resources`` per trial (default 1 CPU).

    Args:
        trainable: a function trainable or a ``tune.Trainable`` subclass.
        resources: a dict such as ``{"cpu": 2, "gpu": 1}`` (Ray's keys; as in Ray, a dict
            without ``"cpu"`` asks for no CPU), or a function ``config -> dict`` called
            with each trial's resolved config, so trials may differ.

    Raises:
        InvalidTypeError: ``trainable`` is not callable.
        InvalidArgumentError: ``resources`` is neither a dict nor a function, or asks for nothing.
    """
    if not callable(trainable):
        raise InvalidTypeError(f"tune.with_resources({trainable!r}, ...): pass the trainable function.")
    given = as_function(trainable)
    fn, _, parameters = _parts(given)
    return _named_as(given, _Trainable(fn, _check_resources(resources), parameters))


def with_parameters(trainable: Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
    """The same function trainable, called as ``trainable(config, **kwargs)``.

    The values are sent to each trial's worker once per trial (large tensors
    and arrays travel through the engine's shared-memory transport).
    """
    if not callable(trainable):
        raise InvalidTypeError(f"tune.with_parameters({trainable!r}, ...): pass the trainable function.")
    given = as_function(trainable)
    fn, resources, parameters = _parts(given)
    return _named_as(given, _Trainable(fn, resources, {**parameters, **kwargs}))
