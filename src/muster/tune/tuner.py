"""``Tuner``: run a hyperparameter search over a trainable.

The trainable is a function (``def train_fn(config): ... tune.report(...)``),
a ``TorchTrainer`` (its ``train_loop_config`` is what the param_space
fills in), or a function that builds and fits a ``TorchTrainer`` itself.
"""

from __future__ import annotations

import copy
import datetime
import logging
import posixpath
import re
import secrets
import warnings
from typing import Any

import cloudpickle

from muster.core import resources as res
from muster.core import settings
from muster.core.api import get_runtime
from muster.core.interrupts import sigterm_as_interrupt
from muster.exceptions import InvalidArgumentError, InvalidTypeError, expect_instance
from muster.observe.trial_rows import logged_result, trial_result
from muster.train._internal.backend import Backend
from muster.train.config import RunConfig, ScalingConfig
from muster.train._internal.result_base import Result, lead_rank
from muster.train.result import read as read_result
from muster.train.storage import Storage
from muster.train.trainer import DataParallelTrainer, _without_callbacks
from muster.tune import progress_reporter
from muster.tune import trial as trial_mod
from muster.tune import trial_loggers
from muster.tune.callback import CallbackList
from muster.tune.trial_info import as_users_error
from muster.tune.experiment_state import EXPERIMENT_STATE, forget_earlier_run, read_saved
from muster.tune.tune_controller import ERROR_FILE, TuneController, graceful_stops
from muster.tune.result_grid import ResultGrid, TrialError
from muster.tune.run_config import RunConfig as TuneRunConfig
from muster.tune.schedulers.trial_scheduler import FIFOScheduler, TrialScheduler
from muster.tune.search.search_algorithm import SearchAlgorithm
from muster.tune.search.searcher import ConcurrencyLimiter, Searcher, SearchGenerator
from muster.tune.search.variant_generator import BasicVariantGenerator
from muster.tune.session import FunctionTrial
from muster.tune.stopper import as_stopper
from muster.tune.trainable import ClassTrainable, as_function
from muster.tune.trial_output import log_file_names
from muster.tune.trial import RunPlan, Trial
from muster.tune.tune_config import (ResumeConfig, TuneConfig, head_bundle, trial_function, trial_parameters,
                                     trial_request)

_log = logging.getLogger(__name__)
TUNER_FILE = "tuner.pkl"
_RESUME_HINT = "Tuner.restore({path!r}, trainable)"  # filled in with the experiment's folder and name


