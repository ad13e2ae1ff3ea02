"""What a ``Trial`` tells Tune callbacks beyond its state: the per-metric summary Ray calls
``metric_analysis``, the trial's error as files in its folder (``error.txt``, ``error.pkl``), and what its
``best_checkpoints`` are ranked by."""

from __future__ import annotations

import time
import traceback
from numbers import Number
from typing import Any

import cloudpickle

from muster.exceptions import MusterError, TaskError, TrainingFailedError, also_an_instance_of
from muster.train.storage import Storage

ERROR_FILE = "error.pkl"  # a failed trial's error itself, in its folder (as Ray keeps it)
ERROR_TEXT_FILE = "error.txt"  # its traceback as text: Ray's Trial.error_file
# a function (or class) trial's run state key: the CheckpointConfig its best_checkpoints are ranked by
RANKED_BY = "checkpoint_config"

# result fields that describe the reporting process rather than measure training (Ray leaves them out too)
_NOT_METRICS = ("trial_id", "experiment_id", "date", "timestamp", "pid", "hostname", "node_ip", "config")
_WINDOWS = (5, 10)  # "last-5-avg", "last-10-avg"


def _numbers(result: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The result's numbers (bools too, as Ray counts them) by ``"a/b"`` paths."""
    out: dict[str, Any] = {}
    for key, value in result.items():
        if not prefix and key in _NOT_METRICS:
            continue
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_numbers(value, f"{path}/"))
        elif isinstance(value, Number):
            out[path] = value
    return out


def update_metric_analysis(analysis: dict[str, dict[str, Any]], recent: dict[str, list[Any]],
                           result: dict[str, Any]) -> None:
    """Fold one result into ``analysis`` (per metric: max, min, avg, last, last-5-avg, last-10-avg) and
    ``recent`` (each metric's last 10 values). ``avg`` is the mean over the trial's training iterations
    (a result's ``training_iteration`` is its step), as Ray's ``Trial.metric_analysis`` keeps it."""
    step = result.get("training_iteration") or 1
    for metric, value in _numbers(result).items():
        seen = analysis.get(metric)
        window = recent.setdefault(metric, [])
        window.append(value)
        del window[:-max(_WINDOWS)]
        if seen is None:
            analysis[metric] = {"max": value, "min": value, "avg": value, "last": value}
        else:
            seen["max"], seen["min"] = max(value, seen["max"]), min(value, seen["min"])
            seen["avg"] = seen["avg"] + (value - seen["avg"]) / step
            seen["last"] = value
        for n in _WINDOWS:
            last_n = window[-n:]
            analysis[metric][f"last-{n}-avg"] = value if seen is None else sum(last_n) / len(last_n)


def failure_text(error: BaseException) -> str:
    """What ``error.txt`` says of one failure, each traceback once, as Ray writes each failure's own: a
    remote function's error (``TaskError``) as its message and remote traceback; a trial's final error
    (``TrainingFailedError``, which holds every attempt's) as its last attempt's root cause, the earlier
    attempts' being the failures above it; any other error as its traceback."""
    if isinstance(error, TrainingFailedError) and error.root_cause is not None:
        attempts = len(error.attempts)
        earlier = "; the earlier attempts' errors are the failures above" if attempts > 1 else ""
        head = (f"{error.subject} failed after {attempts} attempt(s) (FailureConfig(max_failures="
                f"{error.max_failures})){earlier}. Root cause of attempt {attempts}:")
        return f"{head}\n{failure_text(error.root_cause)}"
    if isinstance(error, TaskError):
        return str(error)
    return "".join(traceback.format_exception(type(error), error, error.__traceback__))


def write_error(storage: Storage, error: BaseException, failure: int) -> None:
    """A trial's ``failure``-th error (a failed attempt it retries, or its final one) in its folder, as
    Ray keeps them: added to ``error.txt`` (:func:`failure_text` after a ``Failure # N (occurred at ...)``
    line) and as ``error.pkl`` (the error itself, so a restored ResultGrid's ``result.error`` is still what
    the trainable raised; an error that does not pickle is left out)."""
    path = storage.join(storage.run_dir, ERROR_TEXT_FILE)
    before = storage.read_bytes(path).decode(errors="replace") if storage.exists(path) else ""
    when = time.strftime("%Y-%m-%d_%H-%M-%S")
    storage.write_text(path, f"{before}Failure # {failure} (occurred at {when})\n{failure_text(error).rstrip()}\n")
    storage.write_bytes(storage.join(storage.run_dir, ERROR_FILE), cloudpickle.dumps(error))


def as_users_error(err: BaseException | None) -> BaseException | None:
    """A trial's ``TrainingFailedError`` that is also an instance of what the trainable raised, as
    Ray's trial errors are (``isinstance(result.error, ValueError)``); its message is unchanged."""
    if not isinstance(err, TrainingFailedError):
        return err
    cause = err.root_cause
    if isinstance(cause, TaskError) and cause.cause is not None and not isinstance(cause.cause, MusterError):
        return also_an_instance_of(err, type(cause.cause))
    return err
