"""``Checkpoint``: a folder of files, on local disk or in storage.

Ray's API: ``from_directory``, ``as_directory``, ``to_directory``, ``path``,
``filesystem``, metadata, and the dict helpers the seeds use
(``from_dict`` / ``to_dict``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from typing import Any, Iterator

import fsspec
from fsspec.implementations.local import LocalFileSystem

from muster.core.filesystem import as_fsspec, filesystem_name, shown_path, url_to_fs
from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.train._internal.resume import STATE_DIR
from muster.train.storage import MANIFEST

_METADATA = ".metadata.json"
_DICT_FILE = "dict_checkpoint.pt"
_INTERNAL = (MANIFEST, _METADATA, STATE_DIR)


class Checkpoint:
    """A checkpoint: the folder at ``path`` on ``filesystem``.

    Args:
        path: the folder (a local path, or a path/URL on ``filesystem``).
        filesystem: a pyarrow (as in Ray) or fsspec filesystem; inferred from ``path`` when omitted.
            ``checkpoint.filesystem`` is the fsspec one muster works with.
    """

    def __init__(self, path: str | os.PathLike, filesystem: Any = None):
        where = str(os.fspath(path))
        filesystem = as_fsspec(filesystem, "Checkpoint(filesystem=)")
        if filesystem is None:
            filesystem, where = url_to_fs(where)
        self.path: str = where
        self.filesystem = filesystem
        self._temporary = False

    # -- constructors --------------------------------------------------------
    @classmethod
    def from_directory(cls, path: str | os.PathLike) -> "Checkpoint":
        """A checkpoint of the files in a local folder (copied when reported)."""
        if not isinstance(path, (str, os.PathLike)):
            raise InvalidTypeError(f"Checkpoint.from_directory({path!r}): pass the folder's path, a str or "
                                   "pathlib.Path, e.g. Checkpoint.from_directory(tempfile.mkdtemp()).")
        path = os.fspath(path)
        if not os.path.isdir(path):
            what = "a file, not a folder" if os.path.exists(path) else "no such folder"
            raise InvalidArgumentError(
                f"Checkpoint.from_directory({path!r}): {what}. Save your files into a folder "
                "(for example tempfile.mkdtemp()) and pass that folder."
            )
        return cls(os.path.abspath(path), LocalFileSystem())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Checkpoint":
        """A checkpoint holding one dict (tensors included), saved with ``torch.save``."""
        if not isinstance(data, dict):
            raise InvalidTypeError(f"Checkpoint.from_dict expects a dict, got {type(data).__name__}.")
        import torch

        folder = tempfile.mkdtemp(prefix="muster-ckpt-")
        torch.save(data, os.path.join(folder, _DICT_FILE))
        ckpt = cls(folder, LocalFileSystem())
        ckpt._temporary = True  # muster made this folder: report() removes it once uploaded
        return ckpt

    # -- reading -------------------------------------------------------------
    @property
    def is_local(self) -> bool:
        return isinstance(self.filesystem, LocalFileSystem)

    def to_dict(self) -> dict[str, Any]:
        """Load a checkpoint made by ``from_dict``."""
        import torch

        with self.as_directory() as folder:
            target = os.path.join(folder, _DICT_FILE)
            if not os.path.exists(target):
                raise InvalidArgumentError(
                    f"{self!r} was not made by Checkpoint.from_dict (no {_DICT_FILE} in it); "
                    "read its files with checkpoint.as_directory()."
                )
            return torch.load(target, map_location="cpu", weights_only=False)

    def to_directory(self, path: str | os.PathLike | None = None) -> str:
        """Copy the files into a local folder (a new temporary one by default); return it."""
        dest = os.fspath(path) if path is not None else tempfile.mkdtemp(prefix="muster-ckpt-")
        os.makedirs(dest, exist_ok=True)
        if self.is_local:
            shutil.copytree(self.path, dest, dirs_exist_ok=True)
        else:
            for src in self.filesystem.find(self.path):
                rel = src[len(self.path.rstrip("/")) + 1 :]
                local = os.path.join(dest, rel)
                os.makedirs(os.path.dirname(local), exist_ok=True)
                self.filesystem.get_file(src, local)
        return dest

    @contextlib.contextmanager
    def as_directory(self) -> Iterator[str]:
        """Yield a local folder with the files: the folder itself when local
        (do not modify it), else a temporary download removed afterwards."""
        if self.is_local:
            yield self.path
            return
        folder = self.to_directory()
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    # -- metadata --------------------------------------------------------------
    def get_metadata(self) -> dict[str, Any]:
        target = f"{self.path.rstrip('/')}/{_METADATA}"
        if not self.filesystem.exists(target):
            return {}
        with self.filesystem.open(target, "r") as f:
            return json.load(f)

    def set_metadata(self, metadata: dict[str, Any]) -> None:
        try:
            body = json.dumps(metadata)
        except TypeError as exc:
            raise InvalidTypeError(f"Checkpoint metadata must be JSON-serialisable: {exc}") from None
        with self.filesystem.open(f"{self.path.rstrip('/')}/{_METADATA}", "w") as f:
            f.write(body)

    def update_metadata(self, metadata: dict[str, Any]) -> None:
        merged = self.get_metadata()
        merged.update(metadata)
        self.set_metadata(merged)

    # -- identity --------------------------------------------------------------
    def __repr__(self) -> str:
        # Ray's form; the path is a URL where fsspec opens one again (s3://...), else the path within its filesystem
        where = shown_path(self.filesystem, self.path)
        return f"Checkpoint(filesystem={filesystem_name(self.filesystem)}, path={where})"

    def __fspath__(self) -> str:
        return self.path

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Checkpoint) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)
