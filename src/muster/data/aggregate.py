"""Aggregations for ``Dataset.aggregate(*aggs)`` and ``groupby(...).aggregate(*aggs)``, by Ray's names.

The built-in ones (``Count``, ``Sum``, ``Min``, ``Max``, ``Mean``, ``Std``, ``Unique``) run as
Arrow's grouped aggregations; Ray's others (``AbsMax``, ``Quantile``, ``CountDistinct``,
``MissingValuePercentage``, ``ZeroPercentage``) gather each group's column and compute it with
pyarrow; an ``AggregateFn`` runs its Python functions over each group's rows.
Each output column is named as Ray names it (``sum(x)``, ``count()``), or ``alias_name``.
"""

from __future__ import annotations

from typing import Any, Callable

from muster.exceptions import InvalidArgumentError, InvalidTypeError


class AggregateFn:
    """An aggregation of your own: ``init(key) -> acc``, then ``accumulate_row(acc, row)`` (or
    ``accumulate_block(acc, pyarrow.Table)``) over a group's rows, ``merge(acc, acc)`` and ``finalize(acc)``."""

    method = "custom"

    def __init__(self, init: Callable[[Any], Any], merge: Callable[[Any, Any], Any], name: str,
                 accumulate_row: Callable[[Any, dict[str, Any]], Any] | None = None,
                 accumulate_block: Callable[[Any, Any], Any] | None = None,
                 finalize: Callable[[Any], Any] | None = None):
        if (accumulate_row is None) == (accumulate_block is None):
            raise InvalidArgumentError(f"AggregateFn(name={name!r}): pass exactly one of accumulate_row and "
                                       "accumulate_block.")
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"AggregateFn(name={name!r}): name the output column.")
        self.init, self.merge, self.name = init, merge, name
        self.accumulate_row, self.accumulate_block, self.finalize = accumulate_row, accumulate_block, finalize
        self.on: str | None = None
        self.options: dict[str, Any] = {}

    def run(self, key: Any, table: Any) -> Any:
        """This aggregation over one group's rows (a pyarrow Table)."""
        acc = self.init(key)
        if self.accumulate_block is not None:
            acc = self.accumulate_block(acc, table)
        else:
            for row in table.to_pylist():
                acc = self.accumulate_row(acc, row)  # type: ignore[misc]
        return self.finalize(acc) if self.finalize is not None else acc

    def to_ray(self) -> Any:
        import ray.data.aggregate as ray_agg

        given = {"accumulate_row": self.accumulate_row, "accumulate_block": self.accumulate_block}
        return ray_agg.AggregateFn(init=self.init, merge=self.merge, name=self.name, finalize=self.finalize,
                                   **{k: v for k, v in given.items() if v is not None})


class AggregateFnV2(AggregateFn):
    """Ray's base for an aggregation of your own: subclass it, call ``super().__init__(name, zero_factory,
    on=, ignore_nulls=)``, and define ``aggregate_block(block) -> accumulator`` (a group's rows, a pyarrow
    Table: read it with ``BlockAccessor.for_block``; None: nothing to add), ``combine(acc, acc) -> acc``
    and, optionally, ``finalize(acc) -> value`` (default: the accumulator itself). Each group starts from
    ``zero_factory()``; a group whose accumulator is None gives None."""

    def __init__(self, name: str, zero_factory: Callable[[], Any], *, on: str | None, ignore_nulls: bool):
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"{type(self).__name__}(name={name!r}): name the output column.")
        self._target_col_name, self._ignore_nulls, self._zero = on, ignore_nulls, zero_factory
        self._agg_name = name.split("(", 1)[0] if name.endswith(")") and "(" in name else name
        self.name, self.on, self.options = name, on, {}  # AggregateFn's init/merge/accumulate: the methods below

    def get_target_column(self) -> str | None:
        return self._target_col_name

    def get_agg_name(self) -> str:
        """``sum`` for an aggregation named ``sum(x)``."""
        return self._agg_name

    def aggregate_block(self, block: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}: define aggregate_block(block) -> a partial accumulator.")

    def combine(self, current_accumulator: Any, new: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}: define combine(current_accumulator, new) -> accumulator.")

    def finalize(self, accumulator: Any) -> Any:
        return accumulator

    def run(self, key: Any, table: Any) -> Any:
        return self._finish(self._add_block(self._zero(), table))

    def to_ray(self) -> Any:
        import ray.data.aggregate as ray_agg

        return ray_agg.AggregateFn(init=lambda _key: self._zero(), merge=self._merge, name=self.name,
                                   accumulate_block=self._add_block, finalize=self._finish)

    def _add_block(self, acc: Any, block: Any) -> Any:
        return self._merge(acc, self.aggregate_block(block))

    def _merge(self, acc: Any, new: Any) -> Any:
        return acc if new is None else new if acc is None else self.combine(acc, new)

    def _finish(self, acc: Any) -> Any:
        return None if acc is None else self.finalize(acc)


