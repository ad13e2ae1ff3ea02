"""The per-worker training session behind ``report``/``get_checkpoint``/``get_context``.

``report`` never waits for other ranks: it stages this rank's files (if any)
in storage, hands the report (with this rank's resume state) to the driver,
and returns once the driver has recorded it.  Committing the round is the
controller's job.  With ``checkpoint_upload_mode="async"`` the files are
snapshotted (hard links) and uploaded by one background thread, in order.
"""

from __future__ import annotations

import logging
import math
import numbers
import os
import queue
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from fsspec.implementations.local import LocalFileSystem

from muster.core import context as core_context
from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.observe import sampler as sampler_mod
from muster.train._internal import events, resume
from muster.train.checkpoint import Checkpoint
from muster.train.context import TrainContext
from muster.train.storage import Storage, checkpoint_dir_name, folder_files, is_run_entry

_log = logging.getLogger(__name__)

#: Ray's ``report(checkpoint_upload_fn=)``: (checkpoint, checkpoint_dir_name) -> the checkpoint to keep
UploadFn = Callable[[Checkpoint, str], Checkpoint]
#: how a session's events reach the controller: ``send(payload, wait) -> reply``
SendFn = Callable[[Any, bool], Any]


def _to_driver(payload: Any, wait: bool) -> Any:
    """A worker's session: events go over the worker's channel to the driver."""
    return core_context.send_event(payload, wait=wait)


@dataclass
class SessionSpec:
    """Everything a worker needs to start an attempt (sent by the controller)."""

    context: TrainContext
    storage: Storage
    start_round: int
    checkpoint: Checkpoint | None
    resources: dict[str, float] = field(default_factory=dict)  # what each worker holds (ScalingConfig's)


