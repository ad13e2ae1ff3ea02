"""muster.data: Ray Data's API (``ray.data`` -> ``muster.data``) on pyarrow.

Build a lazy ``Dataset`` with ``read_parquet``/``read_csv``/``read_json``/
``read_text``/``read_binary_files``/``from_items``/``from_pandas``/
``from_numpy``/``from_arrow``/``range``/``range_tensor``; transform it with
``map``, ``map_batches``, ``filter``...; consume it with ``iter_batches``,
``iter_torch_batches``, ``take``, ``write_parquet``..., or pass it to a
trainer: ``TorchTrainer(..., datasets={"train": ds})`` and, in the loop,
``muster.train.get_dataset_shard("train")``.
"""

from __future__ import annotations

import builtins
import dataclasses
import math
import numbers
import warnings
from typing import Any, Callable

import numpy as np

try:
    import pyarrow as pa
except ImportError as _exc:  # pragma: no cover - pyarrow ships with the data extra
    raise ImportError('muster.data needs pyarrow: pip install "muster[data]"') from _exc

from muster.data import block as _blk
from muster.data import memory_sources as _mem
from muster.data import sources as _src
from muster.data.config import DataConfig
from muster.data.dataset import Dataset, MaterializedDataset, from_blocks
from muster.data.datasource import Datasink, Datasource, FileShuffleConfig, RandomSeedConfig, ReadTask
from muster.data.datasource import BlockBasedFileDatasink, RowBasedFileDatasink
from muster.data.datasource import datasource as _custom
from muster.data.datasource import sql as _sql
from muster.data.exceptions import DataError, DataSchemaError, DataSourceError, DataTypeError, UserFunctionError
from muster.data.context import DataContext
from muster.data.execution_options import ExecutionOptions, ExecutionResources
from muster.data.grouped import GroupedData
from muster.data.huggingface import from_huggingface
from muster.data.iterator import DataIterator

DatasetContext, DatasetIterator = DataContext, DataIterator  # Ray's older names, still exported by Ray
NodeIdStr = str  # Ray's type of the node ids DataConfig.configure gets (worker_node_ids)
from muster.data.mix import MixStoppingCondition
from muster.data.plan import Node, RayCall, Read
from muster.data.preprocessor import Preprocessor  # Ray 2.60 exports it here too (ray.data.Preprocessor)
from muster.data.schema import Schema
from muster.data.summary import DatasetSummary
from muster.data.strategies import ActorPoolStrategy, TaskPoolStrategy
from muster.data.writers import SaveMode
from muster.exceptions import InvalidArgumentError, InvalidTypeError

__all__ = [
    "Preprocessor",
    "Schema",
    "DatasetSummary",
    "FileShuffleConfig",
    "RandomSeedConfig",
    "ActorPoolStrategy", "DataConfig", "DataContext", "DataError", "DataIterator", "DatasetContext",
    "ExecutionOptions", "ExecutionResources",
    "DatasetIterator", "NodeIdStr", "DataSchemaError", "DataSourceError", "DataTypeError", "Dataset", "GroupedData",
    "MaterializedDataset", "UserFunctionError", "from_arrow", "from_arrow_refs", "from_huggingface", "from_items",
    "from_numpy", "from_numpy_refs", "from_pandas", "from_pandas_refs", "from_torch", "range", "range_tensor",
    "read_binary_files", "read_csv", "read_images", "read_json", "read_numpy", "read_parquet", "read_sql",
    "read_text",
    "MixStoppingCondition", "SaveMode", "TaskPoolStrategy",
    "Datasink", "Datasource", "ReadTask", "read_datasource", "BlockBasedFileDatasink", "RowBasedFileDatasink",
]


def _read(name: str, tasks: tuple, ray: RayCall) -> Dataset:
    return Dataset(Node(Read(name, tasks, ray)))


def _fs(filesystem: Any) -> dict[str, Any]:
    return {} if filesystem is None else {"filesystem": filesystem}


