"""PBT's copy of a donor trial's latest checkpoint while the donor's run goes on committing and its
retention (``CheckpointConfig(num_to_keep=1)``) removes the older ones.

The race is a real one on a real run folder, made to happen at a fixed point: a Python audit hook
(PEP 578, the interpreter's own hook on file opens) commits the donor's next checkpoint when the copy
opens the first file of the one it copies, i.e. after ``shutil.copytree`` listed that folder and
before it copied anything. That is the moment the donor's own thread can commit in a real run.
"""

from __future__ import annotations

import os
import sys
import threading
import types

import pytest

from muster.train import CheckpointConfig
from muster.train._internal.checkpoint_manager import CheckpointManager
from muster.train.storage import Storage
from muster.tune.schedulers.trial_scheduler import FIFOScheduler
from muster.tune.stopper import NoopStopper
from muster.tune.trial import Trial, TrialRun
from muster.tune.tune_controller import TuneController

_FILES = {f"shard_{i}.bin": bytes([i]) * 64 for i in range(4)}


class _CommitOnOpen:
    """While armed, the first open of a file under ``folder`` by the arming thread runs ``then`` first
    (once): an audit hook cannot be removed, so a disarmed one does nothing."""

    installed: _CommitOnOpen | None = None

    def __init__(self) -> None:
        self.folder: str | None = None
        self.then: types.FunctionType | None = None
        self.thread = 0
        self.fired = 0

    def arm(self, folder: str, then) -> None:
        self.folder, self.then, self.thread = folder.rstrip("/") + "/", then, threading.get_ident()

    def disarm(self) -> None:
        self.folder = self.then = None

    def __call__(self, event: str, args: tuple) -> None:
        if event != "open" or self.folder is None or threading.get_ident() != self.thread:
            return
        if not isinstance(args[0], str) or not args[0].startswith(self.folder):
            return
        then, self.folder, self.then = self.then, None, None  # once; and no hook inside ``then``'s opens
        self.fired += 1
        then()


@pytest.fixture
def commit_on_open():
    if _CommitOnOpen.installed is None:
        _CommitOnOpen.installed = _CommitOnOpen()
        sys.addaudithook(_CommitOnOpen.installed)
    hook = _CommitOnOpen.installed
    hook.fired = 0
    yield hook
    hook.disarm()


def _trial(experiment: Storage, name: str) -> Trial:
    return Trial(name, name, {}, experiment.join(experiment.run_dir, name), {})


def _controller(experiment: Storage, trials: list[Trial]) -> TuneController:
    return TuneController(experiment, trials, None, "fn", None, FIFOScheduler(),  # type: ignore[arg-type]
                          NoopStopper(), None, None, None, None, 0, "abcde", experiment.root)


def _donor_ledger(storage: Storage) -> CheckpointManager:
    """The donor's run: its checkpoint manager keeping one checkpoint."""
    storage.makedirs(storage.run_dir)
    ledger = CheckpointManager(storage, CheckpointConfig(num_to_keep=1), warn=lambda message: None)
    ledger.load_previous()
    ledger.start_attempt(1)
    return ledger


def _commit(ledger: CheckpointManager, storage: Storage, tmp_path, round_: int) -> str:
    """What the donor's worker does for a report with a checkpoint: stage its files, then report."""
    src = tmp_path / f"report_{round_}"
    src.mkdir()
    for name, body in _FILES.items():
        (src / name).write_bytes(body + bytes([round_]))
    staged = storage.upload_dir(str(src), storage.staging_dir(round_))
    ledger.record(0, round_, {"score": round_}, staged, 0.0, 0)
    return storage.checkpoint_dir(round_)


def _contents(folder: str) -> dict[str, bytes]:
    return {n: open(os.path.join(folder, n), "rb").read() for n in sorted(os.listdir(folder)) if n in _FILES}


@pytest.fixture
def exp(tmp_path):
    experiment = Storage(str(tmp_path / "results"), "exp")
    experiment.makedirs(experiment.run_dir)
    donor, into = _trial(experiment, "donor"), _trial(experiment, "into")
    storage = Storage(experiment.run_dir, "donor")
    return experiment, donor, into, storage


def test_a_checkpoint_removed_while_copied_is_retried_with_the_donors_newer_one(exp, tmp_path, commit_on_open):
    """No run keeps it (the donor's retention ran elsewhere): copytree loses the files, and reports that
    as a shutil.Error of missing files; the copy is made again of the donor's newer checkpoint."""
    experiment, donor, into, storage = exp
    ledger = _donor_ledger(storage)
    first = _commit(ledger, storage, tmp_path, 1)
    commit_on_open.arm(first, lambda: _commit(ledger, storage, tmp_path, 2))
    clone = _controller(experiment, [donor, into]).clone_latest_checkpoint(donor, into)
    assert commit_on_open.fired == 1
    assert not os.path.exists(first)  # the race happened: retention removed the one being copied
    assert clone is not None
    assert _contents(clone.path) == {n: b + bytes([2]) for n, b in _FILES.items()}


def test_a_donor_run_keeps_the_checkpoint_being_copied_from_its_retention(exp, tmp_path, commit_on_open):
    """The donor's run commits a newer checkpoint in the middle of the copy: the one being copied is
    copied whole (not the newer one), and retention removes it once the copy is done."""
    experiment, donor, into, storage = exp
    ledger = _donor_ledger(storage)
    no_plan = types.SimpleNamespace(run_config=types.SimpleNamespace(callbacks=[]))  # (the run is never started)
    donor.run = TrialRun(donor, no_plan, storage, {}, None)  # type: ignore[arg-type]
    donor.run.controller = types.SimpleNamespace(ledger=ledger)  # type: ignore[assignment]
    first = _commit(ledger, storage, tmp_path, 1)
    commit_on_open.arm(first, lambda: _commit(ledger, storage, tmp_path, 2))
    clone = _controller(experiment, [donor, into]).clone_latest_checkpoint(donor, into)
    assert commit_on_open.fired == 1 and storage.committed_rounds() == [2]
    assert clone is not None
    assert _contents(clone.path) == {n: b + bytes([1]) for n, b in _FILES.items()}
    assert not os.path.exists(first)  # kept only while it was copied
    assert [r.round for r in ledger.committed] == [2]


def test_holding_keeps_a_checkpoint_from_retention_until_the_last_hold_ends(tmp_path):
    storage = Storage(str(tmp_path), "run")
    ledger = _donor_ledger(storage)
    first = _commit(ledger, storage, tmp_path, 1)
    with ledger.holding(first) as held, ledger.holding(first + "/") as again:
        assert held and again
        _commit(ledger, storage, tmp_path, 2)
        _commit(ledger, storage, tmp_path, 3)
        assert storage.committed_rounds() == [1, 3]  # round 2, not held, went as usual
    assert storage.committed_rounds() == [3]
    with ledger.holding(first) as held:
        assert not held  # gone: nothing to hold
