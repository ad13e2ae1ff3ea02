"""``DataParallelTrainer``: run one function on N workers; the base of ``TorchTrainer``.

``ScalingConfig(num_workers=0)`` is Ray Train V2's local mode, for debugging: ``fit()`` runs the
function in the calling process, on the calling thread (breakpoints and tracebacks are the script's
own), as rank 0 of 1 (``get_context()``: world size 1, world/local/node rank 0), with no process group:
``prepare_model`` only moves the model to ``get_device()`` (the first GPU torch sees, else the CPU)
and ``prepare_data_loader`` shards nothing; ``get_dataset_shard`` gives the whole dataset and the
collectives return at once. Reports and checkpoints go to the run folder as a worker's do, and the
``Result`` is the usual one (metrics, checkpoint, path). An exception the function raises comes out
of ``fit()`` as it is, with no retry (``FailureConfig`` does not apply), as in Ray. Ray keeps only
the last report and its checkpoint object (``Result.path`` None); muster keeps the run, so running
it again resumes it. The function need not pickle (it never leaves the process; such a run cannot be
``restore``d from its folder). The calling process must be the driver: not a Tune trial or a worker (a
trainer fit there is run by the driver beside others), nor one of torchrun's processes.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import random
import threading
from concurrent.futures import Future
from typing import Any, Callable, TypeVar

import cloudpickle

from muster.core.runtime import RuntimeActor
from muster.exceptions import InvalidArgumentError, InvalidTypeError, expect_instance
from muster.tasks import owner as task_owner
from muster.train._internal.backend import Backend
from muster.train._internal import session as _session
from muster.train._internal.events import FitReply, FitRequest
from muster.train.checkpoint import Checkpoint
from muster.train.config import RunConfig, ScalingConfig
from muster.train.controller import Controller, ControllerHooks
from muster.train.result import Result
from muster.train.run_state import RUN_STATE, TRAINER_FILE, RunRecord, default_name
from muster.train.storage import Storage
from muster.train.validation import ValidationConfig

_Trainer = TypeVar("_Trainer", bound="DataParallelTrainer")


class DataParallelTrainer:
    """Runs ``train_loop_per_worker`` on ``scaling_config.num_workers`` workers.

    Args:
        train_loop_per_worker: the training function; it takes the config
            dict as its one argument, or no argument at all.
        train_loop_config: passed to the function.
        scaling_config: how many workers and what each holds.
        run_config: name, storage, checkpoint retention, failure budget.
        backend_config: framework setup on each worker (``TorchConfig``).
        resume_from_checkpoint: a checkpoint to start from when the run has none.
        datasets: name -> ``muster.data.Dataset``; each worker reads its shard with
            ``muster.train.get_dataset_shard(name)``.
        dataset_config: a ``muster.train.DataConfig`` (which datasets are split across workers).
        validation_config: a ``muster.train.ValidationConfig``: how checkpoints reported with
            ``report(..., validation=True)`` are validated, in tasks beside the training.
    """

    _default_backend: type[Backend] = Backend
    #: the constructor arguments that ``Tuner(trainer, param_space=...)`` sets per trial from the
    #: param_space's top-level keys (see ``with_args``); Tune puts other top-level keys in ``train_loop_config``
    tunable_args: tuple[str, ...] = (
        "train_loop_config", "scaling_config", "datasets", "dataset_config", "resume_from_checkpoint", "backend_config",
    )
    #: what every worker will import, which the engine may preload once (``Runtime.preload``)
    _worker_modules: tuple[str, ...] = ()

    def __init__(
        self,
        train_loop_per_worker: Callable[..., Any],
        *,
        train_loop_config: dict[str, Any] | None = None,
        scaling_config: ScalingConfig | None = None,
        run_config: RunConfig | None = None,
        backend_config: Backend | None = None,
        resume_from_checkpoint: Checkpoint | None = None,
        datasets: dict[str, Any] | None = None,
        dataset_config: Any = None,
        validation_config: ValidationConfig | None = None,
        metadata: dict[str, Any] | None = None,
    ):
        if metadata is not None:
            raise InvalidArgumentError(
                f"{type(self).__name__}(metadata=...): Ray 2.60 removed the trainer's metadata (it raises a "
                "DeprecationWarning there). Pass it in train_loop_config, or attach it to the checkpoints you "
                "report: checkpoint.set_metadata({...}), read back with result.checkpoint.get_metadata()."
            )
        if not callable(train_loop_per_worker):
            raise InvalidTypeError(
                f"{type(self).__name__}(train_loop_per_worker={train_loop_per_worker!r}): pass the training "
                "function itself, e.g. TorchTrainer(train_func, ...)."
            )
        _check_train_loop(type(self).__name__, train_loop_per_worker)
        _check_configs(type(self).__name__, scaling_config, run_config, resume_from_checkpoint)
        if train_loop_config is not None and not isinstance(train_loop_config, dict):
            raise InvalidTypeError(
                f"{type(self).__name__}(train_loop_config=...) takes a dict, got {type(train_loop_config).__name__}."
            )
        if datasets:
            from muster.train._internal.datasets import check_datasets

            check_datasets(datasets, dataset_config, type(self).__name__)
        self.datasets, self.dataset_config = datasets or {}, dataset_config
        self._data_seed = random.SystemRandom().randrange(2**63)  # local shuffles: one seed for every attempt
        self.train_loop_per_worker = train_loop_per_worker
        self.train_loop_config = train_loop_config
        self.scaling_config = scaling_config or ScalingConfig()
        self.run_config = run_config or RunConfig()
        self.backend_config = backend_config or self._default_backend()
        self.resume_from_checkpoint = resume_from_checkpoint
        if validation_config is not None and not isinstance(validation_config, ValidationConfig):
            raise InvalidTypeError(f"{type(self).__name__}(validation_config={validation_config!r}): pass a "
                                   "muster.train.ValidationConfig(fn=...).")
        self.validation_config = validation_config
        self._restore_path: str | None = None
        self._warm_engine()

    def with_args(self: _Trainer, args: dict[str, Any]) -> _Trainer:
        """A copy of this trainer with some constructor arguments set: what one trial of
        ``Tuner(trainer, param_space=...)`` runs, as Ray merges a trial's config into its trainer's.

        Args:
            args: argument name (one of ``tunable_args``) -> value. ``train_loop_config`` is
                merged into the trainer's key by key (nested dicts too) and ``datasets`` name
                by name; ``scaling_config`` may be a dict of ``ScalingConfig`` fields (it replaces
                the trainer's); any other argument replaces the trainer's.

        Returns:
            The new trainer; this one is unchanged.

        Raises:
            InvalidArgumentError: a key is not a tunable argument, or a ``scaling_config`` dict
                names a field ScalingConfig has not.
            InvalidTypeError: a value has the wrong type (as the constructor says).
        """
        name = type(self).__name__
        unknown = sorted(set(args) - set(self.tunable_args))
        if unknown:
            raise InvalidArgumentError(
                f"{name} has no argument {unknown[0]!r} that a Tuner's param_space can set; it sets "
                f"{list(self.tunable_args)}. Put hyperparameters under 'train_loop_config'."
            )
        trainer = copy.copy(self)
        for key, value in args.items():
            if key == "train_loop_config":
                if not isinstance(value, dict):
                    raise InvalidTypeError(
                        f"param_space['train_loop_config']={value!r}: pass a dict of hyperparameters."
                    )
                value = _deep_merge(self.train_loop_config or {}, value)
            elif key == "scaling_config":
                value = _scaling_config(value, name)
            elif key == "datasets":
                if not isinstance(value, dict):
                    raise InvalidTypeError(f"param_space['datasets']={value!r}: pass a dict name -> Dataset.")
                value = {**self.datasets, **value}
            setattr(trainer, key, value)
        if trainer.datasets:
            from muster.train._internal.datasets import check_datasets

            check_datasets(trainer.datasets, trainer.dataset_config, name)
        return trainer

    def _warm_engine(self) -> None:
        """Start the engine now: its zygote imports torch (and what this trainer's workers need,
        e.g. DDP's modules) while the caller goes on."""
        from muster.core.api import get_runtime

        local = self.scaling_config.max_workers == 0  # local mode: no worker runs the function
        get_runtime().preload([] if local else list(self._worker_modules))

    def fit(self) -> Result:
        """Run training to the end.

        Returns:
            Result with the final metrics, checkpoints and the run folder.

        Raises:
            TrainingFailedError: a worker failed and the failure budget is spent (in local mode,
                ``num_workers=0``, the training function's own exception is raised instead).
            ResourcesUnavailableError: the engine can never hold this many workers.
            RunAlreadyFinishedError: a run with this name already finished in this storage.
        """
        from muster.core import context as core_context

        self.run_config._check_for_trainer(type(self).__name__)
        if core_context.in_worker():
            if self.scaling_config.max_workers == 0:
                raise InvalidArgumentError(
                    f"{type(self).__name__}(scaling_config=ScalingConfig(num_workers=0)).fit() in a muster worker "
                    "(a Tune trial's function, a task or an actor): local mode runs the training function in the "
                    "process that calls fit(), and muster's driver runs a worker's trainers beside its other "
                    "work. Use ScalingConfig(num_workers=1), or call fit() in the driver script.")
            # Inside a worker (a Tune trial that builds its own trainer, say): the driver runs it.
            session = _session.current_session()
            reply: FitReply = core_context.send_event(FitRequest(self, session.round if session else 0), wait=True)
            if session is not None and reply.last_round is not None:
                session.continue_after(reply.last_round)
            result: Result = reply.result
            return result
        controller = self.controller()
        ran = controller.run()
        if isinstance(ran, Result):
            return ran
        # a folder a Tune trial once ran in: its results are Tune's, in the class fit() returns
        return Result(**{f.name: getattr(ran, f.name) for f in dataclasses.fields(ran)},
                      return_value=controller.return_value)

    def controller(self, hooks: ControllerHooks | None = None, allow_finished: bool = False) -> Controller:
        """The run's controller, ready to ``run()``: how a library runs this trainer as part of
        something larger (Tune runs a trainer built inside a trial this way).

        Args:
            hooks: what the caller plugs in (metrics added to each report, other worker
                requests, the checkpoint to start from).
            allow_finished: open a run that already finished (a restored trial) instead of
                raising ``RunAlreadyFinishedError``.
        """
        self._warm_engine()  # a restored trainer was not built by __init__
        storage = self._storage()
        record = RunRecord(
            storage,
            type(self).__name__,
            {
                "num_workers": self.scaling_config.max_workers,  # an elastic run: its largest size
                "checkpoint_config": vars(self.run_config.checkpoint_config),
            },
        )
        previous = record.open(allow_finished=allow_finished or self._restore_path is not None)
        record.save_trainer(self, required=self.scaling_config.max_workers > 0)
        controller = Controller(
            self._loop(),
            self.train_loop_config,
            self.scaling_config,
            self.run_config,
            self.backend_config,
            record,
            self.resume_from_checkpoint,
            hooks,
            getattr(self, "validation_config", None),  # a trainer pickled before validations existed has none
        )
        if previous is not None:
            latest = storage.committed_rounds()
            where = f"checkpoint_{latest[-1]:06d}" if latest else "the start (it has no committed checkpoint)"
            controller.view.event(
                f"RESUMING run {storage.name!r} ({storage.uri}): previous status {previous.get('status')}, "
                f"continuing from {where}."
            )
        return controller

    def _loop(self) -> Callable[..., Any]:
        """The function the workers run: the user's, with the datasets attached when there are any."""
        datasets = getattr(self, "datasets", None)  # absent in trainers pickled by older versions
        if not datasets:
            return self.train_loop_per_worker
        from muster.data import DataConfig
        from muster.train._internal.datasets import DatasetLoop

        return DatasetLoop(self.train_loop_per_worker, datasets, self.dataset_config or DataConfig(), self._data_seed)

    def _storage(self) -> Storage:
        if self._restore_path is not None:
            return Storage.at(self._restore_path, self.run_config.storage_filesystem)
        name = self.run_config.name or default_name(type(self).__name__)
        self.run_config.name = name
        return Storage(self.run_config.resolved_storage_path(), name, self.run_config.storage_filesystem)

    # -- restore -------------------------------------------------------------------
    @classmethod
    def can_restore(cls, path: str) -> bool:
        """Whether ``path`` holds a run this trainer class can ``restore``."""
        return Storage.at(path).has(RUN_STATE, TRAINER_FILE)

    @classmethod
    def restore(
        cls,
        path: str,
        train_loop_per_worker: Callable[..., Any] | None = None,
        train_loop_config: dict[str, Any] | None = None,
        **_ignored: Any,
    ) -> "DataParallelTrainer":
        """A trainer that continues the run at ``path`` from its latest checkpoint.

        Args:
            path: the run folder (``<storage_path>/<name>``), local or URL.
            train_loop_per_worker / train_loop_config: replace the saved ones.
        """
        if not cls.can_restore(path):
            raise InvalidArgumentError(
                f"{cls.__name__}.restore({path!r}): no muster run there (expected {RUN_STATE} and "
                f"{TRAINER_FILE}). Pass the run folder, i.e. <storage_path>/<name>."
            )
        storage = Storage.at(path)
        trainer: DataParallelTrainer = cloudpickle.loads(
            storage.read_bytes(storage.join(storage.run_dir, TRAINER_FILE)))
        if train_loop_per_worker is not None:
            trainer.train_loop_per_worker = train_loop_per_worker
        if train_loop_config is not None:
            trainer.train_loop_config = train_loop_config
        trainer._restore_path = path
        return trainer

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["run_config"] = _without_callbacks(self.run_config)
        return state


def _without_callbacks(rc: RunConfig) -> RunConfig:
    import copy

    clone = copy.copy(rc)
    clone.callbacks = []
    return clone


def _deep_merge(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``base`` updated with ``new``, nested dicts merged key by key (Ray's ``deep_update``)."""
    out = dict(base)
    for key, value in new.items():
        old = out.get(key)
        out[key] = _deep_merge(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
    return out


def _scaling_config(value: Any, trainer: str) -> ScalingConfig:
    """A ScalingConfig from a param_space value: one already, or a dict of its fields."""
    if isinstance(value, ScalingConfig):
        return value
    if not isinstance(value, dict):
        raise InvalidTypeError(
            f"param_space['scaling_config']={value!r}: pass a ScalingConfig or a dict of its fields, "
            "e.g. {'num_workers': 2}."
        )
    fields = {f.name for f in dataclasses.fields(ScalingConfig)}
    unknown = sorted(set(value) - fields)
    if unknown:
        raise InvalidArgumentError(
            f"param_space['scaling_config'] for {trainer} has {unknown[0]!r}, which is not a ScalingConfig "
            f"field; use {sorted(fields)}."
        )
    return ScalingConfig(**value)


def _fit_for_a_worker(handle: RuntimeActor, request: FitRequest) -> Future:
    """A task or an actor called ``trainer.fit()`` (Ray's validation guide fits a trainer in a
    ``ValidationConfig`` function, which runs as a task): the driver runs the trainer on a thread
    while the caller waits, and the caller lends its CPUs to the trainer's workers meanwhile.
    A Tune trial's worker is answered by its trial instead (the run joins the trial's results)."""
    from muster.core.api import get_runtime

    out: Future = Future()

    def run() -> None:
        try:
            with get_runtime().blocked(handle):
                out.set_result(FitReply(request.trainer.controller().run()))
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's fit()
            out.set_exception(exc)

    threading.Thread(target=run, name="muster-fit-for-a-worker", daemon=True).start()
    return out


task_owner.register(FitRequest, _fit_for_a_worker)


def _check_train_loop(trainer: str, fn: Callable[..., Any]) -> None:
    """Refuse a training function that needs more than the one config argument (as Ray does), now
    rather than as a TypeError on every worker."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: its signature is unknown
        return
    required = [p.name for p in params if p.default is p.empty
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if len(required) > 1:
        raise InvalidArgumentError(
            f"{trainer}(train_loop_per_worker={getattr(fn, '__qualname__', fn)}) needs {len(required)} arguments "
            f"({', '.join(required)}); it is called with one, the train_loop_config dict (or none). Take "
            "`config` and read the rest from it: def train_func(config): ..."
        )


def _check_configs(trainer: str, scaling_config: Any, run_config: Any, resume_from_checkpoint: Any) -> None:
    """The config objects' types, before anything reads their fields."""
    expect_instance(trainer, "scaling_config", scaling_config, ScalingConfig,
                    "a muster.train.ScalingConfig, e.g. ScalingConfig(num_workers=2)")
    expect_instance(trainer, "run_config", run_config, RunConfig,
                    "a muster.train.RunConfig, e.g. RunConfig(name='my_run')")
    expect_instance(trainer, "resume_from_checkpoint", resume_from_checkpoint, Checkpoint,
                    "a muster.train.Checkpoint, e.g. Checkpoint.from_directory(path)")
