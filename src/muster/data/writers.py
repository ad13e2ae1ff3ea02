"""``write_parquet`` / ``write_csv`` / ``write_json`` / ``write_numpy``: one file per output block, to a
folder or URL."""

from __future__ import annotations

import contextlib
import enum
import itertools
import os
import posixpath
import uuid
import warnings
from typing import Any, Callable, Iterator

import pyarrow as pa

from muster.core.temp_files import is_stale, temp_name
from muster.data import block as blk
from muster.exceptions import InvalidArgumentError, InvalidTypeError


class SaveMode(str, enum.Enum):
    """What ``write_*`` do when the folder already holds files (Ray's ``ray.data.SaveMode``)."""

    APPEND = "append"
    OVERWRITE = "overwrite"
    IGNORE = "ignore"
    ERROR = "error"
    CREATE = "create"  # as ERROR: the folder must not hold files yet


_MODES = tuple(m.value for m in SaveMode)

#: Ray's write options about its tasks, which change nothing here (one process writes the files).
RAY_TASK_OPTIONS = ("concurrency", "ray_remote_args", "try_create_dir")


def ray_write_options(options: dict[str, Any], fn_name: str, where: str,
                      pass_through: bool = False) -> tuple[dict[str, Any], str | None]:
    """Ray's write options in ``options``, taken apart: (the writer's own keyword arguments: what
    ``fn_name`` (Ray's ``arrow_parquet_args_fn`` and the like) returns, plus, with ``pass_through``,
    the other keywords; the output stream's compression from ``arrow_open_stream_args``).

    Raises:
        InvalidTypeError: a keyword that is none of those (without ``pass_through``).
    """
    options = {k: v for k, v in options.items() if k not in RAY_TASK_OPTIONS}
    compression = (options.pop("arrow_open_stream_args", None) or {}).get("compression")
    fn = options.pop(fn_name, None)
    if options and not pass_through:
        raise InvalidTypeError(f"{where}: unknown option(s) {sorted(options)}; Ray's {fn_name}, "
                               f"arrow_open_stream_args and {', '.join(RAY_TASK_OPTIONS)} are taken.")
    extra = fn() if fn is not None else {}
    if not isinstance(extra, dict):
        raise InvalidArgumentError(f"{where}: {fn_name} returned {extra!r}; "
                                   "it must return a dict of keyword arguments.")
    return {**options, **extra}, compression