class Tuner:
    """Runs trials of ``trainable`` over ``param_space``.

    Args:
        trainable: a function ``f(config)`` that calls ``tune.report``; a
            ``TorchTrainer``; or a function that builds and fits a trainer.
            Wrap a function with ``tune.with_resources`` to give each trial
            more than 1 CPU.
        param_space: the search space: nested dicts of constants, domains
            (``tune.uniform(...)``...) and ``tune.grid_search([...])``. For a
            trainer, put hyperparameters under ``"train_loop_config"`` (as in
            Ray); keys that are not trainer arguments are put there for you, and
            keys that are (``"datasets"``, ``"scaling_config"``...) set them per trial.
        tune_config: metric, mode, scheduler, search algorithm, samples.
        run_config: the experiment's name and storage, the trials' checkpoint
            and failure settings, and ``stop``. Default: a trainer's own, else a
            ``muster.tune.RunConfig()`` (Tune's class, as in Ray).
    """

    def __init__(
        self,
        trainable: Any = None,
        *,
        param_space: dict[str, Any] | None = None,
        tune_config: TuneConfig | None = None,
        run_config: RunConfig | None = None,
    ):
        trainable = as_function(trainable)  # a tune.Trainable subclass runs as a function trainable
        _check_trainable(trainable)
        if param_space is not None and not isinstance(param_space, dict):
            raise InvalidTypeError(
                f"Tuner(param_space={param_space!r}): pass a dict, e.g. {{'lr': tune.loguniform(1e-4, 1e-1)}}."
            )
        expect_instance("Tuner", "tune_config", tune_config, TuneConfig, "a muster.tune.TuneConfig")
        expect_instance("Tuner", "run_config", run_config, RunConfig,
                        "a muster.tune.RunConfig, e.g. tune.RunConfig(name='my_experiment')")
        self.trainable = trainable
        self.param_space = _trainer_space(trainable, param_space or {})
        self.tune_config = tune_config or TuneConfig()
        if run_config is None and isinstance(trainable, DataParallelTrainer):
            run_config = copy.copy(trainable.run_config)  # its name, too, names the experiment (as Ray)
        self.run_config = run_config or TuneRunConfig()  # Tune's class, as Ray's Tuner (a trainer's is its own)
        log_file_names(self.run_config.log_to_file)  # a bad value is refused now, not at the first trial
        self._restored: dict[str, Any] | None = None
        self._path: str | None = None
        self._interrupted_by: str | None = None  # the signal that stopped the last fit(), its state saved
        self._resume_hint = _RESUME_HINT  # how the warning after a Ctrl-C says to go on (tune.run has its own)
        get_runtime()  # start the engine now: its zygote imports torch while the caller goes on

    # -- fit --------------------------------------------------------------------------------
    def fit(self) -> ResultGrid:
        """Run the search to the end; returns every trial's result (failed trials included).

        A Ctrl-C (SIGINT, or SIGUSR1) stops the running trials and returns, as in Ray, the results so far: the
        trials that were running have their last results and checkpoints, no error, and go on from
        there in ``Tuner.restore(path, trainable).fit()``. A second Ctrl-C while they stop, or a
        SIGTERM, raises ``KeyboardInterrupt`` (the state is saved all the same). Under Ray's
        ``TUNE_DISABLE_SIGINT_HANDLER=1`` a Ctrl-C raises ``KeyboardInterrupt`` too (a SIGINT handler
        of the program's own is left in place and runs instead).

        Raises:
            ResourcesUnavailableError: one trial needs more than the engine has.
            TrainingFailedError: under ``FailureConfig(fail_fast="raise")``, the first trial
                error (also an instance of what the trainable raised), once the others stopped.
            InvalidArgumentError: ``CheckpointConfig(checkpoint_frequency/checkpoint_at_end)`` is set for a trainable
                that saves its own checkpoints (a function or a trainer).
        """
        _class_checkpointing(self.trainable, self.run_config.checkpoint_config)
        fail_fast = _fail_fast(self.run_config.failure_config)
        storage = self._storage()
        if self._restored is None:
            forget_earlier_run(storage)
        storage.makedirs(storage.run_dir)
        storage.write_bytes(storage.join(storage.run_dir, TUNER_FILE), cloudpickle.dumps(self._saved()))
        if storage.is_local:
            trial_loggers.load_default_loggers(self.run_config.callbacks)
        trials = [Trial.from_json(t) for t in (self._restored or {}).get("trials", [])]
        tc = self.tune_config
        scheduler = tc.scheduler or FIFOScheduler()
        if not isinstance(scheduler, TrialScheduler):
            raise InvalidTypeError(f"TuneConfig(scheduler={scheduler!r}): pass a muster.tune.schedulers scheduler.")
        if not scheduler.set_search_properties(tc.metric, tc.mode):
            raise InvalidArgumentError(
                f"TuneConfig(metric={tc.metric!r}) differs from {type(scheduler).__name__}(metric="
                f"{scheduler.metric!r}); set the metric in one place."
            )
        metric, mode = tc.metric or scheduler.metric, tc.mode or scheduler.mode  # set on either
        searcher = _search_generator(tc.search_alg, metric, mode, self.param_space)
        searcher.setup(self.param_space, tc.num_samples, skip=len(trials))
        finished = sum(t.status in (trial_mod.TERMINATED, trial_mod.ERROR) for t in trials)
        if trials and isinstance(searcher, SearchGenerator) and not searcher.restore_from(storage) and finished:
            _log.warning(
                "%s keeps no state (it does not implement save()/restore()): the restored search goes on without "
                "what it learned from the %d finished trials", type(searcher.searcher).__name__, finished,
            )
        name = _trainable_name(self.trainable)
        budget = tc.time_budget_s  # TuneConfig keeps a timedelta's seconds; one set on it later is taken too
        budget = budget.total_seconds() if isinstance(budget, datetime.timedelta) else budget
        controller = TuneController(
            storage, trials, self._make_plan, name, searcher, scheduler, as_stopper(self.run_config.stop),
            metric, mode, tc.max_concurrent_trials or None, budget, self.run_config.verbose,
            (self._restored or {}).get("id_prefix") or secrets.token_hex(3)[:5],
            storage.root_uri, fail_fast,
        )
        controller.callbacks = CallbackList(self.run_config.callbacks)
        if self._restored is not None:
            controller.callbacks.load_from(storage)
        controller.trial_namers = (tc.trial_name_creator, tc.trial_dirname_creator)
        controller.progress.use(progress_reporter.check(self.run_config.progress_reporter))
        controller.setup_info = {  # what Ray's Callback.setup gets
            "stop": self.run_config.stop, "num_samples": tc.num_samples, "time_budget_s": budget,
            "total_num_samples": getattr(searcher, "total", 0) or tc.num_samples,
        }
        if (self._restored or {}).get("search_done"):
            controller._search_done = True
        _replay(scheduler, controller, trials)
        restore_sigterm = sigterm_as_interrupt()
        try:
            controller.run()
        except KeyboardInterrupt:
            if controller.interrupted_by not in graceful_stops():  # SIGTERM, a second Ctrl-C: stop now, as Ray
                raise
            _log.warning("The experiment was interrupted; its latest state is saved. Continue it with %s",
                         self._resume_hint.format(name=storage.name, path=storage.uri))
        finally:
            restore_sigterm()
            self._interrupted_by = controller.interrupted_by
        if controller.failed_fast is not None:  # FailureConfig(fail_fast="raise")
            raise as_users_error(controller.errors[controller.failed_fast]) or TrialError(controller.failed_fast)
        return _grid(storage, controller.trials, controller.errors, metric, mode)

    def get_results(self) -> ResultGrid:
        """The results of this (restored) experiment as they are on disk, without running anything."""
        return read_experiment(self._storage())[1]

    def _storage(self) -> Storage:
        if self._path is not None:
            return Storage.at(self._path, self.run_config.storage_filesystem)
        if self.run_config.name is None:
            self.run_config.name = default_experiment_name(self.trainable)
        storage = Storage(self.run_config.resolved_storage_path(), self.run_config.name,
                          self.run_config.storage_filesystem)
        self._path = storage.uri
        return storage

    def _make_plan(self, trial: Trial, config: dict[str, Any]) -> RunPlan:
        trainable, rc = self.trainable, self.run_config
        if isinstance(trainable, DataParallelTrainer):  # the trial's config sets the trainer's arguments (as Ray)
            trainer = trainable.with_args({k: v for k, v in config.items() if k in trainable.tunable_args})
            return RunPlan(trainer._loop(), trainer.train_loop_config, trainer.scaling_config, trainer.backend_config,
                           rc, trainer.resume_from_checkpoint, getattr(trainer, "validation_config", None))
        resources, factory = trial_request(trainable, config)
        resources = resources or {"CPU": 1.0}
        gpus = bool(res.normalize(resources, what="tune.with_resources").get("GPU"))
        scaling = ScalingConfig(num_workers=1, use_gpu=gpus, resources_per_worker=resources)
        info = {
            "trial_id": trial.trial_id, "trial_name": trial.trial_name, "path": trial.path,
            "resources": scaling.worker_resources, "placement_group_factory": factory,
            "head_bundle": head_bundle(factory),  # what get_assigned_resources() gives in the trial, as in Ray
            "experiment": self.run_config.name,
            "log_to_file": log_file_names(rc.log_to_file),
        }
        fn = trial_function(trainable)
        if isinstance(fn, ClassTrainable):
            fn = fn.checkpointing(*_class_checkpointing(trainable, rc.checkpoint_config))
        return RunPlan(FunctionTrial(fn, trial_parameters(trainable), info), config, scaling, Backend(), rc)

    def _saved(self) -> dict[str, Any]:
        """What ``Tuner.restore`` reads back: the RunConfig with its callbacks, as Ray keeps them (their state
        as of each save is kept beside it, see ``Callback.get_state``), unless one cannot be pickled."""
        run_config = self.run_config
        try:
            cloudpickle.dumps(run_config.callbacks)
        except Exception as exc:  # noqa: BLE001 - any pickling failure says the same
            warnings.warn(f"RunConfig(callbacks=...) cannot be pickled ({type(exc).__name__}: {exc}): a "
                          "Tuner.restore of this experiment runs without its callbacks.", stacklevel=3)
            run_config = _without_callbacks(run_config)
        return {"trainable": self.trainable, "param_space": self.param_space, "tune_config": self.tune_config,
                "run_config": run_config}

    # -- restore -------------------------------------------------------------------------------
    @classmethod
    def can_restore(cls, path: str, storage_filesystem: Any = None) -> bool:
        """Whether ``path`` (on ``storage_filesystem``, default: from the path) holds an experiment
        ``Tuner.restore`` can continue."""
        return Storage.at(path, storage_filesystem).has(EXPERIMENT_STATE, TUNER_FILE)

    @classmethod
    def restore(
        cls,
        path: str,
        trainable: Any = None,
        *,
        resume_unfinished: bool = True,
        resume_errored: bool = False,
        restart_errored: bool = False,
        param_space: dict[str, Any] | None = None,
        storage_filesystem: Any = None,
        _resume_config: ResumeConfig | None = None,
    ) -> Tuner:
        """A Tuner that continues the experiment at ``path``.

        Finished trials are not run again; trials that were running resume from
        their latest checkpoint (``resume_unfinished``); failed ones stay failed
        unless ``resume_errored`` (from their checkpoint) or ``restart_errored``
        (from scratch).  ``_resume_config`` (Ray's name), a ``tune.ResumeConfig``,
        says it per status instead of the three flags.  Pass the ``trainable``
        again (the saved one is used if it can be unpickled).
        """
        if not cls.can_restore(path):
            raise InvalidArgumentError(
                f"Tuner.restore({path!r}): no muster experiment there (expected {EXPERIMENT_STATE} and {TUNER_FILE}). "
                "Pass the experiment folder, i.e. <storage_path>/<name>."
            )
        storage = Storage.at(path, storage_filesystem)
        storage.remove_stale_temp_files()  # of the experiment's and its trials' writers that a crash killed
        name = storage.name
        saved = read_saved(storage, TUNER_FILE, lambda p: cloudpickle.loads(storage.read_bytes(p)))
        state = read_saved(storage, EXPERIMENT_STATE, storage.read_json)
        tuner = cls.__new__(cls)
        tuner.trainable = as_function(trainable) if trainable is not None else saved["trainable"]
        _check_trainable(tuner.trainable)
        tuner.param_space = param_space if param_space is not None else saved["param_space"]
        tuner.tune_config, tuner.run_config = saved["tune_config"], saved["run_config"]
        tuner.run_config.name = name
        if _resume_config is None:  # the flags, as Ray maps them
            _resume_config = ResumeConfig(
                unfinished="resume" if resume_unfinished else "skip",
                errored="resume" if resume_errored else "restart" if restart_errored else "skip",
            )
        elif not isinstance(_resume_config, ResumeConfig):
            raise InvalidTypeError(f"Tuner.restore(_resume_config={_resume_config!r}): pass a tune.ResumeConfig.")
        for t in state["trials"]:
            _resume(storage, t, _resume_config)
        tuner._restored, tuner._path = state, storage.uri
        tuner._interrupted_by, tuner._resume_hint = None, _RESUME_HINT
        get_runtime()
        return tuner


