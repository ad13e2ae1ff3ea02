"""Aggregations for ``Dataset.aggregate(*aggs)`` and ``groupby(...).aggregate(*aggs)``, by Ray's names.

The built-in ones (``Count``, ``Sum``, ``Min``, ``Max``, ``Mean``, ``Std``, ``Unique``) run as
Arrow's grouped aggregations; an ``AggregateFn`` runs its Python functions over each group's rows.
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
            raise InvalidArgumentError(f"AggregateFn(name={name!r}): pass exactly one of accumulate_row and accumulate_block.")
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


__all__ = ["AggregateFn", "Count", "Max", "Mean", "Min", "Std", "Sum", "Unique"]


def __getattr__(name: str) -> Any:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.data.aggregate", name)
