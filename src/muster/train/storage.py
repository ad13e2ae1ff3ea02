"""Where a run's files live: a local folder or any fsspec URL.

Layout of a run folder::

    <storage_path>/<name>/
        .muster_run.json            run state (status, attempts, latest checkpoint)
        result.json                 every report of every rank, one JSON object a line
        checkpoint_000003/          a committed checkpoint
            .muster_manifest.json   written last: present = committed
            ...user files...
        .staging/checkpoint_000004/ files of a round not yet committed
        validations/checkpoint_000003.json
                                    a validation's outcome (ValidationConfig): status, metrics

A checkpoint is committed by writing its manifest into the staging folder
and renaming that folder into place: on a local disk the rename is atomic,
so a checkpoint folder appears complete or not at all.  On object stores,
which cannot rename atomically, the manifest is copied last and readers
ignore any checkpoint folder without one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import zlib
from typing import Any, Callable, Iterator, TypeVar

import fsspec
from fsspec.implementations.local import LocalFileSystem

from muster.core.filesystem import as_fsspec, fs_url, missing_credentials, shown_path, url_to_fs
from muster.core.serialization import json_default
from muster.core.temp_files import is_stale, is_temp_file, temp_name

MANIFEST = ".muster_manifest.json"
RUN_STATE = ".muster_run.json"
RESULTS = "result.json"
STAGING = ".staging"
VALIDATIONS = "validations"

T = TypeVar("T")

def _temp_path(path: str) -> str:
    """The hidden file a whole-file write (``_replace_whole``) fills before renaming it over ``path``, naming
    its writer (:mod:`muster.core.temp_files`), so that one a killed writer left is removed on reopen."""
    folder, name = os.path.split(path)
    return os.path.join(folder, temp_name(name))


def _remove_stale_temps(folder: str) -> list[str]:
    """Remove, under the local ``folder``, the temporary files of whole-file writes whose writer died
    (SIGKILL, a full disk, a power cut) before renaming them into place; return their paths. A file
    written on another host (a folder shared over NFS), or by a process of this host still running, is
    kept. Committed checkpoints (written by renaming a whole folder) are not searched."""
    removed = []
    for base, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if not is_checkpoint_dir(d)]
        for name in names:
            if not is_stale(name):
                continue
            with contextlib.suppress(FileNotFoundError):  # another restore removed it first
                os.remove(os.path.join(base, name))
                removed.append(os.path.join(base, name))
    return removed


def folder_files(folder: str, skip_top: Callable[[str], bool] | None = None) -> Iterator[tuple[str, str]]:
    """``(path, relative path with "/")`` of each regular file under ``folder``: what a checkpoint
    of that folder holds. Sockets, pipes and devices are left out, as Ray's copy leaves them (Ray's
    getting-started guide checkpoints the whole temp folder, where a running engine keeps its sockets;
    reading a pipe would block). ``skip_top(name)``: leave out these entries of ``folder`` itself. The
    temporary files of whole-file writes (a killed writer's, a live one's) are left out at every level."""
    for base, dirs, names in os.walk(folder):
        if skip_top is not None and base == folder:
            dirs[:] = [d for d in dirs if not skip_top(d)]
            names = [n for n in names if not skip_top(n)]
        for name in names:
            if is_temp_file(name):
                continue
            path = os.path.join(base, name)
            if os.path.isfile(path):
                yield path, os.path.relpath(path, folder).replace(os.sep, "/")


def checkpoint_dir_name(round_index: int) -> str:
    return f"checkpoint_{round_index:06d}"


def is_checkpoint_dir(name: str) -> bool:
    """Whether ``name``, in a run folder, is a checkpoint's folder (``checkpoint_000003``)."""
    return name.startswith("checkpoint_") and name[len("checkpoint_"):].isdigit()


def is_run_entry(name: str) -> bool:
    """Whether ``name``, in a run folder, is muster's own: a checkpoint, the staging area, validations,
    the run state (what a checkpoint of the run folder itself leaves out, as Ray's copy of a trial
    folder leaves out its checkpoints)."""
    return name in (STAGING, VALIDATIONS, RUN_STATE) or is_checkpoint_dir(name)


_PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, ValueError, TypeError)