# -- helpers ---------------------------------------------------------------------------------
def read_experiment(storage: Storage) -> tuple[list[Trial], ResultGrid]:
    """The trials of the experiment in ``storage`` as its saved state has them, and their results."""
    state = storage.read_json(storage.join(storage.run_dir, EXPERIMENT_STATE))
    trials = [Trial.from_json(t) for t in state["trials"]]
    return trials, _grid(storage, trials, {}, state.get("metric"), state.get("mode"))


def _resume(storage: Storage, t: dict[str, Any], config: ResumeConfig) -> None:
    """Set a restored trial's saved state (``t``) as ``config`` says for its status."""
    if t["status"] == trial_mod.ERROR:
        how = config.errored
    elif t["status"] == trial_mod.TERMINATED:
        how = config.finished
    else:  # pending, running, paused
        how = config.unfinished
    if how == ResumeConfig.ResumeType.SKIP:
        if t["status"] != trial_mod.ERROR:
            t["status"] = trial_mod.TERMINATED
        return
    if how == ResumeConfig.ResumeType.RESTART:  # from scratch: nothing of its run is kept
        storage.rm(storage.join(storage.run_dir, Trial.from_json(t).dirname))
        t["last_result"], t["num_results"] = {}, 0
    t["status"], t["error"] = trial_mod.PENDING, None