#: Ray's read_* options: ``file_extensions`` and ``arrow_open_stream_args`` (compression) apply here
#: (``FileOptions``); the others only size or place Ray's own read tasks and have no effect here
_RAY_READ_OPTIONS = ("override_num_blocks", "parallelism", "ray_remote_args", "concurrency", "meta_provider",
                     "shuffle", "file_extensions", "ignore_missing_paths", "arrow_open_stream_args",
                     "partition_filter", "num_cpus", "num_gpus", "memory", "resources", "label_selector",
                     "fallback_strategy", "max_calls", "accelerator_type", "runtime_env")


def _ray_only(options: dict[str, Any]) -> dict[str, Any]:
    """Take Ray's read options out of ``options`` (what is left goes to pyarrow)."""
    return {k: options.pop(k) for k in list(options) if k in _RAY_READ_OPTIONS}


def _file_options(include_paths: bool, ray_only: dict[str, Any]) -> _src.FileOptions:
    return _src.FileOptions.of(include_paths, ray_only)


def read_parquet(paths: str | list[str], *, columns: list[str] | None = None, filter: Any = None,
                 filesystem: Any = None, partitioning: Any = "hive", include_paths: bool = False,
                 tensor_column_schema: dict[str, tuple[Any, tuple[int, ...]]] | None = None,
                 **_ray_options: Any) -> Dataset:
    """Parquet files: a file, folder, glob, list or URL. Tensor columns Ray wrote (its
    ``ArrowTensorType``/``ArrowTensorTypeV2``/variable-shaped type) read back with their shape and dtype.

    Args:
        columns: read only these columns (pushed into the scan).
        filter: a ``pyarrow.compute`` expression, e.g. ``pc.field("label") == 1``, pushed into the scan
            (and used to skip hive partitions).
        filesystem: a pyarrow or fsspec filesystem (default: from the path's URL scheme).
        partitioning: ``"hive"`` (default: ``key=value`` folders become columns) or a pyarrow partitioning.
        include_paths: add a column ``path``, the file each row came from (as all the file readers do).
        tensor_column_schema: ``{column: (dtype, shape)}`` for binary columns whose rows are ndarrays'
            raw bytes (``arr.tobytes()``, C order): each becomes a tensor column of that dtype and shape.

    Raises:
        DataSourceError: a path does not exist or holds no files.
        DataSchemaError: (when read) two files disagree on a column's type.
        DataTypeError: (when read) a ``tensor_column_schema`` row's bytes do not fit its dtype and shape.
    """
    ray_only = _ray_only(_ray_options)
    if _ray_options:  # a typo, or one of Ray's pyarrow pass-through options muster does not take
        raise InvalidTypeError(
            f"read_parquet: unknown option(s) {sorted(_ray_options)}; it takes columns, filter, filesystem, "
            f"partitioning, include_paths, tensor_column_schema and Ray's {', '.join(_RAY_READ_OPTIONS)}."
        )
    ray_args = dict(ray_only, columns=columns, **_fs(filesystem))
    if include_paths:
        ray_args["include_paths"] = True
    if filter is not None:
        ray_args["filter"] = filter
    if partitioning != "hive":  # hive is ray.data's default too
        ray_args["partitioning"] = partitioning
    if tensor_column_schema is not None:
        ray_args["tensor_column_schema"] = tensor_column_schema

    def tasks(scan_filter: Any) -> tuple:
        return _src.parquet_tasks(paths, columns=columns, filter=scan_filter, filesystem=filesystem,
                                  partitioning=partitioning, options=_file_options(include_paths, ray_only),
                                  tensor_column_schema=tensor_column_schema)

    read = Read("ReadParquet", tasks(filter), RayCall.of("read_parquet", paths, **ray_args))
    return Dataset(Node(_src.filter_pushdown(read, tasks, filter, ("path",) if include_paths else ())))


