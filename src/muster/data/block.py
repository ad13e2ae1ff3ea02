"""Blocks are ``pyarrow.Table``s; this module converts them to and from the batch
formats user functions see (numpy dicts, pandas frames, Arrow tables) and rows.

Multi-dimensional numpy columns are stored as tensor columns (see :mod:`muster.data.tensor_columns`:
fixed-shape ones, so ``range_tensor`` and image-like columns round-trip without copies per row; variable-shape
ones for images of different sizes; None in some rows as nulls there).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional, TypeVar, Union

import numpy as np
import pyarrow as pa

from muster.data.exceptions import DataTypeError
from muster.data.tensor_columns import TENSOR_TYPES as _TENSOR_TYPES
from muster.data.tensor_columns import (  # noqa: F401 - also muster.data.block's names, as before
    VariableShapeTensorType, fixed_tensor_array, same_kind_of_tensor, stack_if_uniform, tensor_column_to_numpy,
    unify_tensors, variable_tensor_array)
from muster.exceptions import InvalidArgumentError, InvalidTypeError

if TYPE_CHECKING:
    import pandas

#: What a custom source's read task yields (Ray's ``ray.data.block.Block``): a pyarrow Table or a
#: pandas DataFrame; muster keeps every block as an Arrow table
Block = Union[pa.Table, "pandas.DataFrame"]
#: Ray's type variables for an aggregation's accumulator and output (``AggregateFnV2`` subclasses name them)
AggType = TypeVar("AggType")
U = TypeVar("U")


@dataclass(frozen=True)
class BlockMetadata:
    """What a read task knows of its blocks before reading them (Ray's ``ray.data.block.BlockMetadata``,
    with its fields in its order): ``num_rows`` (all its blocks together; ``count()`` sums them without
    reading when every task of a read knows its own), ``size_bytes`` (in memory), Ray's ``exec_stats`` and
    ``task_exec_stats`` (kept, unused), and ``input_files`` (``Dataset.input_files()``). None: unknown."""

    num_rows: Optional[int]
    size_bytes: Optional[int]
    exec_stats: Any
    task_exec_stats: Any = None
    input_files: Optional[tuple[str, ...]] = None

    def __post_init__(self) -> None:
        for name in ("num_rows", "size_bytes"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)
                                      or value < 0):
                raise InvalidTypeError(f"BlockMetadata({name}={value!r}): pass a whole number >= 0, or None "
                                       "when it is unknown.")
            if value is not None:
                object.__setattr__(self, name, int(value))
        files = self.input_files
        if files is not None:
            if isinstance(files, str) or not all(isinstance(f, str) for f in files):
                raise InvalidTypeError(f"BlockMetadata(input_files={files!r}): pass a list of paths (strings), "
                                       "or None.")
            object.__setattr__(self, "input_files", tuple(files))


BATCH_FORMATS = ("numpy", "pandas", "pyarrow", "default")


def check_batch_format(fmt: str | None, where: str, native: bool = True) -> str:
    """``fmt`` as one of muster's formats: ``"default"`` is numpy; ``None`` (``native``), as in Ray, the
    blocks' own format, a pyarrow Table."""
    if fmt is None and native:
        return "pyarrow"
    if fmt not in BATCH_FORMATS:
        choices = "'pandas', 'pyarrow' or None (the blocks' own format, pyarrow)" if native else "'pandas' or 'pyarrow'"
        raise InvalidArgumentError(f"{where}(batch_format={fmt!r}): use one of 'numpy' (default), {choices}.")
    return "numpy" if fmt == "default" else str(fmt)


def nbytes(block: pa.Table) -> int:
    return int(block.nbytes)


def column_to_numpy(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """One column as numpy: tensor columns keep their shape (an object array of ndarrays and None when some
    rows are null), strings become object arrays."""
    if isinstance(col.type, _TENSOR_TYPES):
        return tensor_column_to_numpy(col)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if pa.types.is_fixed_size_list(col.type) and col.null_count == 0:
        flat = col.flatten()  # one row per list, their values' dtype kept (a one-hot column stays uint8)
        if flat.null_count == 0:
            return flat.to_numpy(zero_copy_only=False).reshape(len(col), col.type.list_size)
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type) or pa.types.is_fixed_size_list(col.type):
        values = col.to_pylist()
        out = np.empty(len(values), dtype=object)
        for i, v in enumerate(values):
            out[i] = None if v is None else np.asarray(v)
        return stack_if_uniform(out)
    return col.to_numpy(zero_copy_only=False)