def _check_trainable(trainable: Any) -> None:
    if isinstance(trainable, DataParallelTrainer):
        return
    if isinstance(trainable, type):
        raise InvalidTypeError(
            f"Tuner({trainable.__name__}): a class trainable must subclass muster.tune.Trainable; or pass a "
            "function trainable(config) that calls tune.report(...), or a TorchTrainer."
        )
    if not callable(trainable):
        raise InvalidTypeError(
            f"Tuner(trainable={trainable!r}): pass a function trainable(config) that calls tune.report(...), "
            "or a TorchTrainer."
        )


def _class_checkpointing(trainable: Any, config: Any) -> tuple[int, bool]:
    """A class trainable's ``(checkpoint_frequency, checkpoint_at_end)`` under ``config``.

    Unset, a class trainable is saved every iteration (muster stops trials at once, so it
    cannot ask for a save then, as Ray does) and at its end (Ray's default). A trainable that
    saves its own checkpoints, a function or a trainer, gets neither setting, as in Ray.
    """
    frequency = getattr(config, "checkpoint_frequency", None)
    at_end = getattr(config, "checkpoint_at_end", None)
    if isinstance(trainable, DataParallelTrainer):
        if frequency or at_end is not None:
            raise InvalidArgumentError(
                f"CheckpointConfig(checkpoint_frequency={frequency!r}, checkpoint_at_end={at_end!r}) does not "
                f"apply to a {type(trainable).__name__}: its train loop saves checkpoints by passing one to "
                "muster.train.report(metrics, checkpoint=...). Leave both unset."
            )
        return 0, False
    if isinstance(trial_function(trainable), ClassTrainable):
        return (1 if frequency is None else frequency), (True if at_end is None else at_end)
    name = _trainable_name(trainable)
    if frequency:
        raise InvalidArgumentError(
            f"CheckpointConfig(checkpoint_frequency={frequency!r}) applies to class trainables (tune.Trainable "
            f"subclasses) only; the function trainable {name!r} saves its own: call tune.report(metrics, "
            f"checkpoint=Checkpoint.from_directory(d)) every {frequency} iterations, and leave "
            "checkpoint_frequency unset."
        )
    if at_end:
        raise InvalidArgumentError(
            f"CheckpointConfig(checkpoint_at_end=True) applies to class trainables (tune.Trainable subclasses) "
            f"only; the function trainable {name!r} saves its own: pass a checkpoint to its last "
            "tune.report(metrics, checkpoint=...), and leave checkpoint_at_end unset."
        )
    return 0, False