def _paths(include_paths: bool) -> dict[str, Any]:
    return {"include_paths": True} if include_paths else {}


def read_csv(paths: str | list[str], *, filesystem: Any = None, include_paths: bool = False,
             partitioning: Any = "hive", **arrow_csv_args: Any) -> Dataset:
    """CSV files (header row); extra keyword arguments go to ``pyarrow.csv.read_csv`` (Ray's task options
    such as ``override_num_blocks`` are accepted with no effect). ``include_paths`` adds a column ``path``;
    as in Ray, each ``key=value`` folder of a file's path adds a string column (``partitioning=None``: not)."""
    ray_only = _ray_only(arrow_csv_args)
    options = _text_options(include_paths, ray_only, partitioning, "read_csv")
    return _read("ReadCSV", _src.csv_tasks(paths, filesystem, options, **arrow_csv_args),
                 RayCall.of("read_csv", paths, **_fs(filesystem), **ray_only, **_paths(include_paths),
                            **_no_partitioning(partitioning), **arrow_csv_args))


def _text_options(include_paths: bool, ray_only: dict[str, Any], partitioning: Any, where: str) -> _src.FileOptions:
    """The file options of a reader whose ``partitioning`` is Ray's default hive one, or None (off)."""
    style = partitioning if isinstance(partitioning, str) else getattr(partitioning, "style", "hive")
    if partitioning is not None and style != "hive":
        raise InvalidArgumentError(f"{where}(partitioning={partitioning!r}): hive folders (the default) or None; "
                                   "filter other layouts with partition_filter=PathPartitionFilter.of(...).")
    return dataclasses.replace(_file_options(include_paths, ray_only), hive=partitioning is not None)


def _no_partitioning(partitioning: Any) -> dict[str, Any]:
    return {"partitioning": None} if partitioning is None else {}


def read_json(paths: str | list[str], *, filesystem: Any = None, lines: bool = False, include_paths: bool = False,
              partitioning: Any = "hive", **arrow_json_args: Any) -> Dataset:
    """JSON files: JSON lines (one object per line) or one JSON array of objects, told apart by content
    whatever ``lines`` says (Ray's default, ``lines=False``, reads both too); ``include_paths`` and
    ``partitioning`` as in :func:`read_csv`."""
    ray_only = _ray_only(arrow_json_args)
    options = _text_options(include_paths, ray_only, partitioning, "read_json")
    return _read("ReadJSON", _src.json_tasks(paths, filesystem, options, **arrow_json_args),
                 RayCall.of("read_json", paths, **({"lines": True} if lines else {}), **_fs(filesystem), **ray_only,
                            **_paths(include_paths), **_no_partitioning(partitioning), **arrow_json_args))


def read_text(paths: str | list[str], *, filesystem: Any = None, encoding: str = "utf-8",
              drop_empty_lines: bool = True, include_paths: bool = False, **ray_options: Any) -> Dataset:
    """Text files: one row per line, column ``text`` (and ``path`` with ``include_paths``)."""
    ray_only = _ray_options_only("read_text", ray_options)
    return _read("ReadText", _src.text_tasks(paths, filesystem, encoding, drop_empty_lines,
                                             _file_options(include_paths, ray_only)),
                 RayCall.of("read_text", paths, encoding=encoding, drop_empty_lines=drop_empty_lines,
                            **_paths(include_paths), **_fs(filesystem), **ray_only))


def read_binary_files(paths: str | list[str], *, filesystem: Any = None, include_paths: bool = False,
                      **ray_options: Any) -> Dataset:
    """Whole files: one row per file, column ``bytes`` (and ``path`` with ``include_paths``); the bytes
    as stored unless ``arrow_open_stream_args={"compression": ...}`` says how to decompress them."""
    ray_only = _ray_options_only("read_binary_files", ray_options)
    return _read("ReadBinary", _src.binary_tasks(paths, filesystem, _file_options(include_paths, ray_only)),
                 RayCall.of("read_binary_files", paths, include_paths=include_paths, **_fs(filesystem), **ray_only))


