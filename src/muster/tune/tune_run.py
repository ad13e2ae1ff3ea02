"""``tune.run``: Ray's older entry point, as a thin layer over ``Tuner``.

Its keywords become a ``TuneConfig``, a ``RunConfig`` (with ``CheckpointConfig`` and
``FailureConfig``) and ``tune.with_resources``, as Ray maps them itself; the search runs in
``Tuner.fit()`` and what it wrote is returned as an ``ExperimentAnalysis``.
"""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from muster.exceptions import InvalidArgumentError, InvalidTypeError, MusterError
from muster.train.config import CheckpointConfig as _TrainCheckpointConfig
from muster.tune.analysis import ExperimentAnalysis
from muster.tune.experiment.experiment import EXPERIMENT_KEYS, Experiment, check_trainable, experiment_list
from muster.tune.run_config import FailureConfig, RunConfig  # Tune's, as Ray's tune.run makes
from muster.tune.trial import Trial
from muster.tune.tune_config import CheckpointConfig, ResumeConfig, TuneConfig, with_resources
from muster.tune.tune_controller import graceful_stops
from muster.tune.tuner import Tuner

_log = logging.getLogger(__name__)
_UNSET: Any = object()


def run(
    run_or_experiment: Any,
    *,
    name: str | None = None,
    metric: str | None = None,
    mode: str | None = None,
    stop: Mapping[str, Any] | Callable[..., bool] | Any = None,
    time_budget_s: float | datetime.timedelta | None = None,
    config: dict[str, Any] | None = None,
    resources_per_trial: Any = None,
    num_samples: int = 1,
    storage_path: str | None = None,
    storage_filesystem: Any = None,
    search_alg: Any = None,
    scheduler: Any = None,
    checkpoint_config: _TrainCheckpointConfig | None = None,
    verbose: int | None = None,
    progress_reporter: Any = None,
    log_to_file: Any = False,
    trial_name_creator: Callable[..., str] | None = None,
    trial_dirname_creator: Callable[..., str] | None = None,
    sync_config: Any = None,
    export_formats: Sequence[Any] | None = None,
    max_failures: int = 0,
    fail_fast: bool = False,
    restore: str | None = None,
    resume: bool | str | None = None,
    resume_config: ResumeConfig | None = None,
    reuse_actors: bool = False,
    raise_on_failed_trial: bool = True,
    callbacks: Sequence[Any] | None = None,
    max_concurrent_trials: int | None = None,
    keep_checkpoints_num: int | None = None,
    checkpoint_score_attr: str | None = None,
    checkpoint_freq: int = 0,
    checkpoint_at_end: bool = False,
    chdir_to_trial_dir: Any = _UNSET,
    local_dir: str | None = None,
) -> ExperimentAnalysis:
    """Run trials of a trainable over ``config`` and return their analysis (Ray's ``tune.run``).

    Args:
        run_or_experiment: a function trainable ``f(config)`` that calls ``tune.report``, a
            ``tune.Trainable`` subclass (a registered name is not supported), or a ``tune.Experiment``
            (or a list of one), whose settings are then the experiment's keywords below.
        config: the search space (``Tuner``'s ``param_space``).
        name / storage_path / storage_filesystem / stop / verbose / progress_reporter / callbacks /
            log_to_file / sync_config / checkpoint_config: ``RunConfig``'s.
        metric / mode / search_alg / scheduler (objects or Ray's names) / num_samples / time_budget_s /
            max_concurrent_trials / reuse_actors / trial_name_creator / trial_dirname_creator: ``TuneConfig``'s.
        resources_per_trial: each trial's resources, as ``tune.with_resources`` takes them.
        max_failures / fail_fast: ``FailureConfig``'s (``fail_fast`` needs ``max_failures=0``, as in Ray).
        resume: ``True``/``"AUTO"`` continues the experiment ``<storage_path>/<name>`` if there is one
            (``Tuner.restore``), else starts it; Ray's suffixes ``+ERRORED``, ``+RESTART_ERRORED``,
            ``+ERRORED_ONLY``, ``+RESTART_ERRORED_ONLY`` say what errored trials do. ``resume_config``
            says it as a ``tune.ResumeConfig`` instead.
        raise_on_failed_trial: raise ``TuneError`` when a trial did not finish (default True).
        keep_checkpoints_num / checkpoint_score_attr (``"min-"`` prefix: lower is better) /
            checkpoint_freq / checkpoint_at_end: Ray's deprecated names for ``CheckpointConfig``'s fields.

    Returns:
        ExperimentAnalysis: with ``metric`` and ``mode`` as its defaults.

    Raises:
        TuneError: a trial did not complete and ``raise_on_failed_trial`` (the first error is the cause),
            unless Ctrl-C (SIGINT, or SIGUSR1) stopped the run: then, as in Ray, it returns what was saved (trials
            that were running are ``RUNNING``, to be continued with ``resume=True``). SIGTERM or a
            second Ctrl-C raises ``KeyboardInterrupt``.
        InvalidArgumentError / InvalidTypeError: an argument muster cannot honour, naming the fix.
    """
    if isinstance(run_or_experiment, (list, tuple, Experiment)):
        return _run_experiment(run_or_experiment, dict(locals()))
    check_trainable(run_or_experiment, restore, export_formats, "tune.run")
    if chdir_to_trial_dir is not _UNSET:
        raise InvalidArgumentError(
            f"tune.run(chdir_to_trial_dir={chdir_to_trial_dir!r}) is deprecated (Ray refuses it too): trials run "
            "in their own working folder; use tune.get_context().get_trial_dir() for the trial's folder."
        )
    trainable = run_or_experiment
    if fail_fast and max_failures != 0:
        raise InvalidArgumentError(
            f"tune.run(fail_fast={fail_fast!r}, max_failures={max_failures!r}): fail_fast needs max_failures=0 "
            "(as in Ray); drop one of them."
        )
    if config is not None and not isinstance(config, dict):
        raise InvalidTypeError(f"tune.run(config={config!r}): pass a dict search space, e.g. "
                               "{'lr': tune.grid_search([0.01, 0.1])}.")
    if resources_per_trial is not None:
        trainable = with_resources(trainable, resources_per_trial)
    if isinstance(time_budget_s, datetime.timedelta):
        time_budget_s = time_budget_s.total_seconds()
    tune_config = TuneConfig(
        metric=metric, mode=mode, search_alg=_named(search_alg, "search"), scheduler=_named(scheduler, "schedulers"),
        num_samples=num_samples, max_concurrent_trials=max_concurrent_trials, time_budget_s=time_budget_s,
        reuse_actors=reuse_actors, trial_name_creator=trial_name_creator, trial_dirname_creator=trial_dirname_creator,
    )
    run_config = RunConfig(
        name=name, storage_path=storage_path, storage_filesystem=storage_filesystem, stop=stop,
        verbose=_verbosity(verbose), progress_reporter=progress_reporter, callbacks=list(callbacks or []),
        log_to_file=log_to_file, sync_config=sync_config, local_dir=local_dir,
        failure_config=FailureConfig(max_failures=max_failures, fail_fast=fail_fast),
        checkpoint_config=_checkpointing(checkpoint_config, keep_checkpoints_num, checkpoint_score_attr,
                                         checkpoint_freq, checkpoint_at_end),
    )
    tuner = _resumed(trainable, config, run_config, resume, resume_config) or Tuner(
        trainable, param_space=config, tune_config=tune_config, run_config=run_config
    )
    return _fit(tuner, metric, mode, storage_filesystem, raise_on_failed_trial)