def _fail_fast(config: Any) -> bool | str:
    """``FailureConfig.fail_fast`` as Ray takes it: True/False, or ``"raise"`` (any case).

    True stops the experiment at the first trial error (the others are stopped, the pending ones
    never start; ``fit()`` returns the grid with the error); ``"raise"`` also raises it from ``fit()``.
    """
    value = getattr(config, "fail_fast", False)
    if isinstance(value, str):
        if value.upper() != "RAISE":
            raise InvalidArgumentError(
                f"FailureConfig(fail_fast={value!r}): use True, False or 'raise' (raise the first trial error "
                "from Tuner.fit())."
            )
        return "raise"
    return bool(value)


def _trainer_space(trainable: Any, space: dict[str, Any]) -> dict[str, Any]:
    """For a trainer, top-level keys that name its arguments (``trainer.tunable_args``) set them per
    trial; other hyperparameters given at the top level go under ``train_loop_config``. A
    ``run_config`` is not tuned: as in Ray, the Tuner's (or the trainer's) is every trial's."""
    if not isinstance(trainable, DataParallelTrainer):
        return space
    if "run_config" in space:
        _log.warning(
            "param_space['run_config'] is ignored, as in Ray: a RunConfig is not tuned per trial. Pass "
            "Tuner(run_config=RunConfig(...)) instead."
        )
        space = {k: v for k, v in space.items() if k != "run_config"}
    loose = {k: v for k, v in space.items() if k not in trainable.tunable_args}
    if not loose:
        return space
    out = {k: v for k, v in space.items() if k in trainable.tunable_args}
    out["train_loop_config"] = {**loose, **(space.get("train_loop_config") or {})}
    return out


