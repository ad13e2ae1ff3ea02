"""Configuration objects, Ray Train's names and fields.

Each is a keyword-only dataclass validated in ``__post_init__``: a bad value
raises ``ValueError`` naming the field, the value and what is allowed.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal

from muster.core import resources as res
from muster.core import settings
from muster.exceptions import InvalidArgumentError, InvalidTypeError, expect_instance

_PLACEMENT = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


@dataclass(kw_only=True)
class ScalingConfig:
    """How many workers, and what each one holds.

    Args:
        num_workers: number of training processes (world size); ``0`` for
            Ray Train V2's local mode (the training function runs in the
            process that calls ``fit()``, see ``muster.train.trainer``); or
            ``(min, max)`` for an elastic run: it starts as soon as ``min``
            workers fit, grows toward ``max`` when resources free up, and
            after losing workers (a node gone) goes on with those that fit,
            if at least ``min``.  Each resize restarts the gang from the
            latest checkpoint; prepared data loaders re-shard the rest of the
            interrupted epoch over the new world size.
        use_gpu: give each worker one GPU (unless ``resources_per_worker``
            says otherwise) and use NCCL.
        resources_per_worker: e.g. ``{"CPU": 4, "GPU": 1}``.  Default, as Ray's:
            1 CPU, or with ``use_gpu`` 1 GPU and no CPU (nodes have many more
            CPUs than GPUs); with ``use_gpu``, a dict without ``"GPU"`` gets 1.
        placement_strategy: PACK (default), SPREAD, STRICT_PACK or
            STRICT_SPREAD; matters on a multi-node cluster.
        trainer_resources: Ray's resources for its trainer actor. muster's
            controller runs in the driver and holds none: ``{"CPU": 0}``
            (Ray V2's default) is taken as is, anything more warns.
        accelerator_type: Ray's; one machine has one kind, so a type warns
            and changes nothing.
        label_selector: Ray's node labels each worker must run on: one dict for
            every worker, or a list with one per worker (``max_workers`` of them).
            Checked when the workers start, as a task's ``label_selector`` is: one
            the engine's node satisfies changes nothing, any other is refused.
        use_tpu / topology: Ray's TPU workers; muster has none, so only
            ``use_tpu=False`` and ``topology=None`` (the defaults) are taken.
        elastic_resize_monitor_interval_s: seconds between the checks of an
            elastic run for room to grow; default None: every second (Ray's
            default is 60).
    """

    num_workers: int | tuple[int, int] = 1
    use_gpu: bool = False
    resources_per_worker: dict[str, float] | None = None
    placement_strategy: str = "PACK"
    trainer_resources: dict[str, float] | None = None
    accelerator_type: str | None = None
    label_selector: dict[str, str] | list[dict[str, str]] | None = None
    use_tpu: bool = False
    topology: str | None = None
    elastic_resize_monitor_interval_s: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.num_workers, (tuple, list)):
            bounds = tuple(self.num_workers)
            if len(bounds) != 2 or not all(_count(b) for b in bounds) or bounds[0] > bounds[1]:
                raise InvalidArgumentError(
                    f"ScalingConfig(num_workers={self.num_workers!r}): an elastic run takes (min, max) with "
                    "integers 1 <= min <= max, e.g. num_workers=(2, 8)."
                )
            self.num_workers = (int(bounds[0]), int(bounds[1]))
        elif not (_count(self.num_workers) or _is_zero(self.num_workers)):
            raise InvalidArgumentError(
                f"ScalingConfig(num_workers={self.num_workers!r}): num_workers must be an integer >= 1, 0 to "
                "run the training function in this process (local mode), or (min, max) for an elastic run."
                + (_TUNE_WORKERS if _is_search_space(self.num_workers) else "")
            )
        if not isinstance(self.use_gpu, bool):
            raise InvalidArgumentError(f"ScalingConfig(use_gpu={self.use_gpu!r}): use_gpu must be True or False.")
        if self.placement_strategy not in _PLACEMENT:
            raise InvalidArgumentError(
                f"ScalingConfig(placement_strategy={self.placement_strategy!r}): use one of {', '.join(_PLACEMENT)}."
            )
        if self.resources_per_worker is not None:
            if not isinstance(self.resources_per_worker, dict):
                raise InvalidArgumentError(
                    f"ScalingConfig(resources_per_worker={self.resources_per_worker!r}): pass a dict such as "
                    "{'CPU': 2, 'GPU': 1}."
                )
            normal = res.normalize(self.resources_per_worker, what="ScalingConfig.resources_per_worker")
            if not self.use_gpu and normal.get("GPU"):
                raise InvalidArgumentError(
                    f"ScalingConfig(use_gpu=False, resources_per_worker={self.resources_per_worker!r}): GPUs "
                    "asked for a run that will not use them. Set use_gpu=True to train on them, or drop 'GPU' "
                    "from resources_per_worker to train on the CPU."
                )
            if self.use_gpu and "GPU" in self.resources_per_worker and not normal.get("GPU"):
                raise InvalidArgumentError(
                    "ScalingConfig(use_gpu=True, resources_per_worker={'GPU': 0}): a GPU run needs GPU > 0 "
                    "per worker; drop 'GPU' from resources_per_worker or set use_gpu=False."
                )
        if self.trainer_resources is not None and any(v for v in dict(self.trainer_resources).values()):
            warnings.warn(f"ScalingConfig(trainer_resources={self.trainer_resources!r}): muster's run controller lives "
                          "in the driver and holds no resources, so these are not reserved.", stacklevel=3)
        if self.accelerator_type is not None:
            warnings.warn(f"ScalingConfig(accelerator_type={self.accelerator_type!r}) has no effect here: workers "
                          "get this machine's GPUs (use_gpu=True).", stacklevel=3)
        self._check_ray_only_fields()

    def _check_ray_only_fields(self) -> None:
        """Ray's TPU, label and elastic-monitor fields: what muster can honour is taken, the rest refused."""
        if self.use_tpu is not False:
            raise InvalidArgumentError(
                f"ScalingConfig(use_tpu={self.use_tpu!r}): muster's training workers run on CPUs and GPUs "
                "(torch.distributed with gloo or NCCL), not TPUs. Drop use_tpu (use_gpu=True trains on GPUs), "
                "or run a TPU job on Ray Train itself.")
        if self.topology is not None:
            raise InvalidArgumentError(
                f"ScalingConfig(topology={self.topology!r}): a TPU slice topology needs TPU workers, which muster "
                "does not have. Drop topology (size the run with num_workers), or run it on Ray Train itself.")
        selectors = self.label_selector
        if isinstance(selectors, list):
            if len(selectors) != self.max_workers:
                raise InvalidArgumentError(
                    f"ScalingConfig(label_selector=<list of {len(selectors)}>, num_workers={self.num_workers!r}): "
                    f"a list holds one selector per worker, so it needs {self.max_workers}; or pass one dict "
                    "for every worker.")
        elif selectors is not None and not isinstance(selectors, dict):
            raise InvalidTypeError(
                f"ScalingConfig(label_selector={selectors!r}): pass a dict of label to value for every worker "
                "(e.g. {'ray.io/node-id': '<node id>'}), a list with one dict per worker, or None.")
        interval = self.elastic_resize_monitor_interval_s
        if interval is not None and (isinstance(interval, bool) or not isinstance(interval, (int, float))
                                     or not interval > 0):
            raise InvalidArgumentError(
                f"ScalingConfig(elastic_resize_monitor_interval_s={interval!r}): use a number of seconds > 0 "
                "(e.g. 60.0, Ray's default), or None to check every second.")

    def label_selectors(self, size: int) -> list[dict[str, str] | None]:
        """Each of ``size`` workers' label selector (None: none)."""
        if isinstance(self.label_selector, list):
            return list(self.label_selector[:size])
        return [self.label_selector] * size

    @property
    def num_cpus_per_worker(self) -> float:
        """One worker's CPUs, as given (``2`` stays ``2``, as Ray's); ``1`` by default, ``0`` with ``use_gpu``."""
        return self._as_given("CPU")

    @property
    def num_gpus_per_worker(self) -> float:
        """One worker's GPUs, as given (as Ray's); ``1`` with ``use_gpu`` by default, else ``0``."""
        return self._as_given("GPU")

    @property
    def additional_resources_per_worker(self) -> dict[str, float]:
        """One worker's resources other than CPU and GPU, as given (Ray's)."""
        return {k: v for k, v in (self.resources_per_worker or {}).items() if k not in ("CPU", "GPU") and v}

    def _as_given(self, name: str) -> float:
        given = (self.resources_per_worker or {}).get(name)
        amount = self.worker_resources.get(name, 0)
        return given if given else (int(amount) if float(amount).is_integer() else amount)

    @property
    def worker_resources(self) -> dict[str, float]:
        """What one worker asks the engine for: Ray's ``ScalingConfig._resources_per_worker_not_none``, so a
        GPU worker holds no CPU unless ``resources_per_worker`` names one (what is left of the CPUs serves the
        data pipeline and the driver's tasks)."""
        out: dict[str, float] = {"GPU": 1.0} if self.use_gpu else {"CPU": 1.0}
        out.update(self.resources_per_worker or {})
        return res.normalize(out, what="ScalingConfig.resources_per_worker")

    @property
    def elastic(self) -> bool:
        """Whether the world size may change during the run (``num_workers=(min, max)``)."""
        return isinstance(self.num_workers, tuple)

    @property
    def min_workers(self) -> int:
        return self.num_workers[0] if isinstance(self.num_workers, tuple) else self.num_workers

    @property
    def max_workers(self) -> int:
        return self.num_workers[1] if isinstance(self.num_workers, tuple) else self.num_workers

    @property
    def total_resources(self) -> dict[str, float]:
        return {k: v * self.max_workers for k, v in self.worker_resources.items()}


_TUNE_WORKERS = (
    " A search space inside ScalingConfig is Ray Train V1's Tuner(trainer) pattern (Ray V2 refuses it too): "
    "tune the number of workers in a function trainable that builds the trainer, "
    "def driver(config): TorchTrainer(..., scaling_config=ScalingConfig(num_workers=config['num_workers'])).fit(), "
    "with Tuner(driver, param_space={'num_workers': tune.grid_search([1, 2])})."
)


def _is_search_space(value: Any) -> bool:
    """A Tune search space (``tune.grid_search`` gives a dict, ``tune.choice`` a ``Domain``), told
    apart without importing ``muster.tune``."""
    return (isinstance(value, dict) and "grid_search" in value) or callable(getattr(value, "sample", None))


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _is_zero(value: Any) -> bool:
    """``num_workers=0``: Ray Train V2's local mode."""
    return isinstance(value, int) and not isinstance(value, bool) and value == 0


@dataclass(kw_only=True)
class CheckpointConfig:
    """Which committed checkpoints to keep.

    Args:
        num_to_keep: keep this many (the best ones by the score attribute, or
            the newest without one); the latest is always kept as well.
            ``None`` keeps all.
        checkpoint_score_attribute: a reported metric to rank checkpoints by.
        checkpoint_score_order: ``"max"`` or ``"min"``.
        checkpoint_frequency / checkpoint_at_end: refused, as Ray Train V2 refuses them: a
            training function saves a checkpoint when it passes one to ``report``. They are
            ``muster.tune.CheckpointConfig``'s, for a ``tune.Trainable`` class.
    """

    num_to_keep: int | None = None
    checkpoint_score_attribute: str | None = None
    checkpoint_score_order: Literal["max", "min"] = "max"
    checkpoint_frequency: Any = None
    checkpoint_at_end: Any = None

    def __post_init__(self) -> None:
        self._check_trainable_settings()
        if self.num_to_keep is not None and (
            isinstance(self.num_to_keep, bool) or not isinstance(self.num_to_keep, int) or self.num_to_keep < 1
        ):
            raise InvalidArgumentError(
                f"CheckpointConfig(num_to_keep={self.num_to_keep!r}): use an integer >= 1, or None to keep all."
            )
        if self.checkpoint_score_order not in ("max", "min"):
            raise InvalidArgumentError(
                f"CheckpointConfig(checkpoint_score_order={self.checkpoint_score_order!r}): use 'max' or 'min'."
            )

    def _check_trainable_settings(self) -> None:
        for name in ("checkpoint_frequency", "checkpoint_at_end"):
            if getattr(self, name) is not None:
                raise InvalidArgumentError(
                    f"muster.train.CheckpointConfig({name}={getattr(self, name)!r}) does not apply to a training "
                    "function (Ray Train V2 refuses it too): remove it and pass a checkpoint to report() when one "
                    f"should be saved. For a tune.Trainable class, use muster.tune.CheckpointConfig({name}=...)."
                )


@dataclass(kw_only=True)
class FailureConfig:
    """How many times a failed attempt is retried from the latest checkpoint.

    Args:
        max_failures: retries allowed; 0 fails on the first error, -1 retries forever.
        fail_fast: Ray's flag; ``True`` is the same as ``max_failures=0``.
        max_preemption_failures / relax_collectives_on_preemption / preemption_grace_s:
            Ray Train V2's preemption budget. muster's engine gets no preemption
            notices, so a lost node counts against ``max_failures``; these are
            accepted (and checked) so ported configs run.
        controller_failure_limit: Ray V2's retries of its controller; muster's
            controller is the driver, so it is accepted with no effect.
    """

    max_failures: int = 0
    fail_fast: bool = False
    controller_failure_limit: int = -1
    max_preemption_failures: int = -1
    relax_collectives_on_preemption: bool = False
    preemption_grace_s: float = 0.0

    def __post_init__(self) -> None:
        mpf = self.max_preemption_failures
        if isinstance(mpf, bool) or not isinstance(mpf, int) or mpf < -1:
            raise InvalidArgumentError(
                f"FailureConfig(max_preemption_failures={mpf!r}): use an integer >= 0, or -1 for no limit."
            )
        if not isinstance(self.preemption_grace_s, (int, float)) or self.preemption_grace_s < 0:
            raise InvalidArgumentError(f"FailureConfig(preemption_grace_s={self.preemption_grace_s!r}): "
                                       "use seconds >= 0.")
        if isinstance(self.max_failures, bool) or not isinstance(self.max_failures, int) or self.max_failures < -1:
            raise InvalidArgumentError(
                f"FailureConfig(max_failures={self.max_failures!r}): use an integer >= 0, or -1 to retry forever."
            )
        if self.fail_fast:
            self.max_failures = 0


_NAME_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=+-]*$")