def _fit(tuner: Tuner, metric: str | None, mode: str | None, storage_filesystem: Any,
         raise_on_failed_trial: bool) -> ExperimentAnalysis:
    """Run the Tuner and analyse what it wrote; a Ctrl-C ends the run and returns what was saved, as in Ray."""
    tuner._resume_hint = "tune.run(..., name={name!r}, storage_path=..., resume=True)"
    grid = tuner.fit()
    interrupted = tuner._interrupted_by in graceful_stops()  # as in Ray: Ctrl-C ends the run, which returns
    analysis = ExperimentAnalysis(grid.experiment_path, storage_filesystem=storage_filesystem,
                                  default_metric=metric, default_mode=mode, _results=grid)
    failed = [t for t in analysis.trials if t.status != "TERMINATED"]
    names = ", ".join(f"{t} ({t.status})" for t in failed)
    if failed and raise_on_failed_trial and not interrupted:
        raise MusterError(
            f"Trials did not complete: {names}. Their errors are in {analysis.experiment_path}; pass "
            "raise_on_failed_trial=False to get the ExperimentAnalysis anyway."
        ) from (grid.errors[0] if grid.errors else None)
    if failed:
        _log.error("Trials did not complete: %s", names)
    return analysis


def _run_experiment(experiment: Any, given: dict[str, Any]) -> ExperimentAnalysis:
    """``tune.run(Experiment(...), ...)``: the experiment's settings with the run's own keywords."""
    if isinstance(experiment, (list, tuple)):
        if len(experiment) != 1 or not isinstance(experiment[0], Experiment):
            raise InvalidTypeError(
                f"tune.run({experiment!r}): pass one trainable or one tune.Experiment; run several "
                "experiments with tune.run_experiments([...])."
            )
        experiment = experiment[0]
    defaults = inspect.signature(run).parameters
    overridden = sorted(k for k in EXPERIMENT_KEYS if given[k] is not defaults[k].default)
    if overridden:
        raise InvalidArgumentError(
            f"tune.run({experiment!r}, {', '.join(f'{k}=...' for k in overridden)}): an Experiment holds "
            "these settings itself; pass them to tune.Experiment(...) instead."
        )
    run_keywords = {k: v for k, v in given.items() if k not in EXPERIMENT_KEYS and k != "run_or_experiment"}
    return run(**experiment.run_keywords(), **run_keywords)