def to_numpy(block: pa.Table) -> dict[str, np.ndarray]:
    return {name: column_to_numpy(block.column(name)) for name in block.column_names}


def to_batch(block: pa.Table, fmt: str) -> Any:
    if fmt == "pyarrow":
        return block
    if fmt == "pandas":
        return to_pandas(block)
    return to_numpy(block)


def writable(batch: Any) -> Any:
    """A numpy batch whose read-only arrays (views of Arrow memory) are copied; other batches as they are."""
    if isinstance(batch, dict):
        return {k: v.copy() if isinstance(v, np.ndarray) and not v.flags.writeable else v for k, v in batch.items()}
    return batch


def _tensor_columns(block: pa.Table) -> list[str]:
    return [n for n in block.column_names if isinstance(block.schema.field(n).type, _TENSOR_TYPES)]


def _arrow_backed(dtype: pa.DataType) -> Any:
    """The pandas dtype of an Arrow-backed column for ``dtype``: Arrow's own types are kept (``pd.ArrowDtype``);
    a dictionary stays pandas' ``category``, a null-typed or extension column pandas' default (as Ray's)."""
    import pandas as pd

    if isinstance(dtype, pa.BaseExtensionType) or pa.types.is_dictionary(dtype) or pa.types.is_null(dtype):
        return None
    return pd.ArrowDtype(dtype)


def to_pandas(block: pa.Table, arrow_backed: bool | None = None) -> Any:
    """A block as a DataFrame, as Ray 2.60 converts one: Arrow-backed columns (``string[pyarrow]``,
    ``int64[pyarrow]`` with ``<NA>`` for nulls, ``list<item: int64>[pyarrow]``) unless
    ``DataContext.enable_arrow_backed_pandas_conversion`` is off or ``arrow_backed`` is False (then numpy
    dtypes); a tensor column holds one ndarray of the column's shape per row (as in Ray), where Arrow's own
    conversion would give each row its values flattened."""
    import pandas as pd

    from muster.data.context import DataContext

    if arrow_backed is None:
        arrow_backed = DataContext.get_current().enable_arrow_backed_pandas_conversion
    mapper = _arrow_backed if arrow_backed else None
    tensors = _tensor_columns(block)
    if not tensors:
        return block.to_pandas(types_mapper=mapper)
    plain = block.drop_columns(tensors)
    df = (plain.to_pandas(types_mapper=mapper) if plain.num_columns
          else pd.DataFrame(index=pd.RangeIndex(block.num_rows)))
    for name in tensors:
        stacked = column_to_numpy(block.column(name))
        cells = np.empty(len(stacked), dtype=object)
        for i in range(len(stacked)):
            cells[i] = stacked[i]
        df[name] = cells
    return df[block.column_names]


def _pandas_to_block(df: Any) -> pa.Table:
    """A DataFrame as a block: a column of same-shape ndarrays (what :func:`to_pandas` gives for a tensor
    column, or a function's output; None in some rows) becomes a tensor column again, not a list of flat lists."""
    tensors = [
        c for c in df.columns
        if df[c].dtype == object and any(isinstance(v, np.ndarray) for v in df[c])
        and all(v is None or isinstance(v, np.ndarray) and v.ndim >= 1 for v in df[c])
    ]
    if not tensors:
        return pa.Table.from_pandas(df, preserve_index=False).replace_schema_metadata(None)
    plain = (pa.Table.from_pandas(df.drop(columns=tensors), preserve_index=False)
             if len(tensors) < len(df.columns) else None)
    cols = {}
    for c in df.columns:
        name = str(c)
        cols[name] = (array_from_values(list(df[c]), name) if c in tensors
                      else plain.column(name))  # type: ignore[union-attr]
    return pa.table(cols)