class Session:
    def __init__(self, spec: SessionSpec, send: SendFn = _to_driver):
        """``send``: where events go; a local-mode run (``num_workers=0``) hands them to the controller in
        this process."""
        self.send = send
        self.context = spec.context
        self.storage = spec.storage
        self.round = spec.start_round
        self.checkpoint = spec.checkpoint
        self._lock = threading.Lock()
        self._uploads: queue.Queue[tuple | None] | None = None
        self._upload_thread: threading.Thread | None = None
        self._upload_error: BaseException | None = None
        resume.reset(_read_resume_state(spec.checkpoint, spec.context.world_rank))

    def report(self, metrics: dict[str, Any], checkpoint: Checkpoint | None, upload_mode: str = "sync",
               upload_fn: UploadFn | None = None, delete_local: bool | None = None) -> None:
        """``delete_local``: Ray's ``delete_local_checkpoint_after_upload``; None (the default) is False,
        where Ray's is True under ``"async"`` (muster snapshots the folder, so the caller may delete it)."""
        clean = _plain_metrics(metrics)
        if upload_fn is not None and not callable(upload_fn):
            raise InvalidTypeError(
                f"report(checkpoint_upload_fn={upload_fn!r}): pass a function (checkpoint, checkpoint_dir_name) "
                "-> Checkpoint, or leave it out."
            )
        mode = _upload_mode(upload_mode)
        if checkpoint is not None and not isinstance(checkpoint, Checkpoint):
            raise InvalidTypeError(
                f"report(checkpoint={checkpoint!r}): pass a muster.train.Checkpoint, e.g. "
                "Checkpoint.from_directory(folder)."
            )
        original = checkpoint if delete_local else None
        if original is not None:
            _check_deletable(original, self.storage)
        if checkpoint is not None:
            checkpoint = _outside_run_folder(checkpoint, self.storage)
        with self._lock:
            self._raise_upload_error()
            self.round += 1
            sampler = sampler_mod.current()
            timing = sampler.on_report() if sampler is not None else None
            item = (self.round, clean, checkpoint, resume.book().capture(), time.time(), timing)
            uploads_later = mode == "async" and checkpoint is not None
            # The controller learns at once that this rank reports this round (however long the
            # upload takes), and of a pending async upload, which a failure elsewhere waits for.
            self.send(events.ReportStarted(self.context.world_rank, self.round, uploads_later), False)
            if uploads_later and checkpoint is not None:
                self._start_uploader()
                assert self._uploads is not None
                if upload_fn is None:  # snapshot now: the caller may rewrite the folder once report returns
                    self._uploads.put(((*item[:2], _snapshot(checkpoint), *item[3:]), {"owned": True}))
                    _discard_if_temporary(checkpoint)
                    _delete_local(original)  # its files are in the snapshot
                else:  # the files are the function's to finish (Ray: e.g. waiting for an async_save)
                    self._uploads.put((item, {"upload_fn": upload_fn, "delete_after": original}))
                return
            self.drain()
            try:
                self._send(*item, upload_fn=upload_fn)
            finally:
                _discard_if_temporary(checkpoint)
            _delete_local(original)

    def continue_after(self, round_: int) -> None:
        """The driver recorded rounds up to ``round_`` as this rank's (the reports of a trainer that
        this function fit inside a Tune trial are the trial's): the next report takes the round after."""
        with self._lock:
            self.round = max(self.round, round_)

    def _send(self, round_index: int, metrics: dict[str, Any], checkpoint: Checkpoint | None, state: bytes,
              t: float, timing: dict[str, float] | None, owned: bool = False,
              upload_fn: UploadFn | None = None, delete_after: Checkpoint | None = None) -> None:
        files = None
        if checkpoint is not None and upload_fn is not None:
            checkpoint = _run_upload_fn(upload_fn, checkpoint, checkpoint_dir_name(round_index))
        if checkpoint is not None:
            with checkpoint.as_directory() as folder:
                files = self.storage.upload_dir(folder, self.storage.staging_dir(round_index))
            if owned:
                shutil.rmtree(checkpoint.path, ignore_errors=True)
        self.send(events.Report(self.context.world_rank, round_index, metrics, files, state, t, timing), True)
        if checkpoint is not None:  # Ray: get_checkpoint() becomes the checkpoint this rank last reported
            self.checkpoint = Checkpoint(self.storage.checkpoint_dir(round_index), self.storage.fs)
        _delete_local(delete_after)

    # -- async uploads: one thread, first in first out, so commits keep their order --
    def _start_uploader(self) -> None:
        if self._upload_thread is None:
            self._uploads = queue.Queue()
            self._upload_thread = threading.Thread(target=self._upload_forever, name="muster-upload", daemon=True)
            self._upload_thread.start()

    def _upload_forever(self) -> None:
        assert self._uploads is not None
        while True:
            item = self._uploads.get()
            try:
                if item is None:
                    continue
                args, kwargs = item
                if self._upload_error is not None:  # an earlier round failed: later ones are not sent
                    _tell_failed(self.send, self.context.world_rank, args[0], self._upload_error)
                    continue
                self._send(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - surfaced at the next report() or at the end
                self._upload_error = exc
                if item is not None:
                    _tell_failed(self.send, self.context.world_rank, item[0][0], exc)
            finally:
                self._uploads.task_done()

    def drain(self) -> None:
        """Wait for pending async uploads; raise the first one that failed."""
        if self._uploads is not None:
            self._uploads.join()
        self._raise_upload_error()

    def _raise_upload_error(self) -> None:
        if self._upload_error is not None:
            err, self._upload_error = self._upload_error, None
            raise RuntimeError(f"an asynchronous checkpoint upload failed: {err}") from err


def _run_upload_fn(upload_fn: UploadFn, checkpoint: Checkpoint, name: str) -> Checkpoint:
    """Ray's ``checkpoint_upload_fn``: called before muster copies the files, with the checkpoint
    and its folder's name; what it returns is the checkpoint muster copies."""
    out = upload_fn(checkpoint, name)
    if not isinstance(out, Checkpoint):
        raise InvalidTypeError(
            f"report(checkpoint_upload_fn={getattr(upload_fn, '__name__', upload_fn)!r}) returned {out!r}; "
            "it must return a muster.train.Checkpoint: the one it was given, or one where it put the files."
        )
    return out


def _tell_failed(send: SendFn, rank: int, round_index: int, exc: BaseException) -> None:
    try:
        send(events.UploadFailed(rank, round_index, str(exc)), False)
    except Exception:  # noqa: BLE001 - the driver may be gone too; the error is raised in report()
        pass


def _discard_if_temporary(checkpoint: Checkpoint | None) -> None:
    """Remove a folder muster itself made (``Checkpoint.from_dict``) once its files are safe."""
    if checkpoint is not None and getattr(checkpoint, "_temporary", False):
        shutil.rmtree(checkpoint.path, ignore_errors=True)


def _delete_local(checkpoint: Checkpoint | None) -> None:
    """Ray's ``delete_local_checkpoint_after_upload=True``: remove the reported folder once its files are
    safe (copied, or snapshotted under ``"async"``); a failure to remove it is logged, not raised, as in Ray."""
    if checkpoint is None:
        return
    try:
        checkpoint.filesystem.rm(checkpoint.path, recursive=True)
    except FileNotFoundError:
        pass
    except Exception as exc:  # noqa: BLE001 - the checkpoint is committed; only the local copy is left
        _log.warning("could not delete the local checkpoint %s after its upload: %s", checkpoint.path, exc)


def _check_deletable(checkpoint: Checkpoint, storage: Storage) -> None:
    """Refuse to delete a folder that holds the run's own folder, as Ray refuses it."""
    if not (checkpoint.is_local and storage.is_local):
        return
    folder = os.path.realpath(checkpoint.path).rstrip(os.sep) + os.sep
    if (os.path.realpath(storage.run_dir).rstrip(os.sep) + os.sep).startswith(folder):
        raise InvalidArgumentError(
            f"report(checkpoint=Checkpoint(path={checkpoint.path!r}), delete_local_checkpoint_after_upload=True) "
            f"would delete the run's own folder {storage.run_dir!r}, which that folder holds. Save the checkpoint "
            "in a folder of its own (tempfile.mkdtemp()), or pass delete_local_checkpoint_after_upload=False."
        )


def _upload_mode(mode: Any) -> str:
    value = str(getattr(mode, "name", mode)).lower()
    if value not in ("sync", "async"):
        raise InvalidArgumentError(f"report(checkpoint_upload_mode={mode!r}): use 'sync' (default) or 'async'.")
    return value


def _snapshot(checkpoint: Checkpoint, skip_top: Callable[[str], bool] | None = None) -> Checkpoint:
    """A private copy of the checkpoint's files, made at once (hard links when possible),
    so the caller may delete its folder as soon as report() returns."""
    dest = tempfile.mkdtemp(prefix="muster-async-")
    with checkpoint.as_directory() as folder:
        for src, rel in folder_files(folder, skip_top):
            dst = os.path.join(dest, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            try:
                os.link(src, dst)
            except OSError:
                shutil.copy2(src, dst)
    return Checkpoint(dest, LocalFileSystem())


def _outside_run_folder(checkpoint: Checkpoint, storage: Storage) -> Checkpoint:
    """The checkpoint to upload. The run's own folder (``Checkpoint.from_directory(get_trial_dir())``)
    gives its files less muster's entries (its checkpoints, the staging area), which would otherwise
    be copied into the run again at every report, as Ray's copy of a trial folder leaves them out. A
    folder that holds the run folder is refused."""
    if not (checkpoint.is_local and storage.is_local):
        return checkpoint
    folder = os.path.realpath(checkpoint.path)
    run_dir = os.path.realpath(storage.run_dir)
    if run_dir == folder:
        own = _snapshot(checkpoint, is_run_entry)
        own._temporary = True  # removed once uploaded
        return own
    if not run_dir.startswith(folder.rstrip(os.sep) + os.sep):
        return checkpoint
    raise InvalidArgumentError(
        f"report(checkpoint=Checkpoint(path={checkpoint.path!r})): that folder holds the run's own folder "
        f"{storage.run_dir!r}, so each report would copy the run, its earlier checkpoints included, into the "
        "new checkpoint. Save the checkpoint's files in a folder of their own, e.g. "
        "`with tempfile.TemporaryDirectory() as tmp: torch.save(state, os.path.join(tmp, 'model.pt')); "
        "report(metrics, checkpoint=Checkpoint.from_directory(tmp))`."
    )


def _read_resume_state(checkpoint: Checkpoint | None, rank: int) -> dict[str, Any] | None:
    """This rank's saved resume state, or the lowest rank's loader positions."""
    if checkpoint is None:
        return None
    fs, root = checkpoint.filesystem, checkpoint.path.rstrip("/")
    own = f"{root}/{resume.state_file(rank)}"
    try:
        if fs.exists(own):
            with fs.open(own, "rb") as f:
                return resume.load(f.read(), own_rng=True)
        others = sorted(fs.glob(f"{root}/{resume.STATE_DIR}/rank_*.pt"))
        if others:
            with fs.open(others[0], "rb") as f:
                return resume.load(f.read(), own_rng=False)
    except FileNotFoundError:
        pass
    return None


def _plain_metrics(metrics: Any) -> dict[str, Any]:
    """The metrics to send: 0-d and one-element tensors and numpy scalars become numbers (as
    Python's own), keys become strings, tuples lists; other values (arrays, sets, dates, objects
    of the user's) are kept as they are, as in Ray: ``Result.metrics`` holds them, and the logs
    on disk hold what JSON can (``core.serialization.json_default``). Tensors are sent detached,
    on the CPU, so the driver can read them."""
    if not isinstance(metrics, dict):
        shown = repr(metrics)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise InvalidTypeError(  # Ray 2.60 takes report(3) and drops it (Result.metrics is None)
            f"report(metrics={shown}): report takes a dict, got {type(metrics).__name__}; give each value a name, "
            f"e.g. report({{'loss': 0.1}})."
        )
    return {str(k): _plain(v) for k, v in metrics.items()}


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)  # NaN and inf stay floats (result.json writes them as NaN / Infinity)
    shape = getattr(value, "shape", None)
    if hasattr(value, "item") and isinstance(shape, tuple) and math.prod(shape) == 1:
        return _plain(value.item())
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    detach = getattr(value, "detach", None)
    if callable(detach) and hasattr(value, "cpu"):  # a tensor: no graph, nor a device the driver lacks
        return detach().cpu()
    return value


_session: Session | None = None


def set_session(session: Session | None) -> None:
    global _session
    _session = session


def current_session() -> Session | None:
    """This worker's training session, or None outside one."""
    return _session


def get_session(api: str) -> Session:
    if _session is None:
        raise RuntimeError(
            f"muster.train.{api}() works only inside train_loop_per_worker while a Trainer runs it; "
            "it was called outside a training worker."
        )
    return _session

