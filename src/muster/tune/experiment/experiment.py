"""``tune.Experiment``: Ray's older description of one experiment (``ray.tune.experiment.Experiment``).

An ``Experiment`` holds what ``tune.run`` takes about one experiment: the trainable, its search
space, its stopping criteria, its resources, where it is stored and how its trials checkpoint.
``tune.run(experiment, ...)`` and ``tune.run_experiments(...)`` run it through ``tune.run``, so
through a ``Tuner``; the keywords that concern the whole run (scheduler, callbacks, verbosity...)
are theirs.
"""

from __future__ import annotations

import datetime
import posixpath
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.tune.run_config import FailureConfig, RunConfig
from muster.tune.stopper import CombinedStopper, Stopper, as_stopper
from muster.tune.tune_config import CheckpointConfig
from muster.tune.tuner import _class_checkpointing, _trainable_name, default_experiment_name

# tune.run's keywords that describe one experiment (an Experiment's); the others concern the run
EXPERIMENT_KEYS = (
    "name", "stop", "time_budget_s", "config", "resources_per_trial", "num_samples", "storage_path",
    "storage_filesystem", "sync_config", "checkpoint_config", "trial_name_creator", "trial_dirname_creator",
    "log_to_file", "export_formats", "max_failures", "restore", "local_dir",
)


class Experiment:
    """One experiment for ``tune.run_experiments`` (or ``tune.run``), as Ray's ``Experiment``.

    Args:
        name: the experiment's folder under ``storage_path`` (default: the trainable's name and
            the time, as ``Tuner`` names it).
        run: a function trainable or a ``tune.Trainable`` subclass (muster has no registry of
            trainables by name).
        stop / time_budget_s / config / resources_per_trial / num_samples / storage_path /
            storage_filesystem / sync_config / checkpoint_config (a ``CheckpointConfig`` or a dict of
            its fields) / trial_name_creator / trial_dirname_creator / log_to_file / max_failures:
            as ``tune.run``'s keywords of the same names. ``stop`` may also be a list of Stoppers.
        export_formats: accepted with a warning, as ``tune.run`` does (no effect).
        restore / local_dir: refused, as ``tune.run`` refuses them, naming the fix.

    Raises:
        InvalidTypeError: ``run`` is a name, or ``config`` is not a dict.
        InvalidArgumentError: a setting muster cannot honour (``restore``, ``local_dir``, a
            checkpoint frequency for a function trainable, a bad ``stop``), naming the fix.
    """

    PUBLIC_KEYS = {"stop", "num_samples", "time_budget_s"}  # Ray's: what schedulers and searchers are told

    def __init__(
        self,
        name: str | None,
        run: Any,
        *,
        stop: Mapping[str, Any] | Callable[..., bool] | Stopper | Sequence[Stopper] | None = None,
        time_budget_s: float | datetime.timedelta | None = None,
        config: dict[str, Any] | None = None,
        resources_per_trial: Any = None,
        num_samples: int = 1,
        storage_path: str | None = None,
        storage_filesystem: Any = None,
        sync_config: Any = None,
        checkpoint_config: CheckpointConfig | dict[str, Any] | None = None,
        trial_name_creator: Callable[..., str] | None = None,
        trial_dirname_creator: Callable[..., str] | None = None,
        log_to_file: Any = False,
        export_formats: Sequence[Any] | None = None,
        max_failures: int = 0,
        restore: str | None = None,
        local_dir: str | None = None,
    ):
        check_trainable(run, restore, export_formats, "tune.Experiment")
        if config is not None and not isinstance(config, dict):
            raise InvalidTypeError(f"tune.Experiment(config={config!r}): pass a dict search space, e.g. "
                                   "{'lr': tune.grid_search([0.01, 0.1])}.")
        if isinstance(stop, (list, tuple)):
            stop = _combined(stop)
        as_stopper(stop)  # a bad stop fails here, as in Ray, not when the experiment runs
        if isinstance(checkpoint_config, dict):
            checkpoint_config = CheckpointConfig(**checkpoint_config)
        checkpoint_config = checkpoint_config or CheckpointConfig()  # Ray's default
        _class_checkpointing(run, checkpoint_config)  # a frequency for a function trainable fails here, as in Ray
        self.name = name or default_experiment_name(run)
        self._run_config = RunConfig(  # checks storage_path, log_to_file, local_dir... as tune.run will
            name=self.name, storage_path=storage_path, storage_filesystem=storage_filesystem, stop=stop,
            log_to_file=log_to_file, sync_config=sync_config, local_dir=local_dir,
            failure_config=FailureConfig(max_failures=max_failures),
        )
        self.spec: dict[str, Any] = {
            "run": run, "stop": stop, "time_budget_s": time_budget_s, "config": config or {},
            "resources_per_trial": resources_per_trial, "num_samples": num_samples,
            "checkpoint_config": checkpoint_config, "trial_name_creator": trial_name_creator,
            "trial_dirname_creator": trial_dirname_creator, "log_to_file": log_to_file,
            "export_formats": list(export_formats or []), "max_failures": max_failures,
            "storage_path": storage_path, "storage_filesystem": storage_filesystem, "sync_config": sync_config,
        }

    @classmethod
    def from_json(cls, name: str, spec: Mapping[str, Any]) -> Experiment:
        """An Experiment from Ray's dict form, ``{"run": trainable, "config": {...}, "stop": {...}, ...}``.

        Raises:
            InvalidArgumentError: no ``"run"``, or a key that is not an ``Experiment`` argument.
        """
        if not isinstance(spec, Mapping):
            raise InvalidTypeError(f"tune.run_experiments({{{name!r}: {spec!r}}}): each experiment's spec is a dict "
                                   "such as {'run': trainable, 'config': {...}, 'stop': {...}}.")
        spec = dict(spec)
        if "run" not in spec:
            raise InvalidArgumentError(f"experiment {name!r}: its spec {spec!r} names no trainable; add "
                                       "'run': <function or tune.Trainable subclass>.")
        if "env" in spec:  # Ray's RLlib form: the environment goes into the config
            spec["config"] = {**(spec.get("config") or {}), "env": spec.pop("env")}
        allowed = set(EXPERIMENT_KEYS) - {"name"}
        unknown = sorted(set(spec) - allowed - {"run"})
        if unknown:
            raise InvalidArgumentError(f"experiment {name!r}: unknown keys {unknown} in its spec; use "
                                       f"'run' and any of {sorted(allowed)}.")
        return cls(name, spec.pop("run"), **spec)

    @property
    def run_identifier(self) -> str:
        """The trainable's name (Ray's registered name; muster runs the object itself)."""
        return _trainable_name(self.spec["run"])

    @property
    def stopper(self) -> Stopper | None:
        """The experiment's ``stop`` as a Stopper (None when there is none)."""
        stop = self.spec["stop"]
        return as_stopper(stop) if stop else None

    @property
    def checkpoint_config(self) -> CheckpointConfig:
        return self.spec["checkpoint_config"]

    @property
    def path(self) -> str:
        """The experiment's folder: ``<storage_path>/<name>``."""
        return posixpath.join(self._run_config.resolved_storage_path().rstrip("/"), self.name)

    @property
    def public_spec(self) -> dict[str, Any]:
        """The spec's keys that schedulers and searchers are told (Ray's ``PUBLIC_KEYS``)."""
        return {k: v for k, v in self.spec.items() if k in self.PUBLIC_KEYS}

    def run_keywords(self) -> dict[str, Any]:
        """What ``tune.run`` takes for this experiment: its trainable first, then its keywords
        (``export_formats`` left out: it was warned about when the Experiment was made)."""
        keywords = {k: v for k, v in self.spec.items() if k not in ("run", "export_formats")}
        return {"run_or_experiment": self.spec["run"], "name": self.name, **keywords}

    def __repr__(self) -> str:
        return f"Experiment(name={self.name!r}, run={self.run_identifier!r})"


