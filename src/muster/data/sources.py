"""Read tasks for files (parquet, CSV, JSON lines, text, binary, NumPy, images); in-memory data and ``range``
are ``muster.data.memory_sources``'.

Paths may be a file, a folder (read recursively; names starting with ``_`` or
``.`` are skipped), a glob, a list of those, or any fsspec URL (``s3://``,
``gs://``, ``memory://``...).  Parquet goes through ``pyarrow.dataset``:
column selection and ``filter=`` expressions are pushed into the scan, hive
partition folders (``year=2024/``) become columns and prune files.
"""

from __future__ import annotations

import dataclasses
import random
import threading
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from muster.data import block as blk
from muster.data import ray_tensors
from muster.data.exceptions import DataSchemaError, DataSourceError
from muster.data.plan import Read, ReadTask
from muster.data.read_errors import PARSE_ERRORS, naming_file
from muster.core.filesystem import as_fsspec, missing_credentials, url_to_fs
from muster.exceptions import InvalidArgumentError, InvalidTypeError

#: Small files are read together, up to this many bytes and files per task.
TASK_BYTES = 8 * 1024 * 1024  # jobs small enough that 2 threads share a few big files (measured: +15% rows/s)
TASK_FILES = 64


def task_bytes() -> int:
    """Bytes of files per read job: ``TASK_BYTES``, or less so that the jobs a pipeline keeps
    pending (2 x threads) fit in ``DataContext.max_bytes_in_flight``."""
    from muster.data.context import DataContext

    ctx = DataContext.get_current()
    return max(1 << 20, min(TASK_BYTES, ctx.max_bytes_in_flight // (4 * ctx.max_threads)))


@dataclass(frozen=True)
class FileOptions:
    """Ray's options shared by the file readers.

    Attributes:
        include_paths: add a last column ``path``, the file each row came from.
        file_extensions: read only files with these extensions (``["csv"]``); None: every file.
        compression: how the files are compressed (Ray's ``arrow_open_stream_args={"compression":
            "gzip"}``); None: by each file's suffix (``.gz``, ``.bz2``, ``.xz``, ``.zst``) for the text
            formats, not at all for binary files.
    """

    include_paths: bool = False
    file_extensions: tuple[str, ...] | None = None
    compression: str | None = None
    ignore_missing_paths: bool = False
    partition_filter: Callable[[list[str]], list[str]] | None = None
    shuffle: Any = None  # "files", or a FileShuffleConfig
    hive: bool = False  # add each file's ``key=value`` folders as string columns (read_csv, read_json)

    @classmethod
    def of(cls, include_paths: bool, ray_only: dict[str, Any]) -> "FileOptions":
        extensions = ray_only.get("file_extensions")
        if isinstance(extensions, str):
            extensions = [extensions]
        stream = ray_only.get("arrow_open_stream_args") or {}
        keep = ray_only.get("partition_filter")
        if keep is not None and not callable(keep):
            raise InvalidTypeError(f"partition_filter={keep!r}: pass a PathPartitionFilter or a function "
                                   "list of paths -> the paths to read.")
        shuffle = ray_only.get("shuffle")
        if shuffle is not None and shuffle != "files" and not hasattr(shuffle, "seed"):
            raise InvalidArgumentError(f"shuffle={shuffle!r}: use 'files' or FileShuffleConfig(seed=...) to read the "
                                       "files in a shuffled order (rows: random_shuffle() after the read).")
        return cls(bool(include_paths), tuple(f".{e.lower().lstrip('.')}" for e in extensions) if extensions else None,
                   stream.get("compression"), bool(ray_only.get("ignore_missing_paths")), keep, shuffle)


def resolve(paths: str | list[str], filesystem: Any, extensions: tuple[str, ...] | None, where: str,
            options: FileOptions | None = None) -> tuple[Any, list[tuple[str, int]], str | None]:
    """(fsspec filesystem, [(file, size)], the base folder when one folder was given)."""
    items = [paths] if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__") else paths
    if not isinstance(items, (list, tuple)) or not all(
            isinstance(i, (str, bytes)) or hasattr(i, "__fspath__") for i in items):
        raise InvalidTypeError(f"{where}(paths={paths!r}): pass a path, folder, glob or URL as a str, or a "
                               "list of them, e.g. 's3://bucket/data/' or ['a.parquet', 'b.parquet'].")
    items = list(items)
    if not items:
        raise DataSourceError(f"{where}(paths=[]): pass at least one file, folder, glob or URL.")
    try:
        fs, files, base = _listed(items, as_fsspec(filesystem, f"{where}(filesystem=)"), where, options)
    except Exception as exc:  # noqa: BLE001 - a cloud SDK's own error class
        refused = missing_credentials(exc, f"{where}({paths!r})", f"pass {where}(filesystem=...) made with them; "
                                      "read a public bucket as s3://anonymous@<bucket>/<path>")
        if refused is None:
            raise
        raise refused from exc
    if options is not None and options.file_extensions:
        files = [(p, s) for p, s in files if p.lower().endswith(options.file_extensions)]
        if not files:
            raise DataSourceError(f"{where}(file_extensions={list(options.file_extensions)}): {paths!r} holds no file "
                                  "with those extensions. Check the extensions (without the dot, e.g. ['csv']).")
    elif extensions:
        files = [(p, s) for p, s in files if p.lower().endswith(extensions)] or files
    if options is not None and options.partition_filter is not None:
        kept = set(options.partition_filter([p for p, _ in files]))
        files = [(p, s) for p, s in files if p in kept]
        if not files:
            raise DataSourceError(f"{where}: partition_filter kept none of the files of {paths!r}. Check the filter.")
    if options is not None and options.shuffle is not None:
        random.Random(getattr(options.shuffle, "seed", None)).shuffle(files)  # the order the files are read in
    if not files:
        raise DataSourceError(f"{where}: {paths!r} holds no files to read.")
    return fs, files, base


def _listed(items: list[Any], fs: Any, where: str,
            options: FileOptions | None) -> tuple[Any, list[tuple[str, int]], str | None]:
    """(fsspec filesystem, [(file, size)], the base folder when one folder was given) of the paths to read."""
    files: list[tuple[str, int]] = []
    base: str | None = None
    for item in items:
        item = str(item)
        this_fs, path = (fs, item) if fs is not None else _url_to_fs(item, where)
        fs = this_fs
        if any(ch in path for ch in "*?["):
            found = sorted(fs.glob(path, detail=True).items())
            files.extend((p, int(d.get("size") or 0)) for p, d in found if d.get("type") != "directory")
            if not found:
                raise DataSourceError(f"{where}: the glob {item!r} matches no file. Check the pattern.")
            continue
        if not fs.exists(path):
            if options is not None and options.ignore_missing_paths:
                continue
            raise DataSourceError(f"{where}: no such file or folder {item!r}. Check the path (and the credentials "
                                  "and endpoint for a URL).")
        if fs.isdir(path):
            found = sorted(fs.find(path, detail=True).items())
            files.extend((p, int(d.get("size") or 0)) for p, d in found if not _hidden(p, path))
            base = path if len(items) == 1 else None
        else:
            files.append((path, int(fs.size(path) or 0)))
    return fs, files, base


def _url_to_fs(url: str, where: str) -> tuple[Any, str]:
    """``url_to_fs``, with a URL scheme no filesystem serves named as the mistake it is."""
    try:
        return url_to_fs(url)
    except ValueError as exc:  # fsspec's "Protocol not known: x"
        if "protocol not known" not in str(exc).lower():
            raise
        scheme = url.partition("://")[0]
        hint = (" Ray's old 'example://' sample files are not bundled (Ray 2.60 has none either): copy the file "
                "locally, or read it from s3://anonymous@ray-example-data/." if scheme == "example" else "")
        raise DataSourceError(f"{where}: no filesystem for '{scheme}://' ({url!r}); use a local path, file://, or "
                              "a URL whose fsspec filesystem is installed (s3:// needs s3fs, gs:// gcsfs)."
                              + hint) from exc


def _hidden(path: str, base: str) -> bool:
    rel = path[len(base):].lstrip("/")
    return any(part.startswith(("_", ".")) for part in rel.split("/"))


def _arrow_fs(fs: Any) -> Any:
    import pyarrow.fs as pafs
    from fsspec.implementations.local import LocalFileSystem

    if isinstance(fs, LocalFileSystem):
        return pafs.LocalFileSystem()
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs))