def array_from_values(values: Any, column: str | None = None) -> pa.Array:
    """An Arrow array from a numpy array (any ndim), a list of arrays (None in some rows: nulls), or a list of
    scalars (``column``: its name, for errors).

    Raises:
        DataTypeError: arrays of different numbers of dimensions mixed with None or with other values.
    """
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values
    if isinstance(values, np.ndarray):
        if values.ndim > 1:
            return pa.FixedShapeTensorArray.from_numpy_ndarray(np.ascontiguousarray(values))
        if values.dtype == object:
            return array_from_values(list(values))
        return pa.array(values)
    if _is_torch_tensor(values):
        return array_from_values(values.detach().cpu().numpy())
    values = [_numpy_of(v) for v in values]  # torch tensors in rows are stored as numpy, as in Ray
    arrays = [v for v in values if v is not None]
    # 1-d arrays mixed with None make a list column, as in Ray; >1-d ones a tensor column with nulls (Ray
    # keeps them as Python objects: the same values, None and arrays, come back)
    nulls_ok = len(arrays) == len(values) or (arrays and isinstance(arrays[0], np.ndarray) and arrays[0].ndim > 1)
    if arrays and nulls_ok and all(isinstance(v, np.ndarray) for v in arrays):
        if len({v.shape for v in arrays}) == 1 and arrays[0].ndim >= 1:
            return fixed_tensor_array(values)
        if len({v.ndim for v in arrays}) == 1 and arrays[0].ndim >= 1 and arrays[0].dtype != object:
            return variable_tensor_array(values)  # ragged: one dtype kept (not nested int64 lists)
        if len(arrays) == len(values):
            return pa.array([v.tolist() for v in values])
    try:
        return pa.array([v.item() if isinstance(v, np.generic) else v for v in values])
    except pa.ArrowInvalid as exc:
        if not any(isinstance(v, np.ndarray) for v in values):
            raise
        kinds = sorted({f"{v.ndim}-d array" if isinstance(v, np.ndarray) else type(v).__name__ for v in values})
        raise DataTypeError(
            f"column {column or '?'!r} mixes {', '.join(kinds)} values ({exc}): a column holds arrays of one "
            "number of dimensions (None in some rows is fine) or scalars. Return one kind in every row (e.g. "
            "np.asarray(value) with the same ndim)."
        ) from exc


def _is_torch_tensor(value: Any) -> bool:
    return hasattr(value, "numpy") and hasattr(value, "detach") and hasattr(value, "device")


def _numpy_of(value: Any) -> Any:
    """A torch tensor as numpy (a 0-d one as its Python scalar); anything else as it is."""
    if not _is_torch_tensor(value):
        return value
    array = value.detach().cpu().numpy()
    return array.item() if array.ndim == 0 else array


def from_batch(batch: Any, where: str) -> pa.Table:
    """A user function's output batch (dict of columns, DataFrame or Table) as a block."""
    if isinstance(batch, pa.Table):
        return batch
    if isinstance(batch, pa.RecordBatch):
        return pa.Table.from_batches([batch])
    try:
        import pandas as pd

        if isinstance(batch, pd.DataFrame):
            return _pandas_to_block(batch)
    except ImportError:  # pragma: no cover - pandas ships with pyarrow's extras here
        pass
    if isinstance(batch, dict):
        if not batch:
            return pa.table({})
        columns = {str(k): array_from_values(_column_values(v, str(k), where), str(k)) for k, v in batch.items()}
        lengths = {name: len(col) for name, col in columns.items()}
        if len(set(lengths.values())) > 1:
            raise DataTypeError(
                f"{where} returned columns of different lengths, {lengths}: every column of a batch needs one "
                "value per row. Return as many values in each (or a list/ndarray per row in one column)."
            )
        return pa.table(columns)
    raise DataTypeError(
        f"{where} returned a {type(batch).__name__}; a batch function must return a dict of columns "
        "(name -> numpy array or list), a pandas DataFrame or a pyarrow Table."
    )