@dataclass(kw_only=True)
class RunConfig:
    """Where a run lives and how it behaves.

    Args:
        name: the run's folder under ``storage_path`` (default:
            ``<TrainerClass>_<date>_<time>``).  Running again with the same
            name resumes it.
        storage_path: a local path or any fsspec URL (``s3://bucket/prefix``).
            Default ``~/muster_results`` (or ``MUSTER_STORAGE_PATH``).
        checkpoint_config / failure_config: see those classes.
        callbacks: objects with any of ``on_run_start(run_path, run_name)``,
            ``on_report(report)``, ``on_checkpoint(checkpoint, metrics)``,
            ``on_run_end(result)``, ``on_run_failed(error)`` (the run failed for good), and Ray V2's
            ``muster.train.UserCallback``
            hooks (``after_report``, ``after_exception``); ready-made loggers
            (CSV, JSON, TensorBoard, MLflow) are in ``muster.observe.loggers``.
        verbose: 0 silent, 1 live summary (default), 2 a line per report.
        worker_timeout_s: fail an attempt when no worker reports for this
            long (``None``: never).
        stall_report_s: when no worker has reported (or finished) for this
            long, say so, name the ranks still running, and have each of them
            print its Python stacks (every thread) into its output, where a
            hang shows (a rank waiting in a collective another rank never
            makes). Said again after twice as long, and so on; the run goes
            on. Default 300 s; ``None``: never. Local engine only for stacks.
        upload_drain_s: when a rank fails, how long the healthy ranks may
            take to finish the ``checkpoint_upload_mode="async"`` uploads
            already queued before the gang is stopped (default 60 s), so
            rounds every reporter returned from still commit.
        stop: Tune's stopping condition for each trial: a dict of metric
            thresholds (``{"training_iteration": 10}``: stop once a result
            reaches it), a ``(trial_id, result) -> bool`` function, or a
            ``muster.tune.Stopper``. Only Tune reads it.
        log_to_file: Tune's, as in Ray: ``True`` (files ``stdout`` and ``stderr``), one file
            name, or a ``(stdout, stderr)`` pair, in each trial's folder, where what the trainable
            prints is also written. A trainer ignores it: muster keeps every worker's output in
            the run store (``muster logs``).
        worker_runtime_env: Ray V2's runtime env of the training workers:
            its ``env_vars`` are set in each worker (other keys warn).
        progress_reporter: a Tuner's trial table (``muster.tune.CLIReporter``
            or a ``ProgressReporter`` of your own); a trainer's ``fit`` prints
            its own progress (``verbose``).
        sync_config / logging_config: Ray's; muster writes to ``storage_path``
            directly, so a value warns and changes nothing.
        local_dir: refused, as in Ray: use ``storage_path``.
    """

    name: str | None = None
    storage_path: str | None = None
    checkpoint_config: CheckpointConfig | None = None
    failure_config: FailureConfig | None = None
    callbacks: list[Any] | None = None
    verbose: int = 1
    worker_timeout_s: float | None = None
    stall_report_s: float | None = 300.0
    storage_filesystem: Any = None
    stop: Any = None
    upload_drain_s: float = 60.0
    log_to_file: Any = False
    worker_runtime_env: dict[str, Any] | None = None
    sync_config: Any = None
    progress_reporter: Any = None
    logging_config: Any = None
    local_dir: str | None = None

    def __post_init__(self) -> None:
        if self.local_dir is not None:
            raise InvalidArgumentError(
                f"RunConfig(local_dir={self.local_dir!r}) is Ray's older option (Ray refuses it too): pass "
                f"storage_path={self.local_dir!r} instead."
            )
        for name in ("sync_config", "logging_config"):  # progress_reporter: a Tuner checks and uses it
            if getattr(self, name) is not None:
                warnings.warn(f"RunConfig({name}=...) has no effect on muster: results and checkpoints go to "
                              "storage_path directly, and progress prints as verbose= says.", stacklevel=3)
        if self.worker_runtime_env is not None:
            from muster.core.init_options import warn_unused_runtime_env

            if not isinstance(self.worker_runtime_env, dict):
                raise InvalidArgumentError(f"RunConfig(worker_runtime_env={self.worker_runtime_env!r}): pass a dict "
                                           "such as {'env_vars': {'NCCL_DEBUG': 'INFO'}}.")
            warn_unused_runtime_env(self.worker_runtime_env, "RunConfig(worker_runtime_env=...)")
        if self.stop is not None and not (isinstance(self.stop, dict) or callable(self.stop)):
            raise InvalidArgumentError(
                f"RunConfig(stop={self.stop!r}): pass a dict such as {{'training_iteration': 10}}, a function "
                "(trial_id, result) -> bool, or a muster.tune.Stopper."
            )
        if self.name is not None and (not isinstance(self.name, str) or not _NAME_OK.match(self.name)):
            raise InvalidArgumentError(
                f"RunConfig(name={self.name!r}): use letters, digits and _ . = + - (no slashes), "
                "e.g. name='mnist_ddp'."
            )
        if self.storage_path is not None and (not isinstance(self.storage_path, str) or not self.storage_path):
            raise InvalidArgumentError(
                f"RunConfig(storage_path={self.storage_path!r}): pass a local path or an fsspec URL "
                "such as 's3://bucket/runs'."
            )
        if self.verbose not in (0, 1, 2):
            raise InvalidArgumentError(f"RunConfig(verbose={self.verbose!r}): "
                                       "use 0 (silent), 1 (summary) or 2 (every report).")
        for name in ("worker_timeout_s", "stall_report_s"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
                raise InvalidArgumentError(f"RunConfig({name}={value!r}): use a number of seconds > 0, or None.")
        if isinstance(self.upload_drain_s, bool) or not isinstance(self.upload_drain_s, (int, float)) or not (
            self.upload_drain_s >= 0
        ):
            raise InvalidArgumentError(
                f"RunConfig(upload_drain_s={self.upload_drain_s!r}): use a number of seconds >= 0 "
                "(0: stop at once on a failure, dropping async uploads in flight)."
            )
        lib = "muster.tune" if type(self).__module__.startswith("muster.tune") else "muster.train"
        expect_instance("RunConfig", "checkpoint_config", self.checkpoint_config, CheckpointConfig,
                        f"a {lib}.CheckpointConfig, e.g. CheckpointConfig(num_to_keep=2)")
        expect_instance("RunConfig", "failure_config", self.failure_config, FailureConfig,
                        f"a {lib}.FailureConfig, e.g. FailureConfig(max_failures=2)")
        self.checkpoint_config = self.checkpoint_config or CheckpointConfig()
        self.failure_config = self.failure_config or FailureConfig()
        self.callbacks = list(self.callbacks or [])

    def resolved_storage_path(self) -> str:
        return self.storage_path or settings.storage_path_default()

    def _check_for_trainer(self, trainer: str) -> None:
        """A trainer's ``fit()`` is about to run with this config: refuse what only Tune uses. Here, a
        ``tune.CheckpointConfig``'s ``checkpoint_frequency``/``checkpoint_at_end`` (a training function
        checkpoints through ``report``; Ray Train V2 refuses a Tune CheckpointConfig too)."""
        for name in ("checkpoint_frequency", "checkpoint_at_end"):
            value = getattr(self.checkpoint_config, name, None)
            if value is not None:
                raise InvalidArgumentError(
                    f"{trainer}(run_config=RunConfig(checkpoint_config=CheckpointConfig({name}={value!r}))): "
                    f"{name} is Ray Tune's, for a tune.Trainable class; a training function saves a checkpoint "
                    f"when it passes one to report(). Remove {name}, or use muster.train.CheckpointConfig."
                )



class CheckpointUploadMode(Enum):
    """How ``report`` uploads a checkpoint (Ray Train V2): ``SYNC`` before it returns, ``ASYNC`` in the background.

    ``NO_UPLOAD`` (the files are already in storage) is Ray's; muster always copies, so it is refused.
    """

    ASYNC = "ASYNC"
    SYNC = "SYNC"
    NO_UPLOAD = "NO_UPLOAD"


class CheckpointConsistencyMode(Enum):
    """What ``get_all_reported_checkpoints`` waits for: ``COMMITTED`` checkpoints (``VALIDATED``: the same on muster,
    which has no validation step)."""

    COMMITTED = "COMMITTED"
    VALIDATED = "VALIDATED"