def read_numpy(paths: str | list[str], *, filesystem: Any = None, include_paths: bool = False,
               **ray_options: Any) -> Dataset:
    """``.npy`` files (``file_extensions=`` to pick others): one row per element of each array's first
    axis, column ``data`` (a tensor column for arrays of 2 or more dimensions), as Ray's."""
    ray_only = _ray_options_only("read_numpy", ray_options)
    return _read("ReadNumpy", _src.numpy_tasks(paths, filesystem, _file_options(include_paths, ray_only)),
                 RayCall.of("read_numpy", paths, include_paths=include_paths, **_fs(filesystem), **ray_only))


def read_images(paths: str | list[str], *, filesystem: Any = None, size: tuple[int, int] | None = None,
                mode: str | None = None, include_paths: bool = False, **ray_options: Any) -> Dataset:
    """Image files (png, jpg, tiff, bmp, gif by default; ``file_extensions=`` to pick others): one row
    per file, column ``image``, a uint8 array (height, width, channels), as Ray's. ``size=(height,
    width)`` resizes each, ``mode`` converts it (Pillow's ``"RGB"``, ``"L"``...). Images of different
    sizes make a variable-shape tensor column. Needs Pillow (``pip install "muster[data]"``)."""
    if size is not None and not (isinstance(size, (tuple, list)) and len(size) == 2
                                 and all(isinstance(v, int) and v > 0 for v in size)):
        raise InvalidArgumentError(f"read_images(size={size!r}): pass (height, width), two positive integers.")
    ray_only = _ray_options_only("read_images", ray_options)
    return _read("ReadImages", _src.image_tasks(paths, filesystem, (size[0], size[1]) if size else None, mode,
                                                _file_options(include_paths, ray_only)),
                 RayCall.of("read_images", paths, size=size, mode=mode, include_paths=include_paths,
                            **_fs(filesystem), **ray_only))


def _ray_options_only(where: str, options: dict[str, Any]) -> dict[str, Any]:
    """Ray's read options, for a reader that takes no others: anything else is named as unknown."""
    ray_only = _ray_only(options)
    if options:
        raise InvalidTypeError(f"{where}() got unexpected keyword argument(s) {sorted(options)}; it takes "
                               f"filesystem=, include_paths= and Ray's {', '.join(_RAY_READ_OPTIONS)}.")
    return ray_only


def read_datasource(datasource: Datasource, *, parallelism: int = -1, override_num_blocks: int | None = None,
                    **read_args: Any) -> Dataset:
    """A custom source's data: ``datasource.get_read_tasks(n)`` is asked once, now, for its read tasks,
    which then run as muster's own read tasks do (lazily, in parallel, streaming; again each pass).

    Args:
        datasource: an instance of a :class:`Datasource` subclass.
        override_num_blocks: the ``n`` given to ``get_read_tasks`` (default: as Ray picks it, from
            ``estimate_inmemory_data_size()`` and the CPUs, 200 at most unless the data is large).
        parallelism: Ray's deprecated name for ``override_num_blocks``.
        read_args: Ray's task options (``num_cpus``, ``concurrency``, ``ray_remote_args``...: no effect
            here, passed on to Ray on the Ray engine); for a legacy source (``create_reader``/
            ``prepare_read``), its read arguments.

    Raises:
        InvalidTypeError: ``datasource`` is no Datasource, or ``get_read_tasks`` returns no list of ReadTasks.
        DataTypeError: (when read) a read task yields something that is no block.
        UserFunctionError: (when read) a read task raised.
    """
    num_blocks = _num_blocks("read_datasource", parallelism, override_num_blocks)
    tasks = _custom.read_tasks(datasource, num_blocks, read_args)
    ray_args = dict(read_args, override_num_blocks=num_blocks)
    return _read(f"Read{datasource.get_name()}", tasks, RayCall.of("read_datasource", datasource, **ray_args))


