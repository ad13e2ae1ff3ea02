"""The experiment's state on disk: what the Tune controller saves as it runs, and what ``Tuner.restore``,
``ExperimentAnalysis`` and a fresh ``fit()`` under a used name read or clear.

The folder ``<storage_path>/<name>`` holds ``experiment_state.json`` (the trials as of the last save), the
searcher's and the callbacks' own state beside it, and the pickled Tuner (``tuner.pkl``, written by the Tuner).
"""

from __future__ import annotations

import fnmatch
import logging
import pickle
import warnings
from collections.abc import Callable
from typing import Any

from muster.exceptions import InvalidArgumentError
from muster.train.storage import Storage
from muster.tune.callback import CALLBACK_STATE, CallbackList
from muster.tune.search.searcher import Searcher

EXPERIMENT_STATE = "experiment_state.json"

_log = logging.getLogger(__name__)


def save_state(experiment: Storage, state: dict[str, Any], searcher: Any, callbacks: CallbackList) -> None:
    """Write ``state`` (the trials, as JSON), with the searcher's and the callbacks' state as of these trials."""
    save_searcher = getattr(searcher, "save_to", None)  # a Searcher's state (a SearchAlgorithm has none)
    if save_searcher is not None:
        save_searcher(experiment)
    callbacks.save_to(experiment)
    try:
        experiment.write_json(experiment.join(experiment.run_dir, EXPERIMENT_STATE), state)
    except (TypeError, ValueError) as exc:
        warnings.warn(f"the experiment state could not be saved as JSON ({exc}); Tuner.restore needs it.",
                      stacklevel=3)


def read_saved(storage: Storage, name: str, read: Callable[[str], Any]) -> Any:
    """``read`` the experiment's file ``name``; one that cannot be read back is named, with the fix."""
    path = storage.join(storage.run_dir, name)
    try:
        return read(path)
    except (EOFError, pickle.UnpicklingError, ValueError) as exc:  # truncated or damaged (JSONDecodeError too)
        raise InvalidArgumentError(
            f"Tuner.restore: {path} is unreadable ({type(exc).__name__}: {exc}). It was damaged, or cut short "
            "by a crash of a muster version that wrote it in place; put back a copy of it, or start the "
            "experiment anew with Tuner(...).fit()."
        ) from exc


def forget_earlier_run(storage: Storage) -> None:
    """A fresh ``fit()`` under a name used before starts a new experiment in that folder, as in Ray.

    The earlier run's trial folders stay (trial ids differ); its experiment and searcher state go, so
    a later ``Tuner.restore`` sees only the new run.
    """
    if not storage.exists(storage.join(storage.run_dir, EXPERIMENT_STATE)):
        return
    stale = [EXPERIMENT_STATE] + [n for n in storage.listdir(storage.run_dir)
                                  if fnmatch.fnmatch(n, Searcher.CKPT_FILE_TMPL.format("*")) or n == CALLBACK_STATE]
    _log.info("An experiment named %r exists in %s: starting a new one there (Tuner.restore(%r, trainable) would "
              "have continued it).", storage.name, storage.storage_path, storage.uri)
    for name in stale:
        storage.rm(storage.join(storage.run_dir, name))