def default_experiment_name(trainable: Any) -> str:
    """An experiment's folder name when none is given: the trainable's name, the time, a random part; just the
    trainable's name under Ray's ``TUNE_DISABLE_DATED_SUBDIR=1``, so every such run writes into one folder.

    Raises:
        InvalidArgumentError: ``TUNE_DISABLE_DATED_SUBDIR`` is not an integer (Ray fails on it too).
    """
    if settings.tune_dated_subdir_disabled():
        return _trainable_name(trainable)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    return f"{_trainable_name(trainable)}_{stamp}_{secrets.token_hex(2)}"


def _trainable_name(trainable: Any) -> str:
    raw = type(trainable).__name__ if isinstance(trainable, DataParallelTrainer) else getattr(
        trainable, "__name__", type(trainable).__name__
    )
    return re.sub(r"[^A-Za-z0-9_.=+-]", "", raw).lstrip("_.=+-") or "trainable"


def _search_generator(search_alg: Any, metric: str | None, mode: str | None, space: dict[str, Any]) -> Any:
    alg = search_alg or BasicVariantGenerator()
    if isinstance(alg, ConcurrencyLimiter) and isinstance(alg.searcher, BasicVariantGenerator):
        alg.searcher.max_concurrent = alg.max_concurrent
        alg = alg.searcher
    if isinstance(alg, BasicVariantGenerator):
        return alg
    if isinstance(alg, Searcher):
        alg = SearchGenerator(alg)
    elif not isinstance(alg, SearchGenerator):
        own = isinstance(alg, SearchAlgorithm)  # Ray's next_trial() interface, not ported
        raise InvalidTypeError(
            f"TuneConfig(search_alg={alg!r}): pass a BasicVariantGenerator, a muster.tune.search.Searcher "
            "(OptunaSearch, ...), a ConcurrencyLimiter around one, or SearchGenerator(searcher)."
            + (" A SearchAlgorithm subclass of your own is not run: subclass Searcher and implement "
               "suggest(trial_id) and on_trial_complete(trial_id, result) instead." if own else "")
        )
    if not alg.set_search_properties(metric, mode, space):
        name = type(alg.searcher).__name__
        raise InvalidArgumentError(f"{name} refused the search space or metric ({metric!r}, {mode!r}).")
    return alg


def _replay(scheduler: TrialScheduler, controller: TuneController, trials: list[Trial]) -> None:
    """A restored experiment: rebuild the scheduler's view from the trials' recorded results.

    A trial that goes on (it was running) takes its last recorded result as its own: the saved
    experiment state, written at most once a second, can be behind what the trial reported before
    the driver died, and a trial that resumes past its last report reports nothing more."""
    rows = []
    for trial in trials:
        scheduler.on_trial_add(controller, trial)
        try:
            reports = Result.from_path(trial.path).all_reports
        except ValueError:
            continue
        mine = [r for r in reports if r.get("_rank") == 0]
        if trial.status == trial_mod.PENDING and mine:
            trial.last_result = trial_result(mine[-1])
            trial.num_results = max(trial.num_results, len(mine))
        rows += [(r.get("timestamp", 0), trial, r) for r in mine]
    for _, trial, row in sorted(rows, key=lambda x: x[0]):
        scheduler.on_trial_result(controller, trial, trial_result(row))
    for trial in trials:
        trial.restart_plan = None


def _metrics_acted_on(result: Result, trial: Trial) -> None:
    """A trainer's trial that the stopper or a scheduler stopped can report more while the stop is on
    its way (its gang runs on until it arrives; a function trainable waits for each decision, as in Ray):
    its metrics are the result they acted on, as on Ray, where it runs no further, so that they do not
    depend on timing. The later rows are kept in its ``metrics_dataframe``."""
    at = trial.last_result.get("training_iteration")
    if at is None or not result.metrics or result.metrics.get("training_iteration") == at:
        return
    rows = [r for r in result.all_reports if r.get("_rank", 0) == 0 and r.get("training_iteration") == at]
    if rows:
        result.metrics = trial_result(rows[-1])