def _retry(what: str, fn: Callable[[], T], attempts: int = 6, first_delay_s: float = 0.2) -> T:
    """Run a storage call, retrying transient errors (a store that is briefly
    unreachable, a dropped connection) with exponential backoff: 0.2 s, 0.4 s, ...
    Errors that retrying cannot fix (missing file, no permission, no credentials) raise at once."""
    delay = first_delay_s
    for i in range(attempts):
        try:
            return fn()
        except _PERMANENT:
            raise
        except Exception as exc:  # noqa: BLE001 - object stores raise many transient kinds
            refused = missing_credentials(exc, f"storage operation failed ({what})",
                                          "pass RunConfig(storage_filesystem=...) made with them")
            if refused is not None:
                raise refused from exc
            if i == attempts - 1:
                raise OSError(f"storage operation failed after {attempts} tries ({what}): {exc}") from exc
            time.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


class Storage:
    """One run folder on one filesystem. Picklable: workers get a copy."""

    def __init__(self, storage_path: str, name: str, filesystem: Any = None):
        filesystem = as_fsspec(filesystem)
        if filesystem is None:
            filesystem, root = url_to_fs(storage_path)
        else:
            root = filesystem._strip_protocol(storage_path)
        self.fs = filesystem
        self.root = root.rstrip("/") if root != "/" else root
        self.name = name
        self.run_dir = self.join(self.root, name)
        self.storage_path = storage_path

    @classmethod
    def at(cls, path: str, filesystem: Any = None) -> "Storage":
        """The run (or experiment) folder ``path``, i.e. ``<storage_path>/<name>``."""
        parent, name = path.rstrip("/").rsplit("/", 1)
        return cls(parent or "/", name, filesystem)

    def has(self, *names: str) -> bool:
        """Whether every one of ``names`` exists in the folder."""
        return all(self.exists(self.join(self.run_dir, n)) for n in names)

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, LocalFileSystem)

    @property
    def uri(self) -> str:
        """The run folder as a user can pass it back: a URL (``s3://...``), a local path, or (as Ray shows
        every path) the path within a filesystem that has no URL, such as a pyarrow ``SubTreeFileSystem``."""
        return shown_path(self.fs, self.run_dir)

    @property
    def root_uri(self) -> str:
        """The storage root as a URL (``s3://bucket/runs``) or a local path: where the run store is
        keyed, whether the root was given as a URL or as a path on a filesystem object (``subtree://...``
        too, unlike ``uri``: a key, never a local folder)."""
        return fs_url(self.fs, self.root)

    @staticmethod
    def join(*parts: str) -> str:
        return "/".join(p.rstrip("/") for p in parts if p)

    # -- small files ---------------------------------------------------------
    def exists(self, path: str) -> bool:
        """Whether ``path`` exists. An unreachable store raises (after retries) instead of
        answering False, as some fsspec backends' own ``exists`` does."""

        def probe() -> bool:
            try:
                self.fs.info(path)
                return True
            except FileNotFoundError:
                return False

        return _retry(f"exists {path}", probe)

    def read_json(self, path: str) -> Any:
        def read() -> Any:
            with self.fs.open(path, "r") as f:
                return json.load(f)

        return _retry(f"read {path}", read)

    def write_text(self, path: str, text: str) -> None:
        """Write a whole small file so that readers see the old or the new version."""

        def write() -> None:
            if self.is_local:
                _replace_whole(path, text.encode())
            else:
                with self._open_for_write(path, "w") as f:
                    f.write(text)

        _retry(f"write {path}", write)

    def read_bytes(self, path: str) -> bytes:
        def read() -> bytes:
            with self.fs.open(path, "rb") as f:
                data: bytes = f.read()
                return data

        return _retry(f"read {path}", read)

    def write_json(self, path: str, obj: Any) -> None:
        self.write_text(path, json.dumps(obj, indent=1, default=json_default))

    def _with_parent(self, path: str, write: Callable[[], T]) -> T:
        """``write()`` to ``path``; on a filesystem with real folders that fsspec's wrapper does not
        create (pyarrow's ``SubTreeFileSystem`` over a local disk, HDFS), a missing parent folder is
        made and the write tried again. Object stores have no folders: it never fails there."""
        try:
            return write()
        except FileNotFoundError:
            self.fs.makedirs(self.fs._parent(path), exist_ok=True)
            return write()

    def _open_for_write(self, path: str, mode: str) -> Any:
        return self._with_parent(path, lambda: self.fs.open(path, mode))

    def makedirs(self, path: str) -> None:
        _retry(f"mkdir {path}", lambda: self.fs.makedirs(path, exist_ok=True))

    def rm(self, path: str) -> None:
        def remove() -> None:
            if self.fs.exists(path):
                self.fs.rm(path, recursive=True)

        _retry(f"remove {path}", remove)

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(path, detail=False))
        except FileNotFoundError:
            return []

    # -- result.json: one JSON object a line, one report of one rank each ------------
    def read_results(self) -> list[str]:
        """The run's ``result.json`` lines (none when it has no file yet)."""
        path = self.join(self.run_dir, RESULTS)
        if not self.exists(path):
            return []

        def read() -> list[str]:
            with self.fs.open(path, "r") as f:
                return [line.rstrip("\n") for line in f if line.strip()]

        return _retry(f"read {path}", read)

    @staticmethod
    def parse_result(line: str) -> dict[str, Any]:
        """One ``result.json`` line as a row."""
        row: dict[str, Any] = json.loads(line)
        return row

    @staticmethod
    def format_result(row: str | dict[str, Any]) -> str:
        """One row as its ``result.json`` line (a line read back is kept as it was)."""
        return row if isinstance(row, str) else json.dumps(row, default=json_default)

    def append_results(self, new: list[Any], everything: list[Any]) -> None:
        """Add ``new`` rows to ``result.json``: appended on a local disk; on an object
        store (no append) the file is rewritten with ``everything``, ``new`` last."""
        path = self.join(self.run_dir, RESULTS)
        if self.is_local:

            def append() -> None:
                os.makedirs(self.run_dir, exist_ok=True)
                with open(path, "a") as f:
                    f.write("".join(self.format_result(row) + "\n" for row in new))

            _retry(f"append {path}", append)
        else:
            self.write_text(path, "".join(self.format_result(row) + "\n" for row in everything))

    def read_manifest(self, checkpoint_path: str) -> dict[str, Any]:
        """A committed checkpoint's manifest (files with sizes and checksums, ranks, metrics)."""
        manifest: dict[str, Any] = self.read_json(self.join(checkpoint_path, MANIFEST))
        return manifest

    def checkpoint_metrics(self, round_index: int,
                           manifest: dict[str, Any] | None = None) -> tuple[dict[str, Any], str]:
        """A committed checkpoint's metrics, with its validation's merged in, and its status
        (Ray's ``ReportedCheckpointStatus`` name: ``COMMITTED`` when no validation was asked for)."""
        if manifest is None:
            manifest = self.read_manifest(self.checkpoint_dir(round_index))
        metrics = dict(manifest.get("metrics", {}))
        if manifest.get("validation") is None:
            return metrics, "COMMITTED"
        path = self.validation_path(round_index)
        if not self.exists(path):
            return metrics, "PENDING_VALIDATION"
        outcome = self.read_json(path)
        metrics.update(outcome.get("metrics") or {})
        return metrics, str(outcome["status"])

    def validation_path(self, round_index: int) -> str:
        return self.join(self.run_dir, VALIDATIONS, checkpoint_dir_name(round_index) + ".json")

    def remove_stale_temp_files(self) -> list[str]:
        """Remove the temporary files that whole-file writes killed mid-write left in the run folder (a
        live writer's, or another host's, are kept); return their paths. Called when a run or experiment
        is opened again. Nothing to remove on an object store: an upload is published whole or not at all."""
        return _remove_stale_temps(self.run_dir) if self.is_local else []

    # -- checkpoint files ----------------------------------------------------
    def clear_staging(self) -> None:
        """Remove every staged file (called when no worker is running: between attempts)."""
        self.rm(self.join(self.run_dir, STAGING))

    def staging_dir(self, round_index: int) -> str:
        return self.join(self.run_dir, STAGING, checkpoint_dir_name(round_index))

    def checkpoint_dir(self, round_index: int) -> str:
        return self.join(self.run_dir, checkpoint_dir_name(round_index))

    def upload_dir(self, local_dir: str, dest: str) -> dict[str, dict[str, int]]:
        """Copy every file under ``local_dir`` into ``dest``.

        Returns ``{relpath: {"size": bytes, "crc32": checksum}}`` for the manifest.
        """
        files: dict[str, dict[str, int]] = {}
        for src, rel in folder_files(local_dir):
            target = self.join(dest, rel)
            if self.is_local:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                crc = _copy_with_crc(src, target)
            else:
                crc = _file_crc(src)
                _retry(f"upload {rel}", lambda s=src, t=target: self.fs.put_file(s, t))
            files[rel] = {"size": os.path.getsize(src), "crc32": crc}
        return files

    def write_bytes(self, path: str, data: bytes) -> None:
        """Write a whole file so that readers (``Tuner.restore`` after a crash) see the old or the new version."""

        def write() -> None:
            if self.is_local:
                _replace_whole(path, data)
                return
            with self._open_for_write(path, "wb") as f:  # an object store publishes an upload whole
                f.write(data)

        _retry(f"write {path}", write)

    def verify(self, checkpoint_path: str) -> list[str]:
        """Problems with a committed checkpoint (missing file, wrong size or checksum); [] if sound."""
        try:
            manifest = self.read_manifest(checkpoint_path)
        except (OSError, ValueError) as exc:
            return [f"manifest unreadable: {exc}"]
        problems = []
        for rel, meta in manifest.get("files", {}).items():
            path = self.join(checkpoint_path, rel)
            try:
                size = self.fs.size(path)
            except FileNotFoundError:
                problems.append(f"{rel}: missing")
                continue
            if meta.get("size") is not None and size != meta["size"]:
                problems.append(f"{rel}: {size} bytes, manifest says {meta.get('size')}")
                continue
            if "crc32" in meta:
                with self.fs.open(path, "rb") as f:
                    crc = _stream_crc(f)
                if crc != meta["crc32"]:
                    problems.append(f"{rel}: checksum mismatch")
        return problems

    def commit(self, round_index: int, manifest: dict[str, Any]) -> str:
        """Publish a staged checkpoint under its final name; return its path."""
        staged, final = self.staging_dir(round_index), self.checkpoint_dir(round_index)
        body = json.dumps(manifest, indent=1, default=json_default)
        if self.is_local:
            os.makedirs(staged, exist_ok=True)
            with open(os.path.join(staged, MANIFEST), "w") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            if os.path.exists(final):  # a leftover from an attempt that died mid-commit
                shutil.rmtree(final)
            os.rename(staged, final)
        else:  # object stores cannot rename: copy each file, then publish the manifest last
            prefix = staged.rstrip("/") + "/"
            for src in _retry("list staged files", lambda: self.fs.find(staged)):
                dst = self.join(final, src[len(prefix) :])
                _retry(f"commit {dst}", lambda s=src, d=dst: self._with_parent(d, lambda: self.fs.copy(s, d)))
            self.write_text(self.join(final, MANIFEST), body)
            self.rm(staged)
        return final

    def committed_rounds(self) -> list[int]:
        """Rounds that have a committed checkpoint, oldest first."""
        out = []
        for entry in self.listdir(self.run_dir):
            if is_checkpoint_dir(entry):
                if self.exists(self.join(self.run_dir, entry, MANIFEST)):
                    out.append(int(entry[11:]))
        return sorted(out)

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)


_CHUNK = 8 * 1024 * 1024


def _stream_crc(f: Any) -> int:
    crc = 0
    while True:
        chunk = f.read(_CHUNK)
        if not chunk:
            return crc
        crc = zlib.crc32(chunk, crc)


def _file_crc(path: str) -> int:
    with open(path, "rb") as f:
        return _stream_crc(f)


def _replace_whole(path: str, data: bytes) -> None:
    """Write ``data`` to the local file ``path`` whole or not at all: to a file beside it, synced to
    disk, then renamed over it, so a process killed or a disk filled mid-write leaves the old version."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = _temp_path(path)  # a writer killed mid-write leaves it: Storage.remove_stale_temp_files removes it
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def _copy_with_crc(src: str, dst: str) -> int:
    """Copy a file and checksum it in the same pass."""
    crc = 0
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        while True:
            chunk = fin.read(_CHUNK)
            if not chunk:
                return crc
            crc = zlib.crc32(chunk, crc)
            fout.write(chunk)
