"""PBT's copy of a donor trial's latest checkpoint into the folder of the trial that exploits it."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable
from typing import TYPE_CHECKING

from muster.train.checkpoint import Checkpoint
from muster.train.storage import Storage

if TYPE_CHECKING:
    from muster.tune.trial import Trial

EXPLOITED = "pbt_exploit"  # the copy's folder, in the exploiting trial's run folder
# tries, each of the donor's newest (a try fails only if the donor dropped the one listed before its run
# could keep it, between two lines of clone_latest_checkpoint)
_CLONE_TRIES = 3


def clone_latest_checkpoint(donor: Trial, latest: Callable[[], Checkpoint | None],
                            storage: Storage) -> Checkpoint | None:
    """The donor's latest checkpoint (``latest()``), copied now into ``storage``'s run folder (replacing
    the last copy): the exploiting trial restarts from it later, and by then the donor's own run may have
    deleted the original (``CheckpointConfig(num_to_keep=...)``). The donor's run keeps it from its
    retention while it is copied; if it went away before that (the donor committed a newer one and
    dropped it), the newer one is copied. None if there is none, or none could be copied."""
    dest = storage.join(storage.run_dir, EXPLOITED)
    for _ in range(_CLONE_TRIES):
        source = latest()
        if source is None:
            return None
        storage.rm(dest)
        try:
            with donor.run.keeping(source) if donor.run is not None else contextlib.nullcontext():
                _copy_checkpoint(source, storage, dest)
        except FileNotFoundError:
            continue
        except shutil.Error as exc:  # copytree gathers each file's error: files the donor deleted meanwhile
            if all("[Errno 2]" in why for _, _, why in exc.args[0]):
                continue
            raise
        return Checkpoint(dest, storage.fs)
    return None


def _copy_checkpoint(source: Checkpoint, storage: Storage, dest: str) -> None:
    if storage.is_local and source.is_local:
        shutil.copytree(source.path, dest)
        return
    local = source.to_directory()
    try:
        storage.upload_dir(local, dest)
    finally:
        shutil.rmtree(local, ignore_errors=True)