class FileWrites:
    """``Dataset``'s file writers (Ray's ``write_parquet``, ``write_csv``, ``write_json``, ``write_numpy``,
    ``write_images``)."""

    def write_parquet(self, path: str, *, filesystem: Any = None, mode: Any = "append",
                      min_rows_per_file: int | None = None, partition_cols: list[str] | None = None,
                      num_rows_per_file: int | None = None, max_rows_per_file: int | None = None,
                      min_bytes_per_file: int | None = None, **arrow_args: Any) -> list[str]:
        """One Parquet file per output block under ``path`` (a folder or URL); returns the files written.

        ``mode``, ``min_rows_per_file`` (or its older name ``num_rows_per_file``), ``max_rows_per_file``,
        ``min_bytes_per_file`` (blocks gathered until their in-memory bytes reach it, none split; not with the
        row options, as Ray's) and ``partition_cols`` as in Ray (see ``writers.write_blocks``); other keywords,
        and what Ray's
        ``arrow_parquet_args_fn`` returns, go to ``pyarrow.parquet.write_table``. Ray's ``concurrency``,
        ``ray_remote_args`` and ``try_create_dir`` change nothing here; ``arrow_open_stream_args=
        {"compression": ...}`` compresses each file. ``filename_provider`` (a ``FilenameProvider``) names the
        files, as Ray's (see ``writers.provided_name``).
        """
        check_min_bytes(min_bytes_per_file, {"min_rows_per_file": min_rows_per_file, "num_rows_per_file":
                                             num_rows_per_file, "max_rows_per_file": max_rows_per_file})
        least = min_rows(min_rows_per_file, num_rows_per_file, "parquet")
        return write_dataset(self, "parquet", path, filesystem, mode, least,
                             max_rows_per_file, partition_cols, arrow_args, min_bytes=min_bytes_per_file)

    def write_csv(self, path: str, *, filesystem: Any = None, mode: Any = "append",
                  min_rows_per_file: int | None = None,
                  partition_cols: list[str] | None = None, num_rows_per_file: int | None = None,
                  max_rows_per_file: int | None = None, **ray_options: Any) -> list[str]:
        """As :meth:`write_parquet`; what Ray's ``arrow_csv_args_fn`` returns goes to ``pyarrow.csv.write_csv``."""
        least = min_rows(min_rows_per_file, num_rows_per_file, "csv")
        return write_dataset(self, "csv", path, filesystem, mode, least,
                             max_rows_per_file, partition_cols, ray_options)

    def write_json(self, path: str, *, filesystem: Any = None, mode: Any = "append",
                   min_rows_per_file: int | None = None,
                   partition_cols: list[str] | None = None, num_rows_per_file: int | None = None,
                   max_rows_per_file: int | None = None, **ray_options: Any) -> list[str]:
        """As :meth:`write_parquet`; what Ray's ``pandas_json_args_fn`` returns goes to ``DataFrame.to_json``."""
        least = min_rows(min_rows_per_file, num_rows_per_file, "json")
        return write_dataset(self, "json", path, filesystem, mode, least,
                             max_rows_per_file, partition_cols, ray_options)

    def write_numpy(self, path: str, *, column: str, filesystem: Any = None, mode: Any = "append",
                    min_rows_per_file: int | None = None, num_rows_per_file: int | None = None,
                    **ray_options: Any) -> list[str]:
        """``column`` of each output block saved as one ``.npy`` file (``numpy.save`` of the column as
        numpy batches hold it: a tensor column's rows stacked, an object array where shapes differ);
        ``read_numpy`` reads them back. Options as :meth:`write_parquet`'s."""
        least = min_rows(min_rows_per_file, num_rows_per_file, "npy")
        return write_dataset(self, "npy", path, filesystem, mode, least,
                             None, None, {**ray_options, "column": column})


    def write_images(self, path: str, column: str, file_format: str = "png", *, filesystem: Any = None,
                     try_create_dir: bool = True, arrow_open_stream_args: dict[str, Any] | None = None,
                     filename_provider: Any = None, mode: Any = "append", concurrency: int | None = None,
                     **_ray_options: Any) -> None:
        """Each row's ``column`` saved as one image file (Pillow's ``file_format``) under ``path``, as Ray's."""
        from muster.data.datasource.file_based import ImageDatasink

        sink = ImageDatasink(path, column, file_format, filesystem=filesystem, try_create_dir=try_create_dir,
                             open_stream_args=arrow_open_stream_args, filename_provider=filename_provider, mode=mode)
        getattr(self, "write_datasink")(sink, concurrency=concurrency)


def min_rows(min_rows_per_file: int | None, num_rows_per_file: int | None, kind: str) -> int | None:
    """``min_rows_per_file``, or Ray's deprecated ``num_rows_per_file`` with Ray's ``DeprecationWarning``.

    Raises:
        InvalidArgumentError: both given (as Ray's ``ValueError``).
    """
    if num_rows_per_file is None:
        return min_rows_per_file
    method = "numpy" if kind == "npy" else kind
    if min_rows_per_file is not None:
        raise InvalidArgumentError(f"write_{method}(num_rows_per_file={num_rows_per_file}, min_rows_per_file="
                                   f"{min_rows_per_file}): pass only min_rows_per_file (num_rows_per_file is its "
                                   "deprecated name, as in Ray).")
    warnings.warn(f"write_{method}(num_rows_per_file=) is deprecated, as in Ray; use min_rows_per_file= instead.",
                  DeprecationWarning, stacklevel=3)
    return num_rows_per_file


def check_min_bytes(min_bytes: Any, row_options: dict[str, int | None]) -> None:
    """Refuse ``write_parquet(min_bytes_per_file=)`` as Ray does: not a positive integer, or with a row option.

    Raises:
        InvalidArgumentError: naming the value, or the row options given with it.
    """
    if min_bytes is None:
        return
    if isinstance(min_bytes, bool) or not isinstance(min_bytes, int) or min_bytes < 1:
        raise InvalidArgumentError(f"write_parquet(min_bytes_per_file={min_bytes!r}): use a positive integer "
                                   "(bytes of in-memory blocks per file), or None.")
    given = {k: v for k, v in row_options.items() if v is not None}
    if given:
        raise InvalidArgumentError(
            f"write_parquet(min_bytes_per_file={min_bytes}, {', '.join(f'{k}={v}' for k, v in given.items())}): "
            "min_bytes_per_file cannot be used with min_rows_per_file, max_rows_per_file or num_rows_per_file "
            "(as in Ray); pass only one of them.")


