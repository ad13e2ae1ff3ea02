"""``GroupedData``: what ``Dataset.groupby(key)`` returns."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable

from muster.data import alltoall
from muster.data import block as blk
from muster.data import strategies
from muster.data.plan import AllToAll, RayCall
from muster.exceptions import InvalidArgumentError, InvalidTypeError

if TYPE_CHECKING:
    from muster.data.dataset import Dataset


class GroupedData:
    """Rows grouped by one or more key columns (none: the whole dataset); each method returns a new ``Dataset``."""

    def __init__(self, dataset: "Dataset", keys: list[str], key: str | list[str] | None = None):
        self._ds, self._keys = dataset, keys
        self._key = key if key is not None or not keys else keys[0] if len(keys) == 1 else keys  # as given

    def __repr__(self) -> str:
        """As Ray's: ``GroupedData(dataset=<the dataset's repr>, key='k')``, the key as ``groupby`` was given it."""
        return f"{type(self).__name__}(dataset={self._ds!r}, key={self._key!r})"

    def _agg(self, method: str, on: str | list[str] | None, options: dict[str, Any] | None = None) -> "Dataset":
        """One built-in aggregation over each column of ``on`` (None: every column but the keys), named
        ``method(col)`` as Ray names them; ``options``: Ray's keywords (``ignore_nulls``, ``ddof``)."""
        from muster.data import aggregate as agg

        options = dict(options or {})
        cls = {"count": agg.Count, "sum": agg.Sum, "mean": agg.Mean, "min": agg.Min, "max": agg.Max,
               "std": agg.Std}[method]
        ddof = options.get("ddof", 1)
        if not isinstance(ddof, int) or isinstance(ddof, bool) or ddof < 0:
            raise InvalidArgumentError(f"std(ddof={ddof!r}): use an integer >= 0 (1: the sample deviation).")
        cols = None if on is None else ([on] if isinstance(on, str) else list(on))
        if cols is not None and (not cols or not all(isinstance(c, str) for c in cols)):
            raise InvalidArgumentError(f"{method}(on={on!r}): pass a column name, a list of them, "
                                       "or None (every column).")
        if method == "count":
            aggs = [agg.Count()]
        elif cols is None:
            aggs = [_template(cls, options)]
        else:
            aggs = [cls(c, **options) for c in cols]
        every = cols is None and method != "count"
        ray_args = [] if method == "count" or on is None else [on]
        ray = self._ray().then(method, *ray_args, **options)
        return self._ds._then(AllToAll("Aggregate", alltoall.aggregate(self._keys, aggs, every_column=every), ray=ray,
                                       schema_of=alltoall.aggregate_schema(self._keys, aggs, every)))

    def aggregate(self, *aggs: Any) -> "Dataset":
        """One row per group: the keys and one column per aggregation (``muster.data.aggregate``'s
        ``Count``, ``Sum``, ``Min``, ``Max``, ``Mean``, ``Std``, ``Unique``, or an ``AggregateFn``)."""
        from muster.data.aggregate import AggregateFn

        if not aggs or not all(isinstance(a, AggregateFn) for a in aggs):
            raise InvalidTypeError(
                f"aggregate{aggs!r}: pass one or more muster.data.aggregate objects, "
                "e.g. aggregate(Count(), Mean('x'))."
            )
        ray = self._ray().then("aggregate", *aggs)
        return self._ds._then(AllToAll("Aggregate", alltoall.aggregate(self._keys, list(aggs)), ray=ray,
                                       schema_of=alltoall.aggregate_schema(self._keys, list(aggs))))

    def _ray(self) -> RayCall:
        return RayCall.of("groupby", (self._keys if len(self._keys) > 1 else self._keys[0]) if self._keys else None)

    def count(self) -> "Dataset":
        """One row per group: the keys and ``count()``."""
        return self._agg("count", None)

    def sum(self, on: str | list[str] | None = None, ignore_nulls: bool = True) -> "Dataset":
        """One row per group: the keys and ``sum(<col>)`` for each column in ``on`` (None: every other column)."""
        return self._agg("sum", on, {"ignore_nulls": ignore_nulls})

    def mean(self, on: str | list[str] | None = None, ignore_nulls: bool = True) -> "Dataset":
        """One row per group: the keys and ``mean(<col>)`` for each column in ``on``."""
        return self._agg("mean", on, {"ignore_nulls": ignore_nulls})

    def min(self, on: str | list[str] | None = None, ignore_nulls: bool = True) -> "Dataset":
        """One row per group: the keys and ``min(<col>)`` for each column in ``on``."""
        return self._agg("min", on, {"ignore_nulls": ignore_nulls})

    def max(self, on: str | list[str] | None = None, ignore_nulls: bool = True) -> "Dataset":
        """One row per group: the keys and ``max(<col>)`` for each column in ``on``."""
        return self._agg("max", on, {"ignore_nulls": ignore_nulls})

    def std(self, on: str | list[str] | None = None, ddof: int = 1, ignore_nulls: bool = True) -> "Dataset":
        """One row per group: the keys and ``std(<col>)`` (sample standard deviation with ``ddof=1``)."""
        return self._agg("std", on, {"ddof": ddof, "ignore_nulls": ignore_nulls})

    def map_groups(self, fn: Callable[[Any], Any], *, batch_format: str | None = "numpy", fn_args: tuple = (),
                   fn_kwargs: dict[str, Any] | None = None, fn_constructor_args: tuple = (),
                   fn_constructor_kwargs: dict[str, Any] | None = None, **ray_options: Any) -> "Dataset":
        """Apply ``fn`` to each group (a batch in ``batch_format``); its outputs form the new dataset.

        ``fn`` may be a callable class, built once (with ``fn_constructor_args/kwargs``). The groups are
        mapped in this process; Ray's ``concurrency=``/``num_cpus=`` are passed on to Ray's engine only.
        """
        strategies.check_remote_args("map_groups", ray_options, named=("fn", "batch_format", "fn_args", "fn_kwargs"))
        fmt = blk.check_batch_format(batch_format, "map_groups")
        if (fn_constructor_args or fn_constructor_kwargs) and not isinstance(fn, type):
            raise InvalidArgumentError("map_groups(fn_constructor_args/kwargs=...) apply only when fn is a "
                                       "callable class.")
        call = alltoall.group_function(fn, tuple(fn_args), dict(fn_kwargs or {}), tuple(fn_constructor_args),
                                       dict(fn_constructor_kwargs or {}))
        given = {"fn_args": tuple(fn_args), "fn_kwargs": fn_kwargs, "fn_constructor_args": tuple(fn_constructor_args),
                 "fn_constructor_kwargs": fn_constructor_kwargs, **ray_options}
        ray = self._ray().then("map_groups", fn, batch_format=fmt,
                               **{k: v for k, v in given.items() if v not in (None, (), {})})
        return self._mapped(f"MapBatches({_ray_name(fn)})", alltoall.map_each_block(call, fmt, named=fn), ray)

    def with_column(self, column_name: str, expr: Any, **ray_remote_args: Any) -> "Dataset":
        """Every row, each group in turn (as ``map_groups`` orders them), with column ``column_name`` added
        (or replaced) by ``expr``, an expression of ``muster.data.expressions`` (``col("v") * 2``) evaluated
        over the group's rows, as Ray's. Ray's ``ray_remote_args`` change nothing here."""
        from muster.data import projection

        if not isinstance(column_name, str) or not column_name:
            raise InvalidArgumentError(f"groupby(...).with_column(column_name={column_name!r}): pass a non-empty "
                                       "column name.")
        where = f"groupby(...).with_column({column_name!r}, {projection.text(expr)})"
        strategies.check_remote_args("groupby(...).with_column", ray_remote_args, named=("column_name", "expr"))
        project = projection.with_columns_op([{column_name: expr}], where).fn

        def with_column(group: Any) -> Any:
            return project(group)[0]

        from muster.data.expressions import Expr

        ray: RayCall | str = ("groupby(...).with_column with a raw pyarrow expression has no ray.data equivalent: "
                              "use muster.data.expressions' col(...), or map_groups(fn)")
        if isinstance(expr, Expr):  # replayed with the expression rebuilt as Ray's
            ray = self._ray().then("with_column", column_name, expr)
        return self._mapped("MapBatches(_project_group)", alltoall.map_each_block(with_column, "pyarrow"), ray)

    def _mapped(self, name: str, mapped: Any, ray: RayCall | str) -> "Dataset":
        """``map_groups``' two operators, as Ray 2.60 plans (and prints) them under its default shuffle:
        ``Repartition`` (each group in one block), then ``MapBatches(<fn>)``, each block's groups mapped
        (here: one group a block, in ascending key order, mapped in this process). On the Ray engine the
        second replays ``groupby(...).map_groups(...)`` whole; the first adds nothing."""
        grouped = self._ds._then(AllToAll("Repartition", alltoall.group_blocks(self._keys), ray=RayCall(()),
                                          keeps_rows=True))
        return grouped._then(AllToAll(name, mapped, ray=ray))


def _ray_name(fn: Any) -> str:
    """The name Ray gives ``map_groups``' map: ``fn``'s ``__name__`` (a ``functools.partial``'s function's)."""
    fn = fn.func if isinstance(fn, functools.partial) else fn
    return str(getattr(fn, "__name__", type(fn).__name__))


def _template(cls: type, options: dict[str, Any]) -> Any:
    """An aggregation that ``alltoall.aggregate(every_column=True)`` copies for each column."""
    template: Any = object.__new__(cls)
    template.on, template.alias_name, template.options = None, None, options
    template.name = ""
    return template