class _Builtin(AggregateFn):
    method = ""

    def __init__(self, on: str | None = None, ignore_nulls: bool = True, alias_name: str | None = None, **options: Any):
        cls = type(self).__name__
        if on is not None and not isinstance(on, str):
            raise InvalidTypeError(f"{cls}(on={on!r}): pass one column name (one aggregation per column).")
        if on is None and self.method != "count":
            raise InvalidArgumentError(f"{cls}(): name the column to aggregate, e.g. {cls}('x').")
        self.on, self.alias_name = on, alias_name
        self.options = {"ignore_nulls": ignore_nulls, **options}
        self.name = alias_name or f"{self.method}({on or ''})"

    def to_ray(self) -> Any:
        import ray.data.aggregate as ray_agg

        extra = {k: v for k, v in self.options.items() if k != "ignore_nulls"}
        return getattr(ray_agg, type(self).__name__)(self.on, ignore_nulls=self.options["ignore_nulls"],
                                                     alias_name=self.alias_name, **extra)


class Count(_Builtin):
    """Rows per group (``on``: that column's values; nulls count unless ``ignore_nulls``)."""

    method = "count"

    def __init__(self, on: str | None = None, ignore_nulls: bool = False, alias_name: str | None = None):
        super().__init__(on, ignore_nulls, alias_name)


class Sum(_Builtin):
    method = "sum"


class Min(_Builtin):
    method = "min"


class Max(_Builtin):
    method = "max"


class Mean(_Builtin):
    method = "mean"


class Std(_Builtin):
    """The standard deviation (the sample one with ``ddof=1``, as Ray's)."""

    method = "std"

    def __init__(self, on: str | None = None, ddof: int = 1, ignore_nulls: bool = True, alias_name: str | None = None):
        super().__init__(on, ignore_nulls, alias_name, ddof=ddof)


class Unique(_Builtin):
    """The distinct values of ``on`` per group, as a list."""

    method = "unique"

    def __init__(self, on: str | None = None, ignore_nulls: bool = False, alias_name: str | None = None):
        super().__init__(on, ignore_nulls, alias_name)


class _ColumnFn(AggregateFn):
    """One of Ray's other built-ins: each group's values of ``on``, gathered, then one pyarrow computation."""

    prefix = ""

    def __init__(self, on: str | None = None, alias_name: str | None = None, **options: Any):
        cls = type(self).__name__
        if not isinstance(on, str) or not on:
            raise InvalidArgumentError(f"{cls}(on={on!r}): name the one column to aggregate, e.g. {cls}('x').")
        super().__init__(init=lambda _key: [], merge=lambda a, b: a + b, name=alias_name or f"{self.prefix}({on})",
                         accumulate_block=self._gather, finalize=self._finish)
        self.on, self.alias_name, self.options = on, alias_name, options

    def _gather(self, acc: list, table: Any) -> list:
        acc.append(table.column(self.on))
        return acc

    def _finish(self, acc: list) -> Any:
        import pyarrow as pa

        chunks = [c for column in acc for c in column.chunks]
        column = pa.chunked_array(chunks, type=acc[0].type) if acc else pa.chunked_array([], type=pa.null())
        return self.compute(column)

    def compute(self, column: Any) -> Any:
        raise NotImplementedError

    def to_ray(self) -> Any:
        import ray.data.aggregate as ray_agg

        return getattr(ray_agg, type(self).__name__)(self.on, alias_name=self.alias_name, **self.options)


class AbsMax(_ColumnFn):
    """The largest absolute value of ``on``."""

    prefix = "abs_max"

    def __init__(self, on: str | None = None, ignore_nulls: bool = True, alias_name: str | None = None):
        super().__init__(on, alias_name, ignore_nulls=ignore_nulls)

    def compute(self, column: Any) -> Any:
        import pyarrow.compute as pc

        if column.null_count and not self.options["ignore_nulls"]:
            return None
        return pc.max(pc.abs(column)).as_py() if len(column) - column.null_count else None


class Quantile(_ColumnFn):
    """The ``q`` quantile of ``on`` (0.5: the median), exact, interpolated linearly between values."""

    prefix = "quantile"

    def __init__(self, on: str | None = None, q: float = 0.5, ignore_nulls: bool = True,
                 alias_name: str | None = None):
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 <= q <= 1:
            raise InvalidArgumentError(f"Quantile(q={q!r}): give a number from 0 to 1 (0.5 is the median).")
        super().__init__(on, alias_name, q=q, ignore_nulls=ignore_nulls)

    def compute(self, column: Any) -> Any:
        import pyarrow.compute as pc

        if column.null_count and not self.options["ignore_nulls"]:
            return None
        if len(column) == column.null_count:
            return None
        return pc.quantile(column, q=self.options["q"], interpolation="linear").to_pylist()[0]