def _column_values(values: Any, name: str, where: str) -> Any:
    """``values``, a batch column's values (a list, an array...); a single value is an error that says so."""
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__len__") or getattr(values, "ndim", 1) == 0:
        raise DataTypeError(
            f"{where} returned a batch whose column {name!r} is a single {type(values).__name__} "
            f"({_short(values)}), not one value per row. Return a list or numpy array, e.g. "
            f"{{{name!r}: np.full(len(batch[...]), value)}}, or [value] for a one-row batch."
        )
    return values


def rows_to_block(rows: list[dict[str, Any]], where: str) -> pa.Table:
    """Rows (dicts) as a block; keys come from the first row, in order."""
    for row in rows:
        if not isinstance(row, dict):
            raise DataTypeError(
                f"{where} returned a {type(row).__name__} ({_short(row)}); it must return a dict such as "
                "{'x': 1}. Wrap the value: return {'item': value}."
            )
    if not rows:
        return pa.table({})
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row))
    return pa.table({str(k): array_from_values([r.get(k) for r in rows], str(k)) for k in names})


def iter_rows(block: pa.Table) -> Iterable[dict[str, Any]]:
    tensors = _tensor_columns(block)
    if not tensors:
        yield from block.to_pylist()
        return
    arrays = {n: column_to_numpy(block.column(n)) for n in tensors}
    plain = block.drop_columns(tensors).to_pylist() if len(tensors) < block.num_columns else [{}] * block.num_rows
    for i, row in enumerate(plain):
        out = dict(row)
        for n in tensors:
            out[n] = arrays[n][i]
        yield {n: out[n] for n in block.column_names}


def first_row(block: pa.Table | None) -> str:
    if block is None or block.num_rows == 0:
        return "(empty batch)"
    return _short(next(iter(iter_rows(block.slice(0, 1)))))


