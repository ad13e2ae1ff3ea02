"""Ray's file-based extension points: ``FileBasedDatasource`` (a source that reads files one stream at a
time), ``RowBasedFileDatasink`` / ``BlockBasedFileDatasink`` (sinks that write a file per row / per write
task) and ``FilenameProvider`` (how those files are named).

A source subclass defines ``_read_stream(f, path)``, yielding blocks (pyarrow Tables or pandas
DataFrames) from one open file; muster finds the files (as its ``read_*`` do: folders, globs, URLs,
``file_extensions``, ``partition_filter``, ``shuffle``, ``ignore_missing_paths``) when the source is
made, and each read task reads its share of them. A sink subclass defines ``write_row_to_file(row,
file)`` or ``write_block_to_file(block, file)``; ``file`` is a pyarrow ``NativeFile`` in both, as in Ray.
"""

from __future__ import annotations

import contextlib
import posixpath
import uuid
from typing import Any, Iterable, Iterator, Optional

import pyarrow as pa

from muster.data import block as blk
from muster.data.block import Block, BlockAccessor, BlockMetadata
from muster.data.datasource.datasink import Datasink, TaskContext
from muster.data.datasource.datasource import Datasource, ReadTask, as_block
from muster.exceptions import InvalidArgumentError


class FileBasedDatasource(Datasource):
    """Files read one stream at a time (Ray's ``ray.data.datasource.FileBasedDatasource``): subclass it,
    call ``super().__init__(paths, ...)`` and define ``_read_stream(f, path)``. ``paths``, ``filesystem``,
    ``partition_filter``, ``ignore_missing_paths``, ``shuffle``, ``include_paths`` and ``file_extensions``
    are the ``read_*`` functions' options; ``open_stream_args={"compression": ...}`` opens each file
    decompressed (default: by its suffix). Ray's ``schema`` and ``meta_provider`` are accepted, unused."""

    def __init__(self, paths: str | list[str], *, filesystem: Any = None, schema: Any = None,
                 open_stream_args: Optional[dict[str, Any]] = None, meta_provider: Any = None,
                 partition_filter: Any = None, partitioning: Any = None, ignore_missing_paths: bool = False,
                 shuffle: Any = None, include_paths: bool = False, file_extensions: Optional[list[str]] = None):
        from muster.data import sources

        super().__init__()
        if partitioning is not None:
            raise InvalidArgumentError(f"{type(self).__name__}(partitioning={partitioning!r}): not supported here; "
                                       "read the partition values from each path in _read_stream.")
        options = sources.FileOptions.of(include_paths, {
            "file_extensions": file_extensions, "arrow_open_stream_args": open_stream_args,
            "partition_filter": partition_filter, "ignore_missing_paths": ignore_missing_paths, "shuffle": shuffle})
        self._filesystem, files, _ = sources.resolve(paths, filesystem, None, type(self).__name__, options)
        self._paths, self._sizes = [p for p, _ in files], [s for _, s in files]
        self._include_paths = options.include_paths
        self._open_stream_args = dict(open_stream_args or {})

    def estimate_inmemory_data_size(self) -> Optional[int]:
        """The files' total size."""
        return sum(self._sizes)

    def get_read_tasks(self, parallelism: int, per_task_row_limit: Optional[int] = None,
                       data_context: Any = None) -> list[ReadTask]:
        """``parallelism`` tasks at most (one per file at most), each reading a run of the files in order."""
        n = max(1, min(parallelism, len(self._paths)))
        bounds = [len(self._paths) * i // n for i in range(n + 1)]
        tasks = []
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            paths = self._paths[lo:hi]
            meta = BlockMetadata(num_rows=None, size_bytes=sum(self._sizes[lo:hi]), exec_stats=None,
                                 input_files=tuple(paths))
            tasks.append(ReadTask(_ReadFiles(self, paths), meta, per_task_row_limit=per_task_row_limit))
        return tasks

    def _open_input_source(self, filesystem: Any, path: str, **open_args: Any) -> pa.NativeFile:
        """``path`` opened for reading, as a pyarrow ``NativeFile`` (``filesystem``: an fsspec one)."""
        compression = open_args.get("compression", "infer")
        return pa.PythonFile(filesystem.open(path, "rb", compression=compression), mode="r")

    def _read_stream(self, f: pa.NativeFile, path: str) -> Iterator[Block]:
        """The blocks in one file; ``f`` is it, open."""
        raise NotImplementedError(f"{type(self).__name__}: a FileBasedDatasource subclass defines "
                                  "_read_stream(self, f, path), yielding the file's blocks.")

    def _rows_per_file(self) -> Optional[int]:
        return None

    @property
    def supports_distributed_reads(self) -> bool:
        return True


class _ReadFiles:
    """One read task's function: each of ``paths`` opened in turn and read by the source's ``_read_stream``."""

    def __init__(self, source: FileBasedDatasource, paths: list[str]):
        self.source, self.paths = source, paths

    def __call__(self) -> Iterator[Block]:
        from muster.data import sources

        src = self.source
        for path in self.paths:
            with src._open_input_source(src._filesystem, path, **src._open_stream_args) as f:
                for block in src._read_stream(f, path):
                    yield sources.with_path(as_block(block, f"{type(src).__name__}._read_stream"), path) \
                        if src._include_paths else block


class FilenameProvider:
    """How a file sink names its files (Ray's ``ray.data.datasource.FilenameProvider``): override
    ``get_filename_for_task(write_uuid, task_index)``; the default is
    ``[{dataset_uuid}_]{write_uuid}_{task_index:06}[.{file_format}]``. A row-based sink adds
    ``_{block_index:06}_{row_index:06}`` before the extension."""

    def __init__(self, dataset_uuid: Optional[str] = None, file_format: Optional[str] = None):
        self.dataset_uuid, self.file_format = dataset_uuid, file_format

    def get_filename_for_task(self, write_uuid: str, task_index: int) -> str:
        prefix = f"{self.dataset_uuid}_" if self.dataset_uuid is not None else ""
        return f"{prefix}{write_uuid}_{task_index:06}" + (f".{self.file_format}" if self.file_format else "")


class _FileDatasink(Datasink[None]):
    """Files under ``path`` (a folder or URL; ``filesystem``: pyarrow's or fsspec's), written by the
    subclass into pyarrow ``NativeFile`` s. ``mode`` is Ray's ``SaveMode`` (or its value): when the
    folder already exists, "append" (default) adds files, "overwrite" empties it first, "ignore" writes
    nothing, "error" raises. ``open_stream_args={"compression": ...}`` compresses each file."""

    def __init__(self, path: str, *, filesystem: Any = None, try_create_dir: bool = True,
                 open_stream_args: Optional[dict[str, Any]] = None,
                 filename_provider: Optional[FilenameProvider] = None,
                 dataset_uuid: Optional[str] = None, file_format: Optional[str] = None, mode: Any = "append"):
        from muster.core.filesystem import as_fsspec, url_to_fs
        from muster.data.writers import SaveMode

        fs = as_fsspec(filesystem, f"{type(self).__name__}(filesystem=)")
        self.filesystem, self.path = (fs, path) if fs is not None else url_to_fs(path)
        self.path, self.unresolved_path, self.try_create_dir = self.path.rstrip("/"), path, try_create_dir
        self.mode = SaveMode(str(getattr(mode, "value", mode)).lower())
        self.open_stream_args = dict(open_stream_args or {})
        self.filename_provider = filename_provider or FilenameProvider(dataset_uuid, file_format)
        self.file_format, self.write_uuid = file_format, uuid.uuid4().hex[:16]
        self._skip_write = False

    def on_write_start(self, schema: Optional[pa.Schema] = None) -> None:
        """Apply ``mode`` to a folder that exists; make it otherwise. The hidden files that writers killed
        mid-write left in it are removed first (``writers.remove_dead_writers_files``)."""
        from muster.data.writers import remove_dead_writers_files

        remove_dead_writers_files(self.filesystem, self.path)
        if self.filesystem.exists(self.path):
            if self.mode.value in ("error", "create"):
                raise InvalidArgumentError(f"{type(self).__name__}: {self.unresolved_path!r} already exists; pick "
                                           "another path, or mode='overwrite' / 'append' / 'ignore'.")
            if self.mode.value == "ignore":
                self._skip_write = True
                return
            if self.mode.value == "overwrite":
                self.filesystem.rm(self.path, recursive=True)
        if self.try_create_dir:
            self.filesystem.makedirs(self.path, exist_ok=True)

    def write(self, blocks: Iterable[Block], ctx: TaskContext) -> None:
        """The task's blocks as one, to ``write_block``; a stream it opened and left open is finished
        when it returns (whole), or dropped when it raises (absent)."""
        table = blk.concat([as_block(b, type(self).__name__) for b in blocks])
        if self._skip_write or not table.num_rows:
            return
        self._streams: list[_WholeStream] = []  # this task's (each task writes with its own copy of the sink)
        try:
            self.write_block(BlockAccessor(table), 0, ctx)
        except BaseException as exc:
            for stream in self._streams:
                stream.abort(exc)
            raise
        for stream in self._streams:
            stream.close()

    def write_block(self, block: BlockAccessor, block_index: int, ctx: TaskContext) -> None:
        raise NotImplementedError

    def _task_filename(self, ctx: TaskContext) -> str:
        return self.filename_provider.get_filename_for_task(self.write_uuid, ctx.task_idx)

    def open_output_stream(self, path: str) -> pa.NativeFile:
        """File ``path`` (under the sink's folder, or a name in it), open for writing as a pyarrow
        ``NativeFile``, whole or absent: the bytes go to a hidden ``.<name>.partial-<host>-<pid>``
        (``writers.whole_file``) renamed to ``path`` when the file is closed (or its ``with`` block ends, or
        the write task returns); removed if the block or the task raises first."""
        stream = _WholeStream.open(self.filesystem, posixpath.join(self.path, path),
                                   self.open_stream_args.get("compression"))
        self.__dict__.setdefault("_streams", []).append(stream)
        return stream

    @property
    def supports_distributed_writes(self) -> bool:
        return True


class _WholeStream(pa.PythonFile):
    """A sink's output file as a pyarrow ``NativeFile`` that is whole or absent (``writers.whole_file``):
    :meth:`close` (or a ``with`` block that ends normally) gives it its name; :meth:`abort` (or a ``with``
    block that raises) removes it."""

    _whole: Any
    _ended: bool

    @classmethod
    def open(cls, fs: Any, path: str, compression: Optional[str]) -> "_WholeStream":
        from muster.data.writers import whole_file

        whole = whole_file(fs, path, compression)
        stream = cls(whole.__enter__(), mode="w")
        stream._whole, stream._ended = whole, False
        return stream

    def close(self) -> None:
        """Flush and name the file (once)."""
        if self._ended:
            return
        self._ended = True
        try:
            super().close()
        except BaseException as exc:
            self._whole.__exit__(type(exc), exc, exc.__traceback__)
            raise
        self._whole.__exit__(None, None, None)

    def abort(self, error: BaseException) -> None:
        """Drop the file: nothing is left under its name or the hidden one (once; not after close)."""
        if self._ended:
            return
        self._ended = True
        with contextlib.suppress(Exception):
            super().close()
        self._whole.__exit__(type(error), error, error.__traceback__)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc is not None:
            self.abort(exc)
        self.close()


class RowBasedFileDatasink(_FileDatasink):
    """One file per row (Ray's ``RowBasedFileDatasink``): define ``write_row_to_file(row, file)``; ``row``
    is a dict (a tensor column's value an ndarray), ``file`` a pyarrow ``NativeFile``."""

    def write_row_to_file(self, row: dict[str, Any], file: pa.NativeFile) -> None:
        raise NotImplementedError(f"{type(self).__name__}: a RowBasedFileDatasink subclass defines "
                                  "write_row_to_file(self, row, file).")

    def write_block(self, block: BlockAccessor, block_index: int, ctx: TaskContext) -> None:
        base, ext = posixpath.splitext(self._task_filename(ctx))
        for row_index, row in enumerate(block.iter_rows(public_row_format=False)):
            with self.open_output_stream(f"{base}_{block_index:06}_{row_index:06}{ext}") as file:
                self.write_row_to_file(row, file)


class BlockBasedFileDatasink(_FileDatasink):
    """One file per write task (Ray's ``BlockBasedFileDatasink``): define ``write_block_to_file(block,
    file)``; ``block`` is a :class:`~muster.data.block.BlockAccessor`. ``min_rows_per_file`` gathers
    blocks until a task has that many rows."""

    def __init__(self, path: str, *, min_rows_per_file: Optional[int] = None, **file_datasink_kwargs: Any):
        super().__init__(path, **file_datasink_kwargs)
        self._min_rows_per_file = min_rows_per_file

    def write_block_to_file(self, block: BlockAccessor, file: pa.NativeFile) -> None:
        raise NotImplementedError(f"{type(self).__name__}: a BlockBasedFileDatasink subclass defines "
                                  "write_block_to_file(self, block, file).")

    def write_block(self, block: BlockAccessor, block_index: int, ctx: TaskContext) -> None:
        with self.open_output_stream(self._task_filename(ctx)) as file:
            self.write_block_to_file(block, file)

    @property
    def min_rows_per_write(self) -> Optional[int]:
        return self._min_rows_per_file


class ImageDatasink(RowBasedFileDatasink):
    """``Dataset.write_images``: each row's ``column`` (an image array) saved by Pillow as ``file_format``."""

    def __init__(self, path: str, column: str, file_format: str, **file_datasink_kwargs: Any):
        super().__init__(path, file_format=file_format, **file_datasink_kwargs)
        self.column = column

    def on_write_start(self, schema: Optional[pa.Schema] = None) -> None:
        if schema is not None and self.column not in schema.names:
            raise InvalidArgumentError(f"write_images(column={self.column!r}): no column {self.column!r}; the "
                                       f"dataset has {schema.names}.")
        super().on_write_start(schema)

    def write_row_to_file(self, row: dict[str, Any], file: pa.NativeFile) -> None:
        import io

        from PIL import Image

        buffer = io.BytesIO()
        Image.fromarray(row[self.column]).save(buffer, format=self.file_format)
        file.write(buffer.getvalue())