def check_trainable(run: Any, restore: str | None, export_formats: Any, where: str) -> None:
    """What ``tune.run`` and ``Experiment`` refuse (a name, ``restore``) or warn about (``export_formats``)."""
    if isinstance(run, str):
        raise InvalidTypeError(
            f"{where}({run!r}): muster has no registry of trainables by name "
            "(tune.register_trainable); pass the function or tune.Trainable subclass itself."
        )
    if restore is not None:
        raise InvalidArgumentError(
            f"{where}(restore={restore!r}) (start a trial from a checkpoint) is not supported: load it in the "
            "trainable (Checkpoint.from_directory(path)), or continue an experiment with resume=True."
        )
    if export_formats:
        warnings.warn(f"{where}(export_formats={export_formats!r}) has no effect on muster (Ray deprecated it): "
                      "save what you need in the trainable's checkpoints.", stacklevel=3)


def _combined(stoppers: Sequence[Any]) -> Stopper:
    bad = [s for s in stoppers if not isinstance(s, Stopper)]
    if bad:
        raise InvalidArgumentError(f"tune.Experiment(stop={list(stoppers)!r}): a list of stop criteria holds "
                                   f"tune.Stopper objects only; {bad!r} is not one.")
    return CombinedStopper(*stoppers)


def experiment_list(experiments: Any) -> list[Experiment]:
    """``run_experiments``' argument (an Experiment, ``{name: spec}``, or a list of them) as a list."""
    if isinstance(experiments, Experiment):
        return [experiments]
    if isinstance(experiments, Mapping):
        return [Experiment.from_json(name, spec) for name, spec in experiments.items()]
    if isinstance(experiments, (list, tuple)) and experiments:
        return [exp for item in experiments for exp in experiment_list(item)]
    raise InvalidTypeError(
        f"tune.run_experiments({experiments!r}): pass a tune.Experiment, a dict {{name: spec}} such as "
        "{'exp': {'run': trainable, 'config': {...}}}, or a non-empty list of them."
    )