def _short(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def concat(blocks: list[pa.Table]) -> pa.Table:
    blocks = [b for b in blocks if b.num_columns or b.num_rows]
    if not blocks:
        return pa.table({})
    if len(blocks) == 1:
        return blocks[0]
    try:  # "permissive": string with large_string, int32 with int64 or float64..., widened as Ray's
        return pa.concat_tables(unify_tensors(blocks), promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise DataTypeError(
            f"blocks with different schemas cannot be combined: {exc} (the first block's schema: "
            f"{', '.join(f'{f.name}: {f.type}' for f in blocks[0].schema)}). Make every map return the same "
            "columns with types that widen to one (cast the column, e.g. pyarrow.compute.cast or .astype(...))."
        ) from exc


def bundled(blocks: Iterable[pa.Table], rows: int) -> Iterator[pa.Table]:
    """``blocks`` in order, consecutive ones combined until they hold at least ``rows`` (as Ray bundles a
    ``map_batches`` input for its ``batch_size``, so a batch can span blocks smaller than it)."""
    group: list[pa.Table] = []
    held = 0
    for b in blocks:
        group.append(b)
        held += b.num_rows
        if held >= rows:
            yield from combined(group)
            group, held = [], 0
    yield from combined(group)


def combined(blocks: list[pa.Table]) -> list[pa.Table]:
    """``blocks`` as one block (zero-copy: its columns keep their chunks), or as they are when their schemas
    cannot combine (the map's own output will say so, if it must)."""
    if len(blocks) < 2:
        return blocks
    try:
        return [concat(blocks)]
    except DataTypeError:
        return blocks


def gathered(blocks: list[pa.Table], max_bytes: int | None) -> list[pa.Table]:
    """A task's output ``blocks``, consecutive ones combined until they pass ``max_bytes``, as Ray's map tasks
    buffer their batches into blocks of ``target_max_block_size``: ``map_batches(batch_size=2)`` over a 10-row
    block gives one block (one file when written), not five. Each combined block is made contiguous: one copy
    here beats slicing many tiny chunks for every batch downstream."""
    if len(blocks) < 2:
        return blocks
    groups: list[list[pa.Table]] = [[]]
    held = 0
    for b in blocks:
        if max_bytes is not None and held > max_bytes:
            groups.append([])
            held = 0
        groups[-1].append(b)
        held += b.nbytes
    out = [b for group in groups for b in combined(group)]
    try:
        return [b.combine_chunks() if any(c.num_chunks > 1 for c in b.columns) else b for b in out]
    except pa.ArrowInvalid:  # a string column past 2 GiB (target_max_block_size=None): keep its chunks
        return out


def split_rows(block: pa.Table, rows: int) -> list[pa.Table]:
    if rows <= 0 or block.num_rows <= rows:
        return [block]
    return [block.slice(i, rows) for i in range(0, block.num_rows, rows)]


class BlockAccessor:
    """One block seen through Ray's ``ray.data.block.BlockAccessor`` (what a custom ``AggregateFnV2`` or
    ``BlockBasedFileDatasink`` is handed): ``BlockAccessor.for_block(block)`` of a pyarrow Table or a
    pandas DataFrame. Conversions, rows, slices and per-column ``count``/``sum``/``min``/``max``/``mean``
    (``ignore_nulls=False``: None when the column holds a null, as Ray's)."""

    def __init__(self, table: pa.Table):
        self._table = table

    @staticmethod
    def for_block(block: Block) -> "BlockAccessor":
        if isinstance(block, pa.Table):
            return BlockAccessor(block)
        if hasattr(block, "columns") and hasattr(block, "iloc"):
            return BlockAccessor(_pandas_to_block(block))
        raise InvalidTypeError(f"BlockAccessor.for_block({_short(block)}): a block is a pyarrow Table or a "
                               "pandas DataFrame.")

    def num_rows(self) -> int:
        return self._table.num_rows

    def size_bytes(self) -> int:
        return nbytes(self._table)

    def schema(self) -> pa.Schema:
        return self._table.schema

    def column_names(self) -> list[str]:
        return list(self._table.column_names)

    def to_arrow(self) -> pa.Table:
        return self._table

    def to_block(self) -> pa.Table:
        return self._table

    def to_pandas(self) -> Any:
        return to_pandas(self._table)

    def to_numpy(self, columns: str | list[str] | None = None) -> Any:
        """One column's array (``columns`` a name), or a dict of them (a list, or None: every column)."""
        if isinstance(columns, str):
            return column_to_numpy(self._table.column(columns))
        return {c: column_to_numpy(self._table.column(c)) for c in (columns or self._table.column_names)}

    def to_batch_format(self, batch_format: str | None) -> Any:
        return to_batch(self._table, check_batch_format(batch_format, "BlockAccessor.to_batch_format"))

    def iter_rows(self, public_row_format: bool = True) -> Iterable[dict[str, Any]]:
        return iter_rows(self._table)

    def slice(self, start: int, end: int, copy: bool = False) -> pa.Table:
        return self._table.slice(start, end - start)

    def take(self, indices: list[int]) -> pa.Table:
        return self._table.take(indices)

    def select(self, columns: list[str]) -> pa.Table:
        return self._table.select(columns)

    def count(self, on: str | None, ignore_nulls: bool = False) -> int:
        if on is None:
            return self._table.num_rows
        return _compute("count", self._table.column(on), mode="only_valid" if ignore_nulls else "all")

    def sum(self, on: str, ignore_nulls: bool) -> Any:
        return _compute("sum", self._table.column(on), skip_nulls=ignore_nulls)

    def min(self, on: str, ignore_nulls: bool) -> Any:
        return _compute("min", self._table.column(on), skip_nulls=ignore_nulls)

    def max(self, on: str, ignore_nulls: bool) -> Any:
        return _compute("max", self._table.column(on), skip_nulls=ignore_nulls)

    def mean(self, on: str, ignore_nulls: bool) -> Any:
        return _compute("mean", self._table.column(on), skip_nulls=ignore_nulls)


def _compute(name: str, column: pa.ChunkedArray, **options: Any) -> Any:
    import pyarrow.compute as pc

    if name == "count":
        return pc.count(column, mode=options["mode"]).as_py()
    return getattr(pc, name)(column, options=pc.ScalarAggregateOptions(**options)).as_py()