def _group(files: list[tuple[str, int]], make: Callable[[list[str]], Callable[[], list[pa.Table]]],
           rows_per_file: int | None = None) -> tuple[ReadTask, ...]:
    """Read tasks over ``files``, small files grouped up to ``TASK_BYTES`` per task (order kept);
    ``rows_per_file``: each file's rows, for a reader that makes one row of each (known before reading)."""
    tasks: list[ReadTask] = []
    group: list[str] = []
    size = 0
    cap = task_bytes()

    def task() -> ReadTask:
        rows = len(group) * rows_per_file if rows_per_file is not None else None
        return ReadTask(make(group), group[0], size, tuple(group), rows=rows)

    for path, n in files:
        if group and (size + n > cap or len(group) >= TASK_FILES):
            tasks.append(task())
            group, size = [], 0
        group.append(path)
        size += n
    if group:
        tasks.append(task())
    return tuple(tasks)


class _SchemaGuard:
    """Remembers the first file's schema; any later file whose column types differ is an error."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._first: tuple[str, pa.Schema] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"_first": self._first}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._lock, self._first = threading.Lock(), state["_first"]

    def check(self, path: str, schema: pa.Schema) -> None:
        with self._lock:
            if self._first is None:
                self._first = (path, schema)
                return
            first_path, first = self._first
        for f in schema:
            idx = first.get_field_index(f.name)
            if idx >= 0 and first.field(idx).type != f.type and not (pa.types.is_null(f.type)
                                                                     or pa.types.is_null(first.field(idx).type)) \
                    and not blk.same_kind_of_tensor(first.field(idx).type, f.type) \
                    and not ray_tensors.same_kind(first.field(idx), f):
                raise DataSchemaError(
                    f"files disagree on column {f.name!r}: {first_path} has {first.field(idx).type}, "
                    f"{path} has {f.type}. Rewrite one of them with the same type, or cast the column "
                    "in a map_batches after reading each separately."
                )


# -- parquet ------------------------------------------------------------------------
_FILTER_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, KeyError)


def filter_pushdown(read: Read, rebuild: Callable[[Any], tuple[ReadTask, ...]], base: Any,
                    added: tuple[str, ...] = ()) -> Read:
    """``read`` able to take a filter into its scan (``Read.push_filter``): ``rebuild(expression)`` makes its
    tasks scanning with that filter (``base``, the read's own ``filter=``, and each one pushed, ANDed).

    A filter is taken only when it binds to the columns the scan makes (the read's known schema less the
    ``added`` columns, such as ``include_paths``'), as a boolean: one naming another column, or comparing
    types pyarrow cannot, stays a filter operator (and fails there, naming the columns, as before)."""
    schema = read.known_schema()
    if schema is None:
        return read
    scanned = pa.schema([f for f in schema if f.name not in added])

    def push(expr: Any) -> Read | None:
        try:
            scanned.empty_table().filter(expr)
        except _FILTER_ERRORS:
            return None
        both = expr if base is None else base & expr
        return filter_pushdown(dataclasses.replace(read, tasks=rebuild(both)), rebuild, both, added)

    return dataclasses.replace(read, push_filter=push)


def parquet_tasks(paths: Any, *, columns: list[str] | None, filter: Any, filesystem: Any,
                  partitioning: Any, options: FileOptions = FileOptions(),
                  tensor_column_schema: Any = None) -> tuple[ReadTask, ...]:
    """Read tasks for parquet files; Ray's tensor columns become muster's (:mod:`ray_tensors`), and so do
    the binary columns ``tensor_column_schema`` names."""
    import pyarrow.dataset as pads

    fs, files, base = resolve(paths, filesystem, (".parquet", ".parq", ".pq"), "read_parquet", options)
    include_paths = options.include_paths
    afs = _arrow_fs(fs)
    part = pads.partitioning(flavor="hive") if partitioning == "hive" else partitioning
    kwargs: dict[str, Any] = {"partition_base_dir": base} if base else {}
    dataset = _parquet_dataset([p for p, _ in files], afs, part, kwargs)
    found = dataset.partitioning.schema if partitioning == "hive" and dataset.partitioning is not None else None
    if found is not None and any(f.type != pa.string() for f in found):  # Ray's hive values are strings ...
        stored = next(iter(dataset.get_fragments()), None)
        stored_names = set(stored.physical_schema.names) if stored is not None else set()
        fields = [(f.name, f.type if f.name in stored_names else pa.string()) for f in found]  # ... unless stored
        part = pads.partitioning(pa.schema(fields), flavor="hive")
        dataset = _parquet_dataset([p for p, _ in files], afs, part, kwargs)
    if columns is not None:
        missing = [c for c in columns if c not in dataset.schema.names]
        if missing:
            raise InvalidArgumentError(f"read_parquet(columns={columns!r}): no column {missing[0]!r}; the files have "
                             f"{dataset.schema.names}.")
    tensors = ray_tensors.check_tensor_columns(tensor_column_schema, dataset.schema) if tensor_column_schema else {}
    sizes = dict(files)
    cap = task_bytes()
    fragments = list(dataset.get_fragments(filter=filter))
    schema = dataset.schema
    guard = _SchemaGuard()
    if fragments:
        guard.check(fragments[0].path, fragments[0].physical_schema)  # the file the schema came from

    # Whole files with just the dataset's columns are read with ParquetFile (a third less CPU
    # a file than a dataset scan, which counts with 2,000 small files); the footer it parses
    # gives the schema check for free.  Filters, partition columns and row-group splits scan.
    direct = filter is None and bool(fragments) and set(schema.names) <= set(fragments[0].physical_schema.names)

    def make(group: list[tuple[Any, bool]]) -> Callable[[], list[pa.Table]]:
        def read() -> list[pa.Table]:
            tables: list[pa.Table] = []
            scan: list[Any] = []
            for frag, whole in group:
                with naming_file(frag.path, "read_parquet"):  # a file that is not parquet: named
                    table = _read_file(afs, frag.path, columns, schema, guard) if direct and whole else None
                    if table is None:
                        guard.check(frag.path, frag.physical_schema)  # disagreeing types: an error, not a cast
                    if table is None and include_paths:  # each file's rows get its path: scanned alone
                        tables.append(with_path(_scan([frag], schema, dataset.format, afs, columns, filter), frag.path))
                        continue
                if table is None:
                    scan.append(frag)
                    continue
                if scan:  # keep the files' order
                    tables.append(_scan(scan, schema, dataset.format, afs, columns, filter))
                    scan = []
                tables.append(with_path(table, frag.path) if include_paths else table)
            if scan:
                tables.append(_scan(scan, schema, dataset.format, afs, columns, filter))
            block = blk.concat(tables)  # tensors of different shapes combine (variable-shape)
            return [ray_tensors.decode_bytes(block, tensors) if tensors else block]

        return read

    by_path: list[tuple[Any, int, bool]] = []
    for frag in fragments:
        n = sizes.get(frag.path, 0)
        if n > cap:  # a big file: one job per row group, so memory stays bounded
            groups = frag.split_by_row_group(filter=filter)
            by_path.extend((g, n // max(1, len(groups)), False) for g in groups)
        else:
            by_path.append((frag, n, True))
    known = None if tensors or ray_tensors.has_ray_tensors(schema) else _parquet_block_schema(schema, columns,
                                                                                             include_paths)
    return _parquet_jobs(by_path, cap, make, known, counted=filter is None)


def _parquet_dataset(paths: list[str], afs: Any, partitioning: Any, kwargs: dict[str, Any]) -> Any:
    """The parquet ``paths``' pyarrow dataset; a file it cannot read (pyarrow quotes it) named (:func:`naming_file`)."""
    import pyarrow.dataset as pads

    try:
        return pads.dataset(paths, format="parquet", filesystem=afs, partitioning=partitioning, **kwargs)
    except PARSE_ERRORS as exc:
        failed = [p for p in paths if f"'{p}'" in str(exc)]
        if not failed:
            raise
        with naming_file(max(failed, key=len), "read_parquet"):
            raise


def _parquet_jobs(by_path: list[tuple[Any, int, bool]], cap: int, make: Callable[[list[tuple[Any, bool]]], Any],
                  schema: pa.Schema | None, counted: bool) -> tuple[ReadTask, ...]:
    """``(fragment, bytes, whole file)`` grouped into read jobs of up to ``cap`` bytes and ``TASK_FILES``
    files; ``counted``: each job counts its rows from the footers' row groups (no filter drops any)."""
    def task(group: list[tuple[Any, bool]], size: int) -> ReadTask:
        counter = (lambda: sum(rg.num_rows for f, _ in group for rg in f.row_groups)) if counted else None
        return ReadTask(make(group), group[0][0].path, size, tuple(f.path for f, _ in group), schema=schema,
                        count_rows=counter)

    tasks: list[ReadTask] = []
    group: list[tuple[Any, bool]] = []
    size = 0
    for frag, n, whole in by_path:
        if group and (size + n > cap or len(group) >= TASK_FILES):
            tasks.append(task(group, size))
            group, size = [], 0
        group.append((frag, whole))
        size += n
    if group:
        tasks.append(task(group, size))
    return tuple(tasks)


def _parquet_block_schema(schema: pa.Schema, columns: list[str] | None, include_paths: bool) -> pa.Schema:
    """The read's blocks' schema from the files' metadata alone (the first footer, and the hive folders), as
    ``repr`` shows it unread: ``columns`` picked, ``path`` last with ``include_paths``."""
    out = pa.schema([schema.field(c) for c in columns]) if columns is not None else schema.remove_metadata()
    return out.append(pa.field("path", pa.string())) if include_paths else out


def _scan(frags: list[Any], schema: pa.Schema, fmt: Any, afs: Any, columns: list[str] | None, filter: Any) -> pa.Table:
    if ray_tensors.has_ray_tensors(schema):  # each file's own tensor shape (the dataset's is the first file's)
        return blk.concat([ray_tensors.to_muster(_scan_as([f], ray_tensors.with_files_tensor_fields(
            schema, f.physical_schema), fmt, afs, columns, filter), f"read_parquet({f.path})") for f in frags])
    return _scan_as(frags, schema, fmt, afs, columns, filter)


def _scan_as(frags: list[Any], schema: pa.Schema, fmt: Any, afs: Any, columns: list[str] | None,
             filter: Any) -> pa.Table:
    import pyarrow.dataset as pads

    sub = pads.FileSystemDataset(frags, schema, fmt, afs)  # one C++ scan over the group
    return sub.to_table(columns=columns, filter=filter, use_threads=False)  # the pool's threads run the jobs


def _read_file(afs: Any, path: str, columns: list[str] | None, schema: pa.Schema, guard: _SchemaGuard
               ) -> pa.Table | None:
    """One whole file, or None when its columns differ from the dataset's (the scan fills them in)."""
    import pyarrow.parquet as pq

    with afs.open_input_file(path) as f:
        pf = pq.ParquetFile(f)
        file_schema = pf.schema_arrow
        guard.check(path, file_schema)
        if file_schema.names != schema.names:
            return None
        table = pf.read(columns=columns, use_threads=False)
    return ray_tensors.to_muster(table.select(columns) if columns is not None else table, f"read_parquet({path})")


# -- text formats ---------------------------------------------------------------------
def with_path(table: pa.Table, path: str) -> pa.Table:
    """``table`` with a last column ``path`` naming the file its rows came from (Ray's ``include_paths``)."""
    return table.append_column("path", pa.array([path] * table.num_rows, type=pa.string()))


def with_partitions(table: pa.Table, path: str) -> pa.Table:
    """``table`` with a string column per ``key=value`` folder of ``path`` it lacks (Ray's hive partitioning)."""
    from muster.data.datasource import partition_values

    for key, value in partition_values(path).items():
        if key not in table.column_names:
            table = table.append_column(key, pa.array([value] * table.num_rows, type=pa.string()))
    return table


def _file_reader(fs: Any, parse: Callable[[Any, str], pa.Table], guard: _SchemaGuard | None,
                 options: FileOptions, where: str, compression: str | None = "infer"
                 ) -> Callable[[list[str]], Callable[[], list[pa.Table]]]:
    """Each file of a group opened and parsed (an error naming the file and ``where``, the reader);
    ``compression``: the format's default when ``options`` name none ("infer": by the file's suffix)."""
    how = options.compression or compression

    def make(group: list[str]) -> Callable[[], list[pa.Table]]:
        def read() -> list[pa.Table]:
            out = []
            for path in group:
                with naming_file(path, where), fs.open(path, "rb", compression=how) as f:
                    table = parse(f, path)
                if guard is not None:
                    guard.check(path, table.schema)
                if options.hive:
                    table = with_partitions(table, path)
                out.append(with_path(table, path) if options.include_paths else table)
            return out

        return read

    return make


def csv_tasks(paths: Any, filesystem: Any, options: FileOptions, **arrow_args: Any) -> tuple[ReadTask, ...]:
    import pyarrow.csv as pcsv

    fs, files, _ = resolve(paths, filesystem, (".csv", ".csv.gz"), "read_csv", options)
    return _group(files, _file_reader(fs, lambda f, _p: pcsv.read_csv(f, **arrow_args), _SchemaGuard(), options,
                                            "read_csv"))


def json_tasks(paths: Any, filesystem: Any, options: FileOptions, **arrow_args: Any) -> tuple[ReadTask, ...]:
    import pyarrow.json as pjson

    fs, files, _ = resolve(paths, filesystem, (".json", ".jsonl", ".json.gz", ".jsonl.gz"), "read_json", options)

    def parse(f: Any, path: str) -> pa.Table:
        """JSON lines (pyarrow's reader); a file holding one JSON array of objects is read too, as Ray does."""
        head = f.read(1)
        while head and head.isspace():
            head = f.read(1)
        f.seek(0)
        if head != b"[":
            return pjson.read_json(f, **arrow_args)
        import json

        rows = json.load(f)
        if not all(isinstance(r, dict) for r in rows):
            raise DataSourceError(f"read_json: {path} holds a JSON array of {type(rows[0]).__name__}s; its items "
                                  "must be objects (one row each), or write the file as JSON lines.")
        return blk.rows_to_block(rows, f"read_json({path})")

    return _group(files, _file_reader(fs, parse, _SchemaGuard(), options, "read_json"))


def text_tasks(paths: Any, filesystem: Any, encoding: str, drop_empty_lines: bool,
               options: FileOptions) -> tuple[ReadTask, ...]:
    fs, files, _ = resolve(paths, filesystem, None, "read_text", options)

    def parse(f: Any, _path: str) -> pa.Table:
        lines = f.read().decode(encoding).splitlines()
        if drop_empty_lines:
            lines = [ln for ln in lines if ln.strip()]
        return pa.table({"text": pa.array(lines, type=pa.string())})

    return _group(files, _file_reader(fs, parse, None, options, "read_text"))


def binary_tasks(paths: Any, filesystem: Any, options: FileOptions) -> tuple[ReadTask, ...]:
    fs, files, _ = resolve(paths, filesystem, None, "read_binary_files", options)

    def parse(f: Any, _path: str) -> pa.Table:
        return pa.table({"bytes": pa.array([f.read()], type=pa.binary())})

    return _group(files, _file_reader(fs, parse, None, options, "read_binary_files", compression=None),  # as stored
                  rows_per_file=1)


def numpy_tasks(paths: Any, filesystem: Any, options: FileOptions) -> tuple[ReadTask, ...]:
    """``.npy`` files: one row per element of each array's first axis, column ``data``."""
    import io

    if options.file_extensions is None:
        options = dataclasses.replace(options, file_extensions=(".npy",))
    fs, files, _ = resolve(paths, filesystem, None, "read_numpy", options)

    def parse(f: Any, path: str) -> pa.Table:
        try:
            array = np.load(io.BytesIO(f.read()), allow_pickle=False)
        except Exception as exc:  # noqa: BLE001 - named with its file
            raise DataSourceError(f"read_numpy: {path} is not a .npy array numpy can read ({exc}).") from exc
        if array.ndim == 0:
            array = array.reshape(1)
        return pa.table({"data": blk.array_from_values(array)})

    return _group(files, _file_reader(fs, parse, None, options, "read_numpy", compression=None))


IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".gif")


def image_tasks(paths: Any, filesystem: Any, size: tuple[int, int] | None, mode: str | None,
                options: FileOptions) -> tuple[ReadTask, ...]:
    """One row per image file, column ``image``: a uint8 array (height, width[, channels])."""
    try:
        from PIL import Image
    except ImportError as exc:
        raise ImportError('read_images needs Pillow: pip install "muster[data]" (or pip install pillow).') from exc
    if options.file_extensions is None:
        options = dataclasses.replace(options, file_extensions=IMAGE_EXTENSIONS)
    fs, files, _ = resolve(paths, filesystem, None, "read_images", options)

    def parse(f: Any, path: str) -> pa.Table:
        image: Any
        try:
            image = Image.open(f)
            image.load()
        except Exception as exc:  # noqa: BLE001 - named with its file
            raise DataSourceError(f"read_images: {path} is not an image Pillow can read ({exc}).") from exc
        if mode is not None:
            image = image.convert(mode)
        if size is not None:
            image = image.resize((size[1], size[0]))  # Ray's size is (height, width); Pillow's is (width, height)
        return blk.rows_to_block([{"image": np.asarray(image)}], f"read_images({path})")

    return _group(files, _file_reader(fs, parse, None, options, "read_images", compression=None), rows_per_file=1)
