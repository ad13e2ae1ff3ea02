"""Logger callbacks for ``RunConfig(callbacks=[...])``: CSV, JSON lines, TensorBoard, MLflow.

Named as in Ray (``ray.tune.logger.CSVLoggerCallback``, ``JsonLoggerCallback``,
``TBXLoggerCallback``, ``ray.air.integrations.mlflow.MLflowLoggerCallback``);
they live here, with the rest of what muster shows of a run. Each takes the
reports of a training run as the controller records them:

* ``on_run_start(run_path, run_name)`` -- the run folder is known; files open;
* ``on_report(row)`` -- one report of one rank (metrics plus
  ``training_iteration``, ``timestamp``, ``_rank``, ``_attempt``); a training function's own
  ``training_iteration``/``timestamp``/``checkpoint_dir_name`` show as it reported them. A Tune trial's
  rows are its results as Ray's loggers get them: Tune's keys (``trial_id``, ``done``, ``time_total_s``...)
  and none of the controller's (``_rank``, ``_attempt``);
* ``on_run_end(result)`` -- files close;
* ``on_run_failed(error)`` -- the run (a training run's, a Tuner trial's) failed for good, or a
  Trainer's run was interrupted (Ctrl-C, SIGTERM: ``error`` is the ``KeyboardInterrupt``); no
  ``on_run_end`` comes: files close.

In a Tuner, each trial's run gets a copy made by ``for_trial(config, trial)``.

By default the files go into the run folder (which must then be local; pass
``logdir=`` for runs stored in ``s3://``); in a Tuner, ``logdir=`` holds one folder per trial, named as
the trial's own. Ray's loggers take no arguments, so the arguments here are keyword-only (a positional
one is refused, as Ray refuses it). CSV and JSON keep every rank's
reports; TensorBoard and MLflow keep rank 0's unless ``all_ranks=True``, which
prefixes each metric with ``rank<N>/``.
"""

from __future__ import annotations

import copy
import csv
import json
import logging
import numbers
import os
import posixpath
import queue
import threading
import time
from typing import Any, TextIO

from muster.core.serialization import json_default
from muster.exceptions import InvalidArgumentError
from muster.observe.recorder import BOOKKEEPING, OWN_RUN_KEYS, finite
from muster.observe.trial_rows import CONTROLLER_KEYS, logged_result
from muster.observe.tune_progress import flatten_config

_log = logging.getLogger(__name__)
_ROW_KEYS = ("training_iteration", "timestamp", "_rank", "_attempt")


def _local_dir(run_path: str, logdir: str | None, what: str) -> str:
    folder = logdir or run_path
    if folder.startswith("file://"):
        folder = folder[len("file://"):]
    if "://" in folder:
        raise InvalidArgumentError(
            f"{what}: the run folder {run_path!r} is not on a local disk, where this logger writes. "
            f"Pass {what}(logdir='/a/local/folder')."
        )
    os.makedirs(folder, exist_ok=True)
    return folder


#: what a training run's row may hold (from a trainer in a Tuner) that is no metric to chart
_NOT_CHARTED = frozenset({"pid", "config"})
#: what Ray's TensorBoard logger leaves out of a Tune trial's result
_NOT_TUNE_SCALAR = frozenset({"config", "pid", "timestamp", "time_total_s", "training_iteration"})