def write_dataset(dataset: Any, kind: str, path: str, filesystem: Any, mode: Any, min_rows: int | None,
                  max_rows: int | None, partition_cols: list[str] | None, options: dict[str, Any],
                  min_bytes: int | None = None) -> list[str]:
    """``Dataset.write_<kind>`` ("parquet", "csv", "json" or "npy": ``write_numpy``, whose ``column`` is in
    ``options``) on either engine; the files written. ``options``: the call's other keywords (Ray's, or with
    Parquet also ``pyarrow.parquet.write_table``'s); ``min_bytes``: Parquet's ``min_bytes_per_file``."""
    from muster.data import _ray_plan

    method = "numpy" if kind == "npy" else kind
    kinds: dict[str, tuple[str, Callable[..., Callable[[pa.Table, Any], None]]]] = {
        "parquet": ("arrow_parquet_args_fn", parquet_writer), "csv": ("arrow_csv_args_fn", csv_writer),
        "json": ("pandas_json_args_fn", json_writer), "npy": ("", numpy_writer)}
    fn_name, make = kinds[kind]
    column = {"column": options.pop("column")} if kind == "npy" else {}  # write_numpy's, to its writer
    provider = options.pop("filename_provider", None)
    if provider is not None and not callable(getattr(provider, "get_filename_for_task", None)):
        raise InvalidTypeError(f"write_{method}(filename_provider={provider!r}): pass a muster.data.datasource."
                               "FilenameProvider (a subclass overriding get_filename_for_task(write_uuid, "
                               "task_index)).")
    writer_options, compression = ray_write_options(options, fn_name, f"write_{method}", pass_through=kind == "parquet")
    if _ray_plan.on_ray_engine():
        return _ray_plan.write(dataset, method, path, filesystem, mode=mode, min_rows_per_file=min_rows,
                               max_rows_per_file=max_rows, partition_cols=partition_cols,
                               filename_provider=provider, min_bytes_per_file=min_bytes, **column, **options)
    writer_options.update(column)
    blocks: Iterator[pa.Table] = dataset._execute()
    if kind == "csv":  # say which column CSV cannot hold before the folder is touched (not pyarrow's bare error)
        known = dataset._node.known_schema()
        if known is not None:
            check_csv_columns(known)
        else:
            first = next(blocks, None)
            if first is not None:
                check_csv_columns(first.schema)
                blocks = itertools.chain([first], blocks)
    return write_blocks(blocks, path, filesystem, kind, make(**writer_options), mode=mode,
                        min_rows_per_file=min_rows, partition_cols=partition_cols, where=f"write_{kind}",
                        compression=compression, max_rows_per_file=max_rows, filename_provider=provider,
                        min_bytes_per_file=min_bytes)