def run_experiments(
    experiments: Any,
    scheduler: Any = None,
    verbose: int | None = None,
    progress_reporter: Any = None,
    resume: bool | str | None = None,
    resume_config: ResumeConfig | None = None,
    reuse_actors: bool = False,
    raise_on_failed_trial: bool = True,
    concurrent: bool = True,
    callbacks: Sequence[Any] | None = None,
) -> list[Trial]:
    """Run experiments to the end and return all their trials (Ray's ``tune.run_experiments``).

    Args:
        experiments: a ``tune.Experiment``, a dict ``{name: spec}`` in Ray's form (``spec`` holds
            ``"run"`` and any ``Experiment`` keyword), or a list of them.
        scheduler / verbose / progress_reporter / resume / resume_config / reuse_actors /
            raise_on_failed_trial / callbacks: as ``tune.run``'s, for every experiment.
        concurrent: Ray runs several experiments' trials side by side; muster runs the experiments
            one after another (as Ray's ``concurrent=False``) and warns when there are several.

    Returns:
        list[Trial]: every experiment's trials, in order (``config``, ``status``, ``last_result``,
        ``trial_id``, ``path``...).

    Raises:
        TuneError: a trial did not complete and ``raise_on_failed_trial``.
        InvalidArgumentError / InvalidTypeError: an experiment muster cannot run, naming the fix.
    """
    listed = experiment_list(experiments)
    if concurrent and len(listed) > 1:
        warnings.warn(
            f"tune.run_experiments: muster runs the {len(listed)} experiments one after another, not side by "
            "side (the same scheduler object serves each in turn); pass concurrent=False to say so.", stacklevel=2
        )
    trials: list[Trial] = []
    for experiment in listed:
        trials += run(experiment, scheduler=scheduler, verbose=verbose, progress_reporter=progress_reporter,
                      resume=resume, resume_config=resume_config, reuse_actors=reuse_actors,
                      raise_on_failed_trial=raise_on_failed_trial, callbacks=callbacks).trials
    return trials


def _named(value: Any, kind: str) -> Any:
    """A scheduler or search algorithm given by Ray's name (``"asha"``, ``"optuna"``...) made with defaults."""
    if not isinstance(value, str):
        return value
    if kind == "search":
        from muster.tune.search import create_searcher

        return create_searcher(value)
    from muster.tune.schedulers import create_scheduler

    return create_scheduler(value)