def _logged(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` as the loggers write it. A Tune trial's is its result as Ray's loggers get it: without the
    controller's keys (its ``training_iteration`` is already the one Ray shows): see ``trial_rows``. A
    training run's keeps ``_rank`` and ``_attempt`` and shows the values its function reported under the
    controller's own keys (``training_iteration``...), as its ``Result`` does."""
    if "trial_id" in row:
        return logged_result(row)
    own = row.get(OWN_RUN_KEYS) or {}
    return {k: own.get(k, v) for k, v in row.items() if k not in ("_round", OWN_RUN_KEYS)}


def _walltime(row: dict[str, Any]) -> float:
    """The row's time for TensorBoard and MLflow: its ``timestamp`` where that is a number, else now (and
    for a Tune trial's, whose ``timestamp`` is whole seconds: Ray's loggers pass none)."""
    t = row.get("timestamp") if "trial_id" not in row else None
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else time.time()


def _numbers(row: dict[str, Any], leave_out: frozenset[str] = BOOKKEEPING | _NOT_CHARTED,
             converted: bool = False) -> dict[str, float]:
    """The row's numeric values, nested dicts flattened as ``a/b``, but its keys in ``leave_out`` (by default
    bookkeeping, a Tune trial's ``pid`` and ``config``). ``converted``: also every value ``float()`` takes (a
    numeric string, a one-element array), as Ray's MLflow logger records them."""
    out: dict[str, float] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}/{k}", v)
        elif isinstance(value, numbers.Real):  # numpy's scalars too
            out[prefix] = float(value)
        elif converted:
            try:
                out[prefix] = float(value)
            except (TypeError, ValueError, RuntimeError):  # a string, None, a many-element array or tensor
                pass

    for key, value in row.items():
        if key not in leave_out:
            walk(key, value)
    return out


class _LoggerCallback:
    """Shared shape: a folder picked at run start, rows in, closed at run end."""

    name = "logger"

    def __init__(self, *, logdir: str | None = None):
        self.logdir = logdir
        self.folder: str | None = None
        self.trial: Any = None  # set on a Tuner trial's copy (``for_trial``)
        self.failed = False
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        # without its lock, so a Tuner's RunConfig(callbacks=[...]) pickles with the experiment (Tuner.restore)
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _lock=threading.Lock())

    def for_trial(self, config: dict[str, Any], trial: Any = None) -> "_LoggerCallback":
        """A fresh copy for one trial of a Tuner (each trial's run has its own files or MLflow run);
        ``trial``: the Tune trial it logs (Ray's ``Trial`` attributes: ``evaluated_params``, ``ending_as``)."""
        clone = copy.copy(self)
        clone._lock = threading.Lock()
        clone.trial = trial
        return clone

    def on_run_start(self, run_path: str, run_name: str) -> None:
        logdir = self.logdir
        if logdir is not None and self.trial is not None:  # a Tuner's trials: one folder each, named as theirs
            logdir = os.path.join(logdir, posixpath.basename(run_path.rstrip("/")))
        self.folder = _local_dir(run_path, logdir, type(self).__name__)
        self._open(run_name)

    def on_report(self, row: dict[str, Any]) -> None:
        if self.folder is None:
            raise RuntimeError(
                f"{type(self).__name__}: on_report before on_run_start; pass it in RunConfig(callbacks=[...]).")
        with self._lock:  # reports of different ranks arrive on different threads
            self._write(_logged(row))

    def on_run_end(self, result: Any) -> None:
        with self._lock:
            self._close()

    def on_run_failed(self, error: BaseException) -> None:
        """The run failed for good or was interrupted (no ``on_run_end`` comes then): files close (an
        MLflow run ends as FAILED, as Ray's)."""
        if self.folder is None:  # stopped before on_run_start: nothing is open
            return
        with self._lock:
            self.failed = True
            self._close()

    def _open(self, run_name: str) -> None: ...
    def _write(self, row: dict[str, Any]) -> None: ...
    def _close(self) -> None: ...


def _ray_flattened(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its nested dicts as ``a/b`` keys, as Ray's ``flatten_dict`` gives them: after the
    others, one level at a time (an empty dict leaves no key)."""
    out = dict(row)
    while any(isinstance(v, dict) for v in out.values()):
        nested = [k for k, v in out.items() if isinstance(v, dict)]
        added = {f"{k}/{sub}": v for k in nested for sub, v in out[k].items()}
        for k in nested:
            del out[k]
        out.update(added)
    return out


class CSVLoggerCallback(_LoggerCallback):
    """Every report of every rank as a row of ``progress.csv`` (a new metric adds a column:
    the file is rewritten once with the wider header)."""

    FILE = "progress.csv"

    def _open(self, run_name: str) -> None:
        assert self.folder is not None
        self.path = os.path.join(self.folder, self.FILE)
        self._fields: list[str] = []
        self._rows: list[dict[str, Any]] = []
        self._file: TextIO | None = None
        if os.path.exists(self.path):  # a resumed trial (Tuner.restore): its earlier rows stay, as Ray appends
            with open(self.path, newline="") as f:
                reader = csv.DictReader(f)
                self._rows = list(reader)
                self._fields = list(reader.fieldnames or [])

    def _write(self, row: dict[str, Any]) -> None:
        if "trial_id" in row:  # a Tune result as Ray's CSV has it: its order, no config (params.json holds it)
            flat = _ray_flattened({k: v for k, v in row.items() if k not in CONTROLLER_KEYS and k != "config"})
        else:
            flat = {k: row[k] for k in _ROW_KEYS if k in row}
            flat.update(flatten_config({k: v for k, v in row.items() if k not in flat and k not in BOOKKEEPING}))
        self._rows.append(flat)
        new = [k for k in flat if k not in self._fields]
        if new or self._file is None:
            self._fields.extend(new)
            if self._file is not None:
                self._file.close()
            self._file = open(self.path, "w", newline="")
            writer = csv.DictWriter(self._file, fieldnames=self._fields)
            writer.writeheader()
            writer.writerows(self._rows)
        else:
            csv.DictWriter(self._file, fieldnames=self._fields).writerow(flat)
        self._file.flush()

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class JsonLoggerCallback(_LoggerCallback):
    """Every report of every rank as one JSON object per line of ``progress.json``
    (``result.json`` in the run folder is muster's own record)."""

    FILE = "progress.json"

    def _open(self, run_name: str) -> None:
        assert self.folder is not None
        self.path = os.path.join(self.folder, self.FILE)
        self._file: TextIO | None = open(self.path, "a")

    def _write(self, row: dict[str, Any]) -> None:
        assert self._file is not None
        self._file.write(json.dumps(finite(row), default=json_default) + "\n")
        self._file.flush()

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class TBXLoggerCallback(_LoggerCallback):
    """Metrics as TensorBoard events (``pip install "muster[tensorboard]"``).

    A Tuner trial's go into the trial's folder itself, as Ray's (so ``tensorboard --logdir <experiment
    folder>`` shows one run per trial), charted as Ray's Tune logger charts them: ``ray/tune/<key>``
    (nested dicts as ``a/b``), at step ``timesteps_total`` or else ``training_iteration``, without
    ``config``, ``pid``, ``timestamp``, ``time_total_s`` and ``training_iteration``; ``int``, ``float``
    (``bool`` as 0/1) and numpy's ``float32``/``float64``/``int32``/``int64`` as scalars (not NaN), a
    non-empty list or array as a histogram (a 3-d array as an image, 4-d as images, 5-d as a video).
    When the trial ends (completed or failed; not paused, nor ended by the whole experiment's stop) its
    searched values (``Trial.evaluated_params``) are written as hparams, with the last result's scalars as
    their metrics.

    A training run's numeric metrics (rank 0's unless ``all_ranks=True``) keep their own names, at step
    ``training_iteration``, in ``<run folder>/tensorboard/``. ``logdir=`` (muster's; Ray's takes no
    arguments) puts a training run's files there instead, and a Tuner trial's in ``<logdir>/<trial folder's
    name>/``, so each trial keeps its own run, named as in the experiment folder.
    """

    def __init__(self, *, logdir: str | None = None, all_ranks: bool = False):
        super().__init__(logdir=logdir)
        self.all_ranks = all_ranks

    def _open(self, run_name: str) -> None:
        try:
            from tensorboardX import SummaryWriter
        except ImportError as exc:
            raise ImportError('TBXLoggerCallback needs tensorboardX: pip install "muster[tensorboard]"') from exc
        assert self.folder is not None
        in_place = self.logdir is not None or self.trial is not None
        self.path = self.folder if in_place else os.path.join(self.folder, "tensorboard")
        # tensorboardX names its file by the second it opens and truncates one of that name: a folder's later
        # writers (a trial's run after a pause, a resumed run) get a suffix so none overwrites an earlier file
        earlier = sum(f.startswith("events.out.tfevents.") for f in os.listdir(self.path)) if os.path.isdir(
            self.path) else 0
        self._writer: Any = SummaryWriter(logdir=self.path, flush_secs=5,
                                          filename_suffix=f".{earlier}" if earlier else "")
        self._last: dict[str, Any] = {}  # a trial's last charted values, for its hparams

    def _write(self, row: dict[str, Any]) -> None:
        if "trial_id" in row:  # a Tune trial's result, charted as Ray's Tune logger does
            self._last = _chart_trial_result(self._writer, row)
            return
        rank = int(row.get("_rank", 0))
        if rank != 0 and not self.all_ranks:
            return
        prefix = f"rank{rank}/" if self.all_ranks else ""
        step, walltime = int(row.get("training_iteration", 0)), _walltime(row)
        for key, value in _numbers(row).items():
            self._writer.add_scalar(prefix + key, value, global_step=step, walltime=walltime)

    def _close(self) -> None:
        if getattr(self, "_writer", None) is None:
            return
        paused = getattr(self.trial, "status", None) == "PAUSED"  # it runs again: its end is still to come
        # ended by the whole experiment's stop: Ray's logger hears no end of it, and writes no hparams
        stopped = getattr(self.trial, "experiment_stopped", False)
        evaluated = getattr(self.trial, "evaluated_params", None)
        if evaluated and self._last and not paused and not stopped:
            _write_hparams(self._writer, evaluated, self._last)
        self._writer.close()
        self._writer = None


def _tbx_scalar_types() -> tuple[type, ...]:
    import numpy as np

    return (int, float, np.float32, np.float64, np.int32, np.int64)  # Ray's; a bool is an int


def _nan(value: Any) -> bool:
    return value != value  # NaN alone is not equal to itself (an int never is NaN)


def _chart_trial_result(writer: Any, row: dict[str, Any]) -> dict[str, Any]:
    """One Tune result into ``writer`` as Ray's ``TBXLoggerCallback`` writes it; returns what it charted."""
    import numpy as np

    step = int(row.get("timesteps_total") or row.get("training_iteration", 0))
    charted: dict[str, Any] = {}
    scalar = _tbx_scalar_types()
    for key, value in flatten_config({k: v for k, v in row.items() if k not in _NOT_TUNE_SCALAR}).items():
        tag = "ray/tune/" + key
        if isinstance(value, scalar) and not _nan(value):
            charted[tag] = value
            writer.add_scalar(tag, value, global_step=step)
        elif (isinstance(value, list) and value) or (isinstance(value, np.ndarray) and value.size):
            charted[tag] = value
            _chart_array(writer, tag, value, step)
    writer.flush()
    return charted


def _chart_array(writer: Any, tag: str, value: Any, step: int) -> None:
    """A list or array: an image (3-d array), images (4-d), a video (5-d), else a histogram."""
    import numpy as np

    ndim = value.ndim if isinstance(value, np.ndarray) else 0
    if ndim == 3:
        writer.add_image(tag, value, global_step=step)
    elif ndim == 4:
        writer.add_images(tag, value, global_step=step)
    elif ndim == 5:
        writer.add_video(tag, value, global_step=step, fps=20)
    else:
        try:
            writer.add_histogram(tag, value, global_step=step)
        except (ValueError, TypeError) as exc:  # e.g. [[]] or a list of strings: not charted
            _log.warning("TBXLoggerCallback: %s=%r is no histogram TensorBoard takes (%s); left out", tag, value, exc)


def _write_hparams(writer: Any, evaluated: dict[str, Any], charted: dict[str, Any]) -> None:
    """A trial's searched values as TensorBoard hparams, with its last charted scalars as their metrics,
    as Ray keeps them: strings, bools, numbers, lists and None (numpy scalars as Python's); others left out."""
    import numpy as np
    from tensorboardX.summary import hparams

    kept: dict[str, Any] = {}
    for key, value in flatten_config(evaluated).items():
        if isinstance(value, (np.bool_, np.float32, np.float64, np.int32, np.int64)):
            kept[key] = value.tolist()
        elif isinstance(value, (str, bool, int, float, list, type(None))):
            kept[key] = value
    scalar = _tbx_scalar_types()
    metrics = {k: v for k, v in charted.items() if isinstance(v, scalar)}
    try:
        for summary in hparams(hparam_dict=kept, metric_dict=metrics):
            writer.file_writer.add_summary(summary)
    except Exception as exc:  # noqa: BLE001 - a value TensorBoard refuses must not fail the trial
        _log.warning("TBXLoggerCallback: could not write the trial's hparams %r: %s", kept, exc)


_MLFLOW_EXPERIMENTS = threading.Lock()  # one lookup-or-create of an MLflow experiment at a time


class MLflowLoggerCallback(_LoggerCallback):
    """Each result's values to an MLflow run (``pip install "muster[mlflow]"``), as Ray's: every one that
    is a number (or converts to one: a bool, a numeric string, a one-element array), nested dicts as
    ``a/b`` (a Tune trial's ``config/lr``, ``pid``, ``done``, ``training_iteration``, ``time_total_s``...),
    at step ``timesteps_total`` or else ``training_iteration``; a trial's config as parameters.

    Args:
        tracking_uri: where MLflow keeps runs (e.g. ``sqlite:///mlflow.db``, ``http://host:5000``);
            default: MLflow's own (``MLFLOW_TRACKING_URI``).
        registry_uri: the MLflow model registry's URI (Ray's argument).
        experiment_name: the MLflow experiment (made if missing); default ``"muster"``.
        tags: tags for the MLflow run.
        tracking_token: a token for the tracking server (set as ``MLFLOW_TRACKING_TOKEN``, as Ray does).
        save_artifact: at the run's end, upload its folder (a trial's folder in a Tuner) as the
            MLflow run's artifacts (a local folder only).
        log_params_on_trial_end: record the parameters at the run's end instead of its start.
        params: parameters to record once (e.g. your ``train_loop_config``).
        all_ranks: log every rank's reports, as ``rank<N>/metric``.

    Calls to MLflow run on a background thread, so a slow tracking server never holds up ``report()``.
    """

    def __init__(self, tracking_uri: str | None = None, *, registry_uri: str | None = None,
                 experiment_name: str | None = None, tags: dict[str, str] | None = None,
                 tracking_token: str | None = None, save_artifact: bool = False, log_params_on_trial_end: bool = False,
                 params: dict[str, Any] | None = None, all_ranks: bool = False):
        super().__init__()
        self.tracking_uri, self.registry_uri, self.tracking_token = tracking_uri, registry_uri, tracking_token
        self.experiment_name = experiment_name or "muster"
        self.tags, self.params, self.all_ranks = dict(tags or {}), dict(params or {}), all_ranks
        self.save_artifact, self.log_params_on_trial_end = save_artifact, log_params_on_trial_end
        self.run_id: str | None = None

    def for_trial(self, config: dict[str, Any], trial: Any = None) -> "MLflowLoggerCallback":
        """One MLflow run per trial, whose parameters are the trial's config (as Ray logs them)
        unless ``params=`` was given."""
        clone = super().for_trial(config, trial)
        assert isinstance(clone, MLflowLoggerCallback)
        clone.params = dict(self.params) or flatten_config(config)
        return clone

    def on_run_start(self, run_path: str, run_name: str) -> None:
        self.folder = run_path
        try:
            from mlflow.tracking import MlflowClient
        except ImportError as exc:
            raise ImportError('MLflowLoggerCallback needs mlflow: pip install "muster[mlflow]"') from exc
        if self.tracking_token:
            os.environ["MLFLOW_TRACKING_TOKEN"] = self.tracking_token  # where MLflow's client reads it
        self._client: Any = MlflowClient(tracking_uri=self.tracking_uri, registry_uri=self.registry_uri)
        run = self._client.create_run(self._experiment_id(), run_name=run_name,
                                      tags={"muster.run_path": run_path, **self.tags})
        self.run_id = run.info.run_id
        self._queue: queue.Queue[list[Any] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._send_forever, name="muster-mlflow", daemon=True)
        self._thread.start()
        if not self.log_params_on_trial_end:
            self._log_params()

    def _experiment_id(self) -> str:
        """The experiment's id, made if missing: once, though a Tuner's trials start their runs
        at once (Ray makes it on the driver before the trials)."""
        from mlflow.exceptions import MlflowException

        with _MLFLOW_EXPERIMENTS:
            found = self._client.get_experiment_by_name(self.experiment_name)
            if found is not None:
                return str(found.experiment_id)
            try:
                return str(self._client.create_experiment(self.experiment_name))
            except MlflowException:  # made meanwhile by another process logging to the same server
                found = self._client.get_experiment_by_name(self.experiment_name)
                if found is None:
                    raise
                return str(found.experiment_id)

    def _log_params(self) -> None:
        if self.params:
            from mlflow.entities import Param

            self._queue.put([Param(str(k), str(v)[:500]) for k, v in self.params.items()])

    def _write(self, row: dict[str, Any]) -> None:
        from mlflow.entities import Metric

        rank = int(row.get("_rank", 0))
        if rank != 0 and not self.all_ranks:
            return
        prefix = f"rank{rank}/" if self.all_ranks else ""
        millis = int(_walltime(row) * 1000)
        step = int(row.get("timesteps_total") or row.get("training_iteration", 0))  # Ray's step
        self._queue.put([Metric(prefix + k, v, millis, step) for k, v in _numbers(row, CONTROLLER_KEYS, True).items()])

    def _send_forever(self) -> None:
        from mlflow.entities import Metric

        while (batch := self._queue.get()) is not None:
            metrics = [m for m in batch if isinstance(m, Metric)]
            params = [p for p in batch if not isinstance(p, Metric)]
            try:
                self._client.log_batch(self.run_id, metrics=metrics, params=params)
            except Exception as exc:  # noqa: BLE001 - a lost metric must not stop training
                import warnings

                warnings.warn(f"MLflowLoggerCallback: could not log to {self.tracking_uri}: {exc}", stacklevel=1)

    def _close(self) -> None:
        if self.run_id is None:
            return
        if self.log_params_on_trial_end:
            self._log_params()
        self._queue.put(None)
        self._thread.join(60)
        if self.save_artifact and self.folder is not None and os.path.isdir(self.folder):
            self._client.log_artifacts(self.run_id, self.folder)
        self._client.set_terminated(self.run_id, "FAILED" if self.failed else "FINISHED")


__all__ = ["CSVLoggerCallback", "JsonLoggerCallback", "TBXLoggerCallback", "MLflowLoggerCallback"]