def _mark_stopped(result: Result, trial: Trial) -> None:
    """The result the stopper or a scheduler stopped a trial on says ``done`` in its frames too, as
    Ray's ``result.json`` row does (the row was recorded before the decision; the trial's last
    result keeps it)."""
    at = trial.last_result.get("training_iteration")
    if not trial.last_result.get("done") or at is None:
        return
    lead = lead_rank(result.all_reports)
    for row in result.all_reports:
        if row.get("_rank") == lead and row.get("training_iteration") == at:
            row["done"] = True


def _as_reported(result: Result, trial: Trial) -> None:
    """A trial's metrics with its values as reported (a numpy array, a set, a date, an object of
    the user's), as Ray keeps them: ``result.json`` holds JSON's forms of them, and the trial's last
    result, which the controller acted on in this process, the values themselves. (A restored
    experiment's trials were acted on by another process: their metrics keep JSON's forms.)"""
    live, metrics = trial.last_result, result.metrics
    if not live or not metrics or live.get("training_iteration") != metrics.get("training_iteration"):
        return
    result.metrics = {**metrics, **{k: v for k, v in live.items() if k in metrics}}


def _checkpoint_metrics(checkpoint: Any, metrics: dict[str, Any]) -> dict[str, Any]:
    """A trial's checkpoint's metrics as Ray's ``best_checkpoints`` hold them: the result it was reported
    with as the loggers had it, naming the checkpoint's folder (``checkpoint_dir_name``), no ``experiment_tag``."""
    return logged_result({**metrics, "checkpoint_dir_name": posixpath.basename(checkpoint.path.rstrip("/"))})


def _kept_error(storage: Storage, trial: Trial) -> BaseException | None:
    """The error a trial failed with, as the controller kept it (a restored experiment's)."""
    where = Storage(storage.uri, trial.dirname, storage.fs)  # as the controller wrote it
    path = where.join(where.run_dir, ERROR_FILE)
    try:
        error = cloudpickle.loads(where.read_bytes(path)) if where.exists(path) else None
    except Exception:  # noqa: BLE001 - unreadable (another version's classes): the text says enough
        return None
    return error if isinstance(error, BaseException) else None


def _grid(storage: Storage, trials: list[Trial], errors: dict[str, BaseException], metric: str | None,
          mode: str | None) -> ResultGrid:
    results = []
    for trial in trials:
        try:
            result = read_result(trial.path, trial=True)
        except ValueError:
            result = Result(metrics=None, checkpoint=None, path=trial.path)
        if trial.experiment_stopped and not trial.last_result:
            result.metrics = None  # the experiment stopped before the controller took any of its results, as
            # on Ray, whose last result then has none; what the run recorded stays in its metrics_dataframe
        reported = result.metrics is not None
        if not reported:  # Ray's last_result has its id
            result.metrics = {"trial_id": trial.trial_id}
        _metrics_acted_on(result, trial)
        _as_reported(result, trial)
        _mark_stopped(result, trial)
        if reported:  # what Ray's last result also holds: whether the trial finished (not when the experiment
            # was stopped with it unfinished), and its config
            done = trial.status == trial_mod.TERMINATED and not trial.experiment_stopped
            result.metrics = {**(result.metrics or {}), "done": done}
            result.metrics.setdefault("config", trial.config)
        result.best_checkpoints = [(c, _checkpoint_metrics(c, m)) for c, m in result.best_checkpoints]
        nested = storage.join(trial.path, trial_mod.NESTED_RUN)
        if result.checkpoint is None and storage.exists(nested):  # the trial's function fit a trainer
            inner = read_result(nested, trial=True)  # its checkpoints' metrics with Tune's keys, as the trial's
            result.checkpoint, result.best_checkpoints = inner.checkpoint, inner.best_checkpoints
        result.config = trial.config
        if trial.error is not None:
            error = errors.get(trial.trial_id) or _kept_error(storage, trial)
            result.error = as_users_error(error) or TrialError(trial.error)
        results.append(result)
    return ResultGrid(results, storage.uri, metric, mode, [t.trial_id for t in trials], filesystem=storage.fs)

