"""Filesystems as muster works with them: fsspec's, made from what users pass (Ray takes pyarrow's)."""

from __future__ import annotations

from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from muster.exceptions import InvalidTypeError


def as_fsspec(filesystem: Any, what: str = "storage_filesystem") -> Any:
    """``filesystem`` as the fsspec filesystem muster works with: an fsspec one as it is; a pyarrow
    one (what Ray takes: ``pyarrow.fs.S3FileSystem(...)``, ``LocalFileSystem()``) wrapped."""
    if filesystem is None or isinstance(filesystem, fsspec.AbstractFileSystem):
        return filesystem
    import pyarrow.fs as pafs

    if isinstance(filesystem, pafs.LocalFileSystem):
        return LocalFileSystem()
    if isinstance(filesystem, pafs.FileSystem):
        from fsspec.implementations.arrow import ArrowFSWrapper

        return ArrowFSWrapper(filesystem)
    raise InvalidTypeError(f"{what}={filesystem!r}: pass a pyarrow.fs.FileSystem (as Ray takes) or an fsspec "
                           "filesystem, or leave it out to infer one from the path's URL (s3://..., gs://...).")
