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


#: The cloud SDKs' "this machine has no credentials" errors, by class name (so none of them is imported here):
#: botocore's (S3) and google-auth's (GCS). No retry finds credentials.
_NO_CREDENTIALS = frozenset({"NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError",
                             "DefaultCredentialsError"})


def missing_credentials(exc: BaseException, what: str, fix: str) -> PermissionError | None:
    """A ``PermissionError`` saying ``what`` failed and how to fix it, when ``exc`` says this machine has
    no credentials for the store; else None. ``fix`` ends the list of fixes (where a filesystem made
    with credentials can be passed instead)."""
    if not any(cls.__name__ in _NO_CREDENTIALS for cls in type(exc).__mro__):
        return None
    return PermissionError(
        f"{what}: this machine has no credentials for the store ({type(exc).__name__}: {exc}). Fix: give it "
        "credentials (S3: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE or ~/.aws/credentials; "
        f"GCS: GOOGLE_APPLICATION_CREDENTIALS), or {fix}."
    )


# the fsspec options of an unsigned (credential-less) client, per URL scheme
_ANONYMOUS: dict[str, dict[str, Any]] = {
    "s3": {"anon": True}, "s3a": {"anon": True}, "gs": {"token": "anon"}, "gcs": {"token": "anon"},
}


def url_to_fs(url: str) -> tuple[Any, str]:
    """(fsspec filesystem, path) for ``url``, as ``fsspec.core.url_to_fs``, also taking pyarrow's
    (and so Ray's) ``s3://anonymous@bucket/key`` form: a bucket read without credentials, as Ray's
    example data sets are (``gs://anonymous@...`` too)."""
    protocol, sep, rest = url.partition("://")
    anonymous = _ANONYMOUS.get(protocol.lower()) if sep and rest.startswith("anonymous@") else None
    if anonymous is not None:
        return fsspec.core.url_to_fs(f"{protocol}://{rest.removeprefix('anonymous@')}", **anonymous)
    return fsspec.core.url_to_fs(url)


def fs_url(filesystem: Any, path: str) -> str:
    """``path`` on ``filesystem`` as ``<protocol>://path`` (a local path as it is): a key naming the place."""
    if isinstance(filesystem, LocalFileSystem):
        return path
    protocol = filesystem.protocol[0] if isinstance(filesystem.protocol, (tuple, list)) else filesystem.protocol
    return f"{protocol}://{path}"


def filesystem_name(filesystem: Any) -> str:
    """A filesystem as Ray's reprs name it (pyarrow's ``type_name``: 'local', 's3', 'gcs'...); None is local."""
    if filesystem is None:
        return "local"
    if isinstance(getattr(filesystem, "type_name", None), str):  # a pyarrow filesystem
        return str(filesystem.type_name)
    protocol = getattr(filesystem, "protocol", "file")  # an fsspec one: a name or a tuple of names
    name = protocol[0] if isinstance(protocol, (tuple, list)) and protocol else protocol
    return {"file": "local", "local": "local", "gs": "gcs"}.get(str(name), str(name))


def shown_path(filesystem: Any, path: str) -> str:
    """``path`` on ``filesystem`` as muster shows it (``Result.path``, a checkpoint's repr): a URL
    (``s3://bucket/key``) when fsspec can open that URL again, else the path within the filesystem, as
    Ray shows every path (a local one; one on a pyarrow ``SubTreeFileSystem``, whose ``subtree://`` no
    filesystem takes back: pass the path with ``filesystem=`` instead)."""
    url = fs_url(filesystem, path)
    scheme, sep, _ = url.partition("://")
    return url if not sep or scheme in fsspec.available_protocols() else path