def write_blocks(blocks: Iterator[pa.Table], path: str, filesystem: Any, ext: str,
                 write: Callable[[pa.Table, Any], None], *, mode: Any = "append",
                 min_rows_per_file: int | None = None, partition_cols: list[str] | None = None,
                 where: str = "write", compression: str | None = None, max_rows_per_file: int | None = None,
                 filename_provider: Any = None, min_bytes_per_file: int | None = None) -> list[str]:
    """Write ``blocks`` under ``path``, as Ray's ``write_*`` do.

    ``mode`` (a :class:`SaveMode` or its value): "append" (add files next to any there), "overwrite"
    (empty the folder first), "ignore" (write nothing if it holds files), "error"/"create" (raise if it does).
    ``min_rows_per_file``: blocks are gathered until a file has at least that many rows;
    ``max_rows_per_file``: a file has at most that many (a bigger block is split over several).
    ``min_bytes_per_file``: blocks are gathered until their in-memory bytes reach it (none split), as Ray's
    ``write_parquet`` bundles them.
    ``partition_cols``: hive-style folders ``col=value/`` per distinct value, without those columns.
    ``filesystem``: a pyarrow or fsspec filesystem (default: from the path's URL scheme).
    ``filename_provider``: names the files (see :func:`provided_name`); by default ``{tag}_{n:06d}.{ext}``.
    Each file is whole or absent (see :func:`whole_file`): a write that fails leaves no half file for a
    reader to trip on.
    """
    from muster.core.filesystem import as_fsspec, url_to_fs

    filesystem = as_fsspec(filesystem, f"{where}(filesystem=)")
    path = os.fspath(path) if isinstance(path, os.PathLike) else path
    if not isinstance(path, str) or not path:
        raise InvalidTypeError(f"{where}(path={path!r}): pass the output folder as a str, a local path or a URL "
                               "such as 's3://bucket/out/'.")
    mode = str(getattr(mode, "value", mode)).lower()
    if mode not in _MODES:
        raise InvalidArgumentError(f"{where}(mode={mode!r}): use one of {', '.join(_MODES)}.")
    for name, n in (("min_rows_per_file", min_rows_per_file), ("max_rows_per_file", max_rows_per_file)):
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise InvalidArgumentError(f"{where}({name}={n!r}): use a positive integer.")
    if min_rows_per_file and max_rows_per_file and min_rows_per_file > max_rows_per_file:
        raise InvalidArgumentError(f"{where}(min_rows_per_file={min_rows_per_file}, max_rows_per_file="
                                   f"{max_rows_per_file}): the minimum is above the maximum.")
    fs, root = (filesystem, path) if filesystem is not None else url_to_fs(path)
    root = root.rstrip("/")
    remove_dead_writers_files(fs, root)
    existing = fs.exists(root) and bool(fs.ls(root))
    if existing and mode in ("error", "create"):
        raise InvalidArgumentError(
            f"{where}({path!r}, mode={mode!r}): the folder already holds files; pick another path, or "
            "mode='overwrite' / 'append'."
        )
    if existing and mode == "ignore":
        return []
    if existing and mode == "overwrite":
        fs.rm(root, recursive=True)
    fs.makedirs(root, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    written: list[str] = []
    tasks = 0  # each gathered table is one of Ray's write tasks (a provider's task_index)

    def emit(table: pa.Table) -> None:
        nonlocal tasks
        parts = blk.split_rows(table, max_rows_per_file) if max_rows_per_file else [table]
        for i, block in enumerate(parts):
            if ext == "parquet":  # one task's Parquet files share its name, "-{i}" apart (as Ray's)
                emit_one(block, tasks, i)
            else:
                emit_one(block, tasks + i, 0)
        tasks += 1 if ext == "parquet" else len(parts)

    def emit_one(block: pa.Table, task: int, split: int) -> None:
        for folder, part in _partitions(block, partition_cols or [], where):
            target = f"{root}/{folder}" if folder else root
            if folder:
                fs.makedirs(target, exist_ok=True)
            base = provided_name(filename_provider, tag, task, split, ext, mode, where) if filename_provider \
                else f"{tag}_{len(written):06d}.{ext}" + (f".{_SUFFIX.get(compression, compression)}"
                                                          if compression else "")
            with whole_file(fs, f"{target}/{base}", compression) as f:
                write(part, f)
            written.append(f"{target}/{base}")

    pending: list[pa.Table] = []
    rows = size = 0
    for block in blocks:
        if block.num_rows == 0:
            continue
        pending.append(block)
        rows, size = rows + block.num_rows, size + blk.nbytes(block)
        if size >= min_bytes_per_file if min_bytes_per_file else rows >= (min_rows_per_file or 1):
            emit(blk.concat(pending))
            pending, rows, size = [], 0, 0
    if pending:
        emit(blk.concat(pending))
    return written


def provided_name(provider: Any, write_uuid: str, task: int, split: int, ext: str, mode: str, where: str) -> str:
    """A file's name from ``provider.get_filename_for_task(write_uuid, task)``, as Ray's writers use it: as it
    is, except that a Parquet file's gets ``-{split}`` before its extension (``.parquet`` added when missing; a
    ``{i}`` in it is replaced instead).

    Raises:
        InvalidTypeError: the provider returned no name.
        InvalidArgumentError: a Parquet name without ``write_uuid`` in ``mode="append"`` (as Ray's): the next
            write would replace this one's files.
    """
    name = provider.get_filename_for_task(write_uuid, task)
    if not isinstance(name, str) or not name:
        raise InvalidTypeError(f"{where}(filename_provider={provider!r}): get_filename_for_task returned "
                               f"{name!r}; return a file name (str) such as f'{{write_uuid}}_{{task_index:06}}.{ext}'.")
    if ext != "parquet":
        return name
    if write_uuid not in name and mode == "append":
        raise InvalidArgumentError(
            f"{where}(filename_provider={provider!r}): the name {name!r} lacks the write_uuid ({write_uuid!r}), so "
            "a later append would replace these files. Put write_uuid in the name, or write with "
            "mode='overwrite'.")
    if "{i}" in name:
        return name.replace("{i}", str(split)) + ("" if ".parquet" in name else ".parquet")
    stem, dot, suffix = name.rpartition(".") if ".parquet" in name else (name, ".", "parquet")
    return f"{stem}-{split}{dot}{suffix}"


@contextlib.contextmanager
def whole_file(fs: Any, name: str, compression: str | None = None) -> Iterator[Any]:
    """``name`` (on fsspec filesystem ``fs``) open for writing, whole or absent: the bytes go to a hidden
    ``.<base>.partial-<host>-<pid>`` beside it (readers skip dot files), renamed to ``name`` once the block
    ends; if the block raises, the hidden file is removed and nothing has the final name. A writer killed
    first leaves it: the next write to the folder removes it (:func:`remove_dead_writers_files`). Every
    file writer uses it."""
    folder, base = posixpath.split(name)
    partial = posixpath.join(folder, temp_name(base, "partial"))
    try:
        with fs.open(partial, "wb", compression=compression) as f:
            yield f
        fs.mv(partial, name)
    except BaseException:
        try:
            fs.rm(partial)
        except Exception:  # noqa: BLE001 - never written, or the store is gone: nothing to remove
            pass
        raise


def remove_dead_writers_files(fs: Any, root: str) -> list[str]:
    """Remove, under ``root`` (its partition folders too), the hidden files of whole-file writes whose
    writer was killed mid-write: this host's whose process is gone (another host's may be a live
    writer's, and are kept); return their paths. Called before a write into the folder, on any
    filesystem (on an object store, a killed writer leaves one only between its upload and the rename)."""
    try:
        found = fs.find(root) if fs.exists(root) else []
    except FileNotFoundError:
        return []
    removed = []
    for path in found:
        if is_stale(posixpath.basename(path)):
            with contextlib.suppress(FileNotFoundError):  # another writer removed it first
                fs.rm(path)
                removed.append(path)
    return removed


_SUFFIX = {"gzip": "gz", "bzip2": "bz2", "zstd": "zst", "lzma": "xz"}


def _partitions(block: pa.Table, cols: list[str], where: str) -> Iterator[tuple[str, pa.Table]]:
    """``block`` split by the distinct values of ``cols``: (``a=1/b=x`` folder, rows without those columns)."""
    if not cols:
        yield "", block
        return
    missing = [c for c in cols if c not in block.column_names]
    if missing:
        raise InvalidArgumentError(f"{where}(partition_cols={cols!r}): no column {missing[0]!r}; the dataset has "
                                   f"{block.column_names}.")
    import pyarrow.compute as pc

    keys = block.select(cols).group_by(cols).aggregate([]).to_pylist()
    for key in keys:
        mask = None
        for c in cols:
            hit = pc.equal(block.column(c), pa.scalar(key[c], block.schema.field(c).type)) if key[c] is not None \
                else pc.is_null(block.column(c))
            mask = hit if mask is None else pc.and_(mask, hit)
        folder = "/".join(f"{c}={key[c]}" for c in cols)
        yield folder, block.filter(mask).drop_columns(cols)


def parquet_writer(**kwargs: Any) -> Callable[[pa.Table, Any], None]:
    import pyarrow.parquet as pq

    return lambda block, f: pq.write_table(block, f, **kwargs)


def csv_writer(**kwargs: Any) -> Callable[[pa.Table, Any], None]:
    import pyarrow.csv as pcsv

    def write(block: pa.Table, f: Any) -> None:
        check_csv_columns(block.schema)  # a later block's (its file is then removed whole: see whole_file)
        pcsv.write_csv(block, f, **kwargs)

    return write


def check_csv_columns(schema: pa.Schema) -> None:
    """Refuse the columns a CSV cell cannot hold: tensors (Arrow extension types), lists, structs, maps.

    Raises:
        InvalidArgumentError: naming each such column, its type, and the writers that keep it.
    """
    bad = [f"{f.name!r} ({f.type})" for f in schema
           if isinstance(f.type, pa.BaseExtensionType) or pa.types.is_nested(f.type)]
    if bad:
        raise InvalidArgumentError(
            f"write_csv: column(s) {', '.join(bad)} hold tensors or nested values, which a CSV cell cannot hold. "
            "Write them with write_parquet or write_json (or one column with write_numpy(column=...)), or "
            "flatten them first: drop_columns([...]), or map_batches turning each into scalar columns.")


def numpy_writer(*, column: str) -> Callable[[pa.Table, Any], None]:
    import numpy as np

    def write(block: pa.Table, f: Any) -> None:
        if column not in block.column_names:
            raise InvalidArgumentError(f"write_numpy(column={column!r}): no such column; the dataset has "
                                       f"{block.column_names}.")
        np.save(f, blk.column_to_numpy(block.column(column)))

    return write


def json_writer(**kwargs: Any) -> Callable[[pa.Table, Any], None]:
    options = {"orient": "records", "lines": True, **kwargs}  # pandas.DataFrame.to_json's

    def write(block: pa.Table, f: Any) -> None:
        text = blk.to_pandas(block, arrow_backed=False).to_json(**options)  # a tensor's rows keep their shape
        f.write(text.encode())

    return write
