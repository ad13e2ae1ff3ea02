"""A run's identity in storage: open it, refuse or resume an old one, record its status."""

from __future__ import annotations

import datetime
import secrets
import time
from typing import Any

import cloudpickle

from muster.exceptions import MusterError
from muster.train._internal.policies import CheckpointRecord
from muster.train.storage import RUN_STATE, Storage

TRAINER_FILE = "trainer.pkl"


class RunAlreadyFinishedError(MusterError, ValueError):
    """A new fit() was pointed at a run that already finished."""


def default_name(trainer_cls: str) -> str:
    stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    return f"{trainer_cls}_{stamp}_{secrets.token_hex(2)}"


class RunRecord:
    """The ``.muster_run.json`` of one run folder."""

    def __init__(self, storage: Storage, trainer_cls: str, extra: dict[str, Any] | None = None):
        self.storage = storage
        self.path = storage.join(storage.run_dir, RUN_STATE)
        self.trainer_cls = trainer_cls
        self.state: dict[str, Any] = {}
        self.extra = dict(extra or {})

    def load(self) -> dict[str, Any] | None:
        return self.storage.read_json(self.path) if self.storage.exists(self.path) else None

    def open(self, allow_finished: bool = False) -> dict[str, Any] | None:
        """Create the run, or take over an unfinished one. Returns the previous state, if any.

        Raises:
            RunAlreadyFinishedError: the run finished before and ``allow_finished`` is False.
        """
        previous = self.load()
        if previous is not None and previous.get("status") == "FINISHED" and not allow_finished:
            raise RunAlreadyFinishedError(
                f"Run {self.storage.name!r} in {self.storage.storage_path} already FINISHED; muster will not "
                "silently 'resume' it into zero steps. Pick a new RunConfig(name=...) for a fresh run, or "
                f"delete {self.storage.uri} to start this name over, or call TorchTrainer.restore("
                f"{self.storage.uri!r}).fit() to run it again from its latest checkpoint."
            )
        self.storage.makedirs(self.storage.run_dir)
        if previous is not None:  # what writers killed mid-write left (a crashed driver's)
            self.storage.remove_stale_temp_files()
        self.state = dict(previous or {})
        self.state.setdefault("name", self.storage.name)
        self.state.setdefault("created_at", time.time())
        self.state["trainer"] = self.trainer_cls
        self.state.update(self.extra)
        return previous

    def save_trainer(self, trainer: Any, required: bool = True) -> None:
        """Keep the trainer for ``restore``. ``required=False`` (local mode: the function never leaves this
        process, so it need not pickle, as in Ray): one that does not pickle is not kept."""
        try:
            data = cloudpickle.dumps(trainer)
        except Exception:  # noqa: BLE001 - whatever an object of the user's raises when pickled
            if required:
                raise
            return
        self.storage.write_bytes(self.storage.join(self.storage.run_dir, TRAINER_FILE), data)

    def mark(self, status: str, latest: CheckpointRecord | None, failures: list[str] | None = None) -> None:
        self.state["status"] = status
        self.state["updated_at"] = time.time()
        self.state["latest_checkpoint"] = latest.path if latest else None
        if failures is not None:
            self.state["failures"] = failures
        self.storage.write_json(self.path, self.state)