def read_sql(sql: str, connection_factory: Callable[[], Any], *, sql_params: Any = None,
             shard_keys: list[str] | None = None, shard_hash_fn: str = "MD5", parallelism: int = -1,
             override_num_blocks: int | None = None, **ray_options: Any) -> Dataset:
    """The rows of a SQL query, from any database with a DB-API 2 (PEP 249) connector, read lazily: each read
    task calls ``connection_factory()``, runs the query and closes the connection. Columns are named as the
    cursor's ``description`` names them and typed from the values the connector returns (sqlite3: int64,
    double, string, binary; null for a column of NULLs only).

    Args:
        sql: the query.
        connection_factory: a function of no arguments returning a DB-API 2 connection, e.g.
            ``lambda: sqlite3.connect("example.db")``.
        sql_params: parameters bound to the query, in the connector's placeholder style.
        shard_keys: columns whose hash (``MOD(ABS(shard_hash_fn(key)), n)``) splits the read into tasks, where
            the database has ``MOD``, ``ABS``, ``shard_hash_fn`` (and ``CONCAT`` for several keys); without
            them, or where the database lacks those, the read is one task.
        shard_hash_fn: the database's hash function for ``shard_keys`` (``"MD5"``; ``"hash"``, ``"SHA"``...).
        override_num_blocks: the read tasks to split into (needs ``shard_keys``; fewer for few rows: one per
            50 at most). Default: as Ray picks it (200), when the database can shard.
        parallelism: Ray's deprecated name for ``override_num_blocks``.
        ray_options: Ray's task options (``num_cpus``, ``concurrency``, ``ray_remote_args``...: no effect
            here, passed on to Ray on the Ray engine).

    Raises:
        InvalidTypeError: ``sql`` is no str, ``connection_factory`` is not callable, or an unknown option.
        InvalidArgumentError: ``override_num_blocks > 1`` without ``shard_keys``, or the database cannot run
            the sharding query (it is tried now).
        UserFunctionError: (when read) the connection factory or the query failed.
        DataTypeError: (when read) the factory returned no DB-API 2 connection.
        DataSchemaError: (when read) a column holds values of types that make no one Arrow column.
    """
    _sql.check_arguments(sql, connection_factory, shard_keys, shard_hash_fn, ray_options)
    num_blocks = _num_blocks("read_sql", parallelism, override_num_blocks)
    source = _sql.SQLDatasource(sql, connection_factory, shard_hash_fn, shard_keys, sql_params)
    _sql.check_sharding(source, num_blocks, shard_keys)
    ray_args = dict(ray_options, sql_params=sql_params, shard_keys=shard_keys, shard_hash_fn=shard_hash_fn,
                    override_num_blocks=num_blocks)
    return _read("ReadSQL", _custom.read_tasks(source, num_blocks, {}),
                 RayCall.of("read_sql", sql, connection_factory, **ray_args))


def _rows() -> int:
    return DataContext.get_current().target_block_rows


def _num_blocks(where: str, parallelism: int, override_num_blocks: int | None) -> int | None:
    """``override_num_blocks``, or Ray's deprecated ``parallelism`` (which wins when given, as in Ray)."""
    if parallelism == -1:
        return override_num_blocks
    warnings.warn(f"{where}(parallelism={parallelism}): parallelism is deprecated (as in Ray since 2.10); "
                  f"pass override_num_blocks={parallelism} instead.", DeprecationWarning, stacklevel=3)
    return parallelism