def _verbosity(verbose: Any) -> int:
    """Ray's 0..3 (or a ``Verbosity`` enum) as ``RunConfig(verbose=)``'s 0..2; None is the default, 1."""
    if verbose is None:
        return 1
    level = int(getattr(verbose, "value", verbose))
    if level < 0:
        raise InvalidArgumentError(f"tune.run(verbose={verbose!r}): use 0 (silent) to 3 (every result).")
    return min(level, 2)


def _checkpointing(config: Any, keep: int | None, score_attr: str | None, freq: int,
                   at_end: bool) -> _TrainCheckpointConfig | None:
    """``checkpoint_config`` with Ray's deprecated keywords applied to it (each with a DeprecationWarning)."""
    legacy: dict[str, Any] = {}
    if keep is not None:
        legacy["num_to_keep"] = keep
    if score_attr is not None:
        lower = score_attr.startswith("min-")
        legacy["checkpoint_score_attribute"] = score_attr[4:] if lower else score_attr
        legacy["checkpoint_score_order"] = "min" if lower else "max"
    if freq:
        legacy["checkpoint_frequency"] = freq
    if at_end:
        legacy["checkpoint_at_end"] = True
    if not legacy:
        return config
    names = {"num_to_keep": "keep_checkpoints_num", "checkpoint_score_attribute": "checkpoint_score_attr",
             "checkpoint_frequency": "checkpoint_freq", "checkpoint_at_end": "checkpoint_at_end"}
    for field, old in names.items():
        if field in legacy:
            warnings.warn(f"tune.run({old}=...) is deprecated, as in Ray: pass "
                          f"checkpoint_config=tune.CheckpointConfig({field}=...).", DeprecationWarning, stacklevel=3)
    base = dataclasses.asdict(config) if config is not None else {}
    return CheckpointConfig(**{**base, **legacy})


def _resumed(trainable: Any, config: dict[str, Any] | None, run_config: RunConfig, resume: Any,
             resume_config: ResumeConfig | None) -> Tuner | None:
    """A Tuner continuing ``<storage_path>/<name>`` when ``resume`` asks for it and it is there."""
    how = _resume_config(resume, resume_config)
    if how is None:
        return None
    if run_config.name is None:
        raise InvalidArgumentError(
            f"tune.run(resume={resume!r}) needs the experiment's name: pass name=... (and storage_path=...) "
            "as in the run it continues."
        )
    path = f"{run_config.resolved_storage_path().rstrip('/')}/{run_config.name}"
    if not Tuner.can_restore(path, run_config.storage_filesystem):
        _log.warning("tune.run(resume=%r): no experiment at %s to continue; starting it.", resume, path)
        return None
    tuner = Tuner.restore(path, trainable, param_space=config, storage_filesystem=run_config.storage_filesystem,
                          _resume_config=how)
    tuner.run_config.callbacks = run_config.callbacks  # callbacks are not saved with the experiment
    return tuner


def _resume_config(resume: Any, given: ResumeConfig | None) -> ResumeConfig | None:
    """Ray's ``resume=`` values (True, False, None, ``"AUTO"`` with ``+`` suffixes) as a ResumeConfig."""
    if resume is None or resume is False:
        return given
    if resume is True:
        return given or ResumeConfig()
    parts = str(resume).upper().split("+")
    if parts[0] != "AUTO":
        raise InvalidArgumentError(
            f"tune.run(resume={resume!r}): use True, False or 'AUTO' (Ray removed 'LOCAL', 'REMOTE', 'PROMPT'), "
            "optionally with '+ERRORED', '+RESTART_ERRORED', '+ERRORED_ONLY' or '+RESTART_ERRORED_ONLY'."
        )
    how = given or ResumeConfig()
    suffixes = {
        "ERRORED": {"errored": "resume"}, "RESTART_ERRORED": {"errored": "restart"},
        "ERRORED_ONLY": {"unfinished": "skip", "errored": "resume"},
        "RESTART_ERRORED_ONLY": {"unfinished": "skip", "errored": "restart"},
    }
    for suffix in parts[1:]:
        if suffix not in suffixes:
            raise InvalidArgumentError(f"tune.run(resume={resume!r}): unknown suffix {suffix!r}; use one of "
                                       f"{', '.join(suffixes)}.")
        how = ResumeConfig(**suffixes[suffix])
    return how