class CountDistinct(_ColumnFn):
    """How many distinct values ``on`` has (a null counts as one unless ``ignore_nulls``)."""

    prefix = "count_distinct"

    def __init__(self, on: str | None = None, ignore_nulls: bool = True, alias_name: str | None = None):
        super().__init__(on, alias_name, ignore_nulls=ignore_nulls)

    def compute(self, column: Any) -> Any:
        import pyarrow.compute as pc

        mode = "only_valid" if self.options["ignore_nulls"] else "all"
        return pc.count_distinct(column, mode=mode).as_py()


class MissingValuePercentage(_ColumnFn):
    """The percentage of ``on``'s values that are null (or NaN); None for no rows."""

    prefix = "missing_pct"

    def __init__(self, on: str | None = None, alias_name: str | None = None):
        super().__init__(on, alias_name)

    def compute(self, column: Any) -> Any:
        import pyarrow.compute as pc

        if not len(column):
            return None
        missing = pc.sum(pc.is_null(column, nan_is_null=True)).as_py() or 0
        return missing / len(column) * 100.0


class ZeroPercentage(_ColumnFn):
    """The percentage of ``on``'s values that are zero, of its non-null values (of all with
    ``ignore_nulls=False``); None for none."""

    prefix = "zero_pct"

    def __init__(self, on: str | None = None, ignore_nulls: bool = True, alias_name: str | None = None):
        super().__init__(on, alias_name, ignore_nulls=ignore_nulls)

    def compute(self, column: Any) -> Any:
        import pyarrow.compute as pc

        count = len(column) - (column.null_count if self.options["ignore_nulls"] else 0)
        if not count:
            return None
        zeros = pc.sum(pc.equal(column, 0)).as_py() or 0
        return zeros / count * 100.0


__all__ = ["AbsMax", "AggregateFn", "AggregateFnV2", "Count", "CountDistinct", "Max", "Mean", "Min",
           "MissingValuePercentage", "Quantile", "Std", "Sum", "Unique", "ZeroPercentage"]


def as_rays_python_path(grouped: Any, aggs: list[Any]) -> Any:
    """A keyed aggregation's output (a pyarrow Table) with the types Ray 2.60 gives it.

    Ray runs a group-by on Arrow's kernels only when every aggregation has one (``Count``, ``Sum``, ``Min``,
    ``Max``, ``Mean``, ``Unique``, ``CountDistinct``, ``MissingValuePercentage``, ``ZeroPercentage``) and they
    are all collections (``Unique``, ``CountDistinct``) or none is; else (``Quantile``, ``AbsMax``, ``Std``, an
    ``AggregateFn`` of your own, or a mix) it builds the output from Python values, so every integer column
    (the keys too) comes out int64 and every float one double: an int32 key is int64 after ``Quantile``. A
    ``Std`` among only Ray's declared aggregations keeps Arrow's types here, the ones Ray's ``schema()`` and
    ``print`` declare for it unread (Ray's rows then have int64 keys)."""
    import pyarrow as pa

    declared = (Count, Sum, Min, Max, Mean, Std)
    arrow = (Count, Sum, Min, Max, Mean, Unique, CountDistinct, MissingValuePercentage, ZeroPercentage)
    collections = [isinstance(a, (Unique, CountDistinct)) for a in aggs]
    on_arrow = all(type(a) in arrow for a in aggs) and (all(collections) or not any(collections))
    if on_arrow or all(type(a) in declared for a in aggs):
        return grouped
    fields = []
    for f in grouped.schema:
        widen = pa.types.is_floating(f.type) or (pa.types.is_integer(f.type) and not pa.types.is_uint64(f.type))
        fields.append(f.with_type(pa.float64() if pa.types.is_floating(f.type) else pa.int64()) if widen else f)
    return grouped.cast(pa.schema(fields))


def unique_values(values: Any, column: str, ignore_nulls: bool) -> list[Any]:
    """``Dataset.unique``: the distinct values of a column (a pyarrow array), in first-seen order for lists.

    Arrow has no ``unique`` kernel for lists, so a list column's values (Ray gives the distinct lists) are
    compared as tuples; any other type Arrow cannot compare is refused naming the column and the fix."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = values.type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        seen: dict[Any, Any] = {}
        for v in values.to_pylist():
            seen.setdefault(_hashable(v), v)
        out = list(seen.values())
    else:
        try:
            out = pc.unique(values).to_pylist()
        except pa.ArrowNotImplementedError:
            from muster.data.exceptions import DataTypeError

            raise DataTypeError(
                f"unique({column!r}): column {column!r} is of type {kind}, whose values cannot be compared for "
                "distinct ones. Take unique() of a scalar field instead (e.g. add one with "
                "with_column / map), or drop duplicates yourself in a map_batches.") from None
    return [v for v in out if v is not None] if ignore_nulls else out


def _hashable(value: Any) -> Any:
    """``value`` (a list's item, possibly nested lists or dicts) as something a dict can key on."""
    if isinstance(value, list):
        return ("list", tuple(_hashable(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _hashable(v)) for k, v in value.items()))
    return value


def __getattr__(name: str) -> Any:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.data.aggregate", name)