def from_items(items: list[Any], *, parallelism: int = -1, override_num_blocks: int | None = None) -> Dataset:
    """Rows from a list of dicts (other values become a column ``item``); blocks of
    ``DataContext.target_block_rows`` rows, fewer where they would pass ``target_max_block_size`` bytes, and a
    few rows in two blocks per CPU of the engine (fewer with fewer rows, two a block at least), so a slow map
    uses every CPU."""
    num_blocks = _num_blocks("from_items", parallelism, override_num_blocks)
    if isinstance(items, (str, bytes, dict)) or not hasattr(items, "__iter__"):  # a dict or a str: odd rows
        raise InvalidTypeError(f"from_items({items!r}): pass a list of rows, e.g. [{{'x': 1}}, {{'x': 2}}] "
                               "(other values become a column 'item').")
    items = list(items)
    rows = [x if isinstance(x, dict) else {"item": x} for x in items]
    if num_blocks:  # Ray's num_blocks slices, each converted on its own (arrays in one, None in the next: a
        # tensor column with nulls, as in Ray), then sliced again as muster's
        parts = max(1, min(len(rows), num_blocks))
        cuts = [i * (len(rows) // parts) + min(i, len(rows) % parts) for i in builtins.range(parts + 1)]
        converted = [_blk.rows_to_block(rows[a:b], "from_items") for a, b in zip(cuts, cuts[1:])]
        blocks = _mem.table_blocks(_blk.concat(converted), parallelism=num_blocks)
    else:
        blocks = [b for i in builtins.range(0, len(rows), _rows())
                  for b in _mem.table_blocks(_blk.rows_to_block(rows[i:i + _rows()], "from_items"))]
        few = _mem.small_source_blocks(len(rows))  # a few rows: two blocks per CPU
        if blocks and len(blocks) < few:
            blocks = _mem.even_blocks(_blk.concat(blocks), few)
    return from_blocks(blocks or [pa.table({})], "FromItems")


def from_torch(dataset: Any, local_read: bool = False) -> Dataset:
    """A torch ``Dataset`` (map-style or iterable) as rows ``{"item": sample}``, as Ray's; tensors
    become numpy arrays. It is read here, once, into memory (``local_read`` is Ray's and changes
    nothing). A sample that is a tuple (``TensorDataset``'s ``(x, y)``) is refused: Ray keeps it as a
    Python object, muster's columns are Arrow; make the rows yourself, e.g.
    ``from_items([{"x": x.numpy(), "y": int(y)} for x, y in dataset])``; so is a dict holding tensors
    (``from_items([dataset[i] for i in range(len(dataset))])`` makes a column per key).

    Raises:
        InvalidTypeError: no torch Dataset, or samples that are tuples or dicts holding tensors."""
    if not (hasattr(dataset, "__iter__") or hasattr(dataset, "__getitem__")):
        raise InvalidTypeError(f"from_torch({type(dataset).__name__}): pass a torch.utils.data.Dataset.")
    if hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__"):
        samples = [dataset[i] for i in builtins.range(len(dataset))]
    else:
        samples = list(dataset)
    if samples and isinstance(samples[0], (tuple, list)):
        raise InvalidTypeError(
            f"from_torch: the samples are {type(samples[0]).__name__}s of {len(samples[0])}; muster keeps columns, "
            "not Python objects: make named columns, e.g. from_items([{'x': x.numpy(), 'y': int(y)} for x, y in "
            "dataset])."
        )
    if samples and isinstance(samples[0], dict) and any(_blk._is_torch_tensor(v) for v in samples[0].values()):
        raise InvalidTypeError(
            f"from_torch: the samples are dicts holding tensors ({_blk._short(samples[0], 120)}); Ray keeps each "
            "as one Python object in column 'item', muster's columns are Arrow. Make a column per key instead "
            "(tensors are stored as numpy arrays): from_items([dataset[i] for i in range(len(dataset))]), or "
            "from_items(list(dataset)) for an IterableDataset."
        )
    return from_blocks([_blk.rows_to_block([{"item": x} for x in samples], "from_torch")], "FromTorch")


def from_arrow(tables: pa.Table | list[pa.Table], *, override_num_blocks: int | None = None) -> Dataset:
    """Rows of Arrow tables (or record batches); ``override_num_blocks`` slices them into that many blocks."""
    tables = [tables] if isinstance(tables, (pa.Table, pa.RecordBatch)) else list(tables)
    blocks = [_as_table(t) for t in tables]
    if override_num_blocks:
        return from_blocks(_mem.table_blocks(_blk.concat(blocks), parallelism=override_num_blocks), "FromArrow")
    return from_blocks([b for t in blocks for b in _mem.table_blocks(t)], "FromArrow")


def from_pandas(dfs: Any, *, override_num_blocks: int | None = None) -> Dataset:
    """Rows from one DataFrame or a list of them (a column of same-shape ndarrays becomes a tensor column)."""
    frames = _data_frames(dfs if isinstance(dfs, list) else [dfs], "from_pandas")
    blocks = [_pandas_block(df, "from_pandas") for df in frames]
    if override_num_blocks:
        blocks = _mem.table_blocks(_blk.concat(blocks), parallelism=override_num_blocks)
    return from_blocks(blocks, "FromPandas")


def _pandas_block(df: Any, where: str) -> pa.Table:
    """A DataFrame as a block, its pandas ``string`` columns (text's default dtype under pandas 3) as Arrow
    ``string``, the type Ray's schema shows for them and the one ``from_items``/``read_*`` give, not pyarrow's
    ``large_string`` (so the datasets union); a column past ``string``'s 2 GiB limit stays ``large_string``."""
    import pandas as pd

    table = _blk.from_batch(df, where)
    for i, dtype in enumerate(df.dtypes):
        if isinstance(dtype, pd.StringDtype) and pa.types.is_large_string(table.schema.field(i).type):
            try:
                column = table.column(i).cast(pa.string())
            except pa.ArrowInvalid:  # over 2 GiB of text in one chunk
                continue
            table = table.set_column(i, table.schema.field(i).with_type(pa.string()), column)
    return table


def _data_frames(frames: list[Any], where: str) -> list[Any]:
    """``frames``, each a pandas DataFrame, or the error that says so in ``where``'s words."""
    import pandas as pd

    bad = [f for f in frames if not isinstance(f, pd.DataFrame)]
    if bad:
        raise InvalidTypeError(f"{where}(): got a {type(bad[0]).__name__} ({bad[0]!r:.80}); pass a pandas DataFrame "
                               "or a list of them (for a list of rows, use from_items).")
    return frames


def from_numpy(ndarrays: np.ndarray | list[np.ndarray]) -> Dataset:
    """Arrays as a column ``data`` (rows along the first axis).

    Raises:
        InvalidTypeError: something other than an ndarray or a list of them (a dict of columns, a scalar).
    """
    arrays = ndarrays if isinstance(ndarrays, list) else [ndarrays]
    blocks = [_numpy_table(a, "from_numpy") for a in arrays]
    return from_blocks([b for t in blocks for b in _mem.table_blocks(t)], "FromNumpy")


def _numpy_table(value: Any, where: str) -> pa.Table:
    """One array as a table of column ``data``; anything without a first axis is refused, naming the fix."""
    array = None if isinstance(value, dict) else np.asarray(value)
    if array is None or array.ndim == 0:
        raise InvalidTypeError(
            f"{where}({_blk._short(value, 120)}): takes an ndarray (one row per item along its first axis) or a "
            f"list of them (got {type(value).__name__}). For named columns use from_items([{{'a': 1, 'b': 2}}, "
            "...]), from_pandas(pd.DataFrame(columns)) or from_arrow(pa.table(columns)).")
    return pa.table({"data": _blk.array_from_values(array)})


def _ref_values(refs: Any, where: str) -> list[Any]:
    """The values of one ``ObjectRef`` or a list of them (Ray's ``from_*_refs`` take either)."""
    from muster.tasks import objects  # the tasks layer, only when refs are given

    many = refs if isinstance(refs, (list, tuple)) else [refs]
    bad = [r for r in many if not isinstance(r, objects.ObjectRef)]
    if bad:
        raise InvalidTypeError(f"{where}({bad[0]!r}): pass an ObjectRef or a list of them (from muster.put); for "
                               f"in-memory values use {where.removesuffix('_refs')}.")
    return list(objects.get(list(many)))


def from_arrow_refs(tables: Any) -> Dataset:
    """``from_arrow`` of the Arrow tables these ``ObjectRef`` s hold, one block each (as Ray's)."""
    return from_blocks(list(map(_as_table, _ref_values(tables, "from_arrow_refs"))), "FromArrow")


def from_pandas_refs(dfs: Any) -> Dataset:
    """``from_pandas`` of the DataFrames these ``ObjectRef`` s hold, one block each (as Ray's)."""
    frames = _data_frames(_ref_values(dfs, "from_pandas_refs"), "from_pandas_refs")
    return from_blocks([_pandas_block(df, "from_pandas_refs") for df in frames], "FromPandas")


def from_numpy_refs(ndarrays: Any) -> Dataset:
    """``from_numpy`` of the arrays these ``ObjectRef`` s hold: column ``data``, one block each (as Ray's)."""
    return from_blocks([_numpy_table(a, "from_numpy_refs") for a in _ref_values(ndarrays, "from_numpy_refs")],
                       "FromNumpy")


def _as_table(value: Any) -> pa.Table:
    return value if isinstance(value, pa.Table) else pa.Table.from_batches([value])


def _row_count(n: Any, where: str) -> int:
    """``n`` rows, 0 for a negative ``n`` (Ray 2.60's ``range(-3)`` is an empty dataset)."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise InvalidArgumentError(f"{where}({n!r}): use an integer, the number of rows (e.g. {where}(10)).")
    return max(int(n), 0)


def range(n: int, *, parallelism: int = -1, override_num_blocks: int | None = None) -> Dataset:  # noqa: A001
    """Rows ``{"id": 0} ... {"id": n-1}`` (``range`` is Ray's name); none for ``n <= 0``, as Ray's (and Python's).
    Blocks of ``DataContext.target_block_rows`` rows, and a small range in two per CPU of the engine (fewer with
    fewer rows, two a block at least): ``range(10)`` on 4 CPUs is 5 blocks of 2 rows."""
    n = _row_count(n, "range")
    num_blocks = _num_blocks("range", parallelism, override_num_blocks)
    rows = -(-n // num_blocks) if num_blocks else _mem.range_rows(n, 8)
    return _read("ReadRange", _mem.range_tasks(n, max(1, rows), None),
                 RayCall.of("range", n, override_num_blocks=num_blocks))


def range_tensor(n: int, *, shape: tuple[int, ...] = (1,), parallelism: int = -1,
                 override_num_blocks: int | None = None) -> Dataset:
    """Rows ``{"data": array of shape ``shape`` filled with i}`` (int64), in blocks of at most
    ``DataContext.target_max_block_size`` bytes (and ``target_block_rows`` rows), a small one in two per CPU of
    the engine (fewer with fewer rows), as ``range``."""
    n = _row_count(n, "range_tensor")
    num_blocks = _num_blocks("range_tensor", parallelism, override_num_blocks)
    rows = -(-n // num_blocks) if num_blocks else _mem.range_rows(n, 8 * math.prod(shape))
    return _read("ReadRangeTensor", _mem.range_tasks(n, max(1, rows), tuple(shape)),
                 RayCall.of("range_tensor", n, shape=tuple(shape), override_num_blocks=num_blocks))


def __getattr__(name: str) -> Any:
    if name in ("datasource", "aggregate", "collate_fn"):  # Ray scripts reach them as ray.data.aggregate.X
        import importlib

        return importlib.import_module(f"muster.data.{name}")
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.data", name)
