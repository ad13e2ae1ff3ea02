"""``Dataset``'s column operations (Ray's ``with_column``, ``with_columns``, ``add_column``, ``drop_columns``,
``select_columns``, ``rename_columns``): each a per-block transform, fused into the task that made the block."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable

from muster.data import block as blk
from muster.data import plan, projection, strategies
from muster.data.plan import RayCall, Transform
from muster.exceptions import InvalidArgumentError, InvalidTypeError

if TYPE_CHECKING:
    from muster.data.dataset import Dataset


class ColumnOps:
    """The column methods of ``Dataset``, which defines what they use."""

    if TYPE_CHECKING:
        def _then(self, op: plan.Operator) -> Dataset: ...

    def with_column(self, column_name: str, expr: Any, **options: Any) -> "Dataset":
        """Add (or replace) column ``column_name`` with the value of ``expr``, an expression of
        ``muster.data.expressions`` (``col("a") + col("b")``, a ``@udf``, ``download("uri")``) or any pyarrow
        compute expression. Ray's task options as for :meth:`add_column`."""
        op = projection.with_columns_op([{column_name: expr}], f"with_column({column_name!r}, {projection.text(expr)})")
        return self._column_op(op, "with_column", repr(column_name), options)

    def with_columns(self, exprs: Any = None, *more_exprs: Any, **options: Any) -> "Dataset":
        """Add (or replace) several columns, ``{name: expression}`` mappings or ``unnest(expression)`` (one column
        per struct field), all in one projection over the existing columns. Ray's task options as for
        :meth:`add_column`."""
        op = projection.with_columns_op([*([] if exprs is None else [exprs]), *more_exprs], "with_columns")
        return self._column_op(op, "with_columns", "...", options)

    def add_column(self, col: str, fn: Callable[[Any], Any], *, batch_format: str = "pandas",
                   **options: Any) -> "Dataset":
        """Add (or replace) column ``col`` with ``fn(batch)``.

        Ray's task options (``compute=``, ``concurrency=``, ``num_cpus=``, ``num_gpus=``, ``memory=``, other
        ``ray_remote_args``) mean what they mean to :meth:`map_batches` for a function, as for every column
        operation: at most ``concurrency`` of its tasks at once, each holding ``num_cpus``/``num_gpus`` (more
        than the engine has fails at once); ``memory`` and the others are passed on to Ray's engine only."""
        if not isinstance(col, str) or not callable(fn):
            raise InvalidTypeError(f"add_column(col={col!r}, fn={fn!r}): pass the new column's name and a function "
                                   "batch -> the column's values, e.g. add_column('y', lambda df: df['x'] * 2).")
        fmt = blk.check_batch_format(batch_format, "add_column", native=False)
        ray = RayCall.of("add_column", col, fn, batch_format=fmt)
        op = Transform("MapBatches(add_column)", plan.add_column(col, fn, fmt), ray)
        return self._column_op(op, "add_column", repr(col), options)

    def drop_columns(self, cols: list[str], **options: Any) -> "Dataset":
        """Drop the columns ``cols``; Ray's task options as for :meth:`add_column`."""
        cols = _names(cols, "drop_columns")
        ray = RayCall.of("drop_columns", cols)
        op = Transform("MapBatches(drop_columns)", plan.drop_columns(cols), ray)
        return self._column_op(op, "drop_columns", repr(cols), options)

    def select_columns(self, cols: list[str], **options: Any) -> "Dataset":
        """Keep the columns ``cols``, in that order; Ray's task options as for :meth:`add_column`."""
        cols = _names(cols, "select_columns")
        kept = frozenset(cols)
        op = Transform("Project", plan.select_columns(cols), RayCall.of("select_columns", cols),
                       filter_names=lambda read: {c: c for c in read} if read <= kept else None,
                       schema_of=projection.schema_of(plan.select_columns(cols)))
        return self._column_op(op, "select_columns", repr(cols), options)

    def rename_columns(self, names: dict[str, str] | list[str], **options: Any) -> "Dataset":
        """Rename columns: a dict old name -> new name, or a list of new names for every column, in order.
        Ray's task options as for :meth:`add_column`.

        Raises:
            InvalidArgumentError: two columns would get one name (Ray would drop one), here or when the dataset
                already has a column by a new name that is not renamed too.
        """
        new = list(names.values()) if isinstance(names, dict) else list(names) if isinstance(names, (list, tuple)) \
            else []
        twice = sorted({n for n in new if new.count(n) > 1})
        if twice:
            raise InvalidArgumentError(f"rename_columns({names!r}): {twice[0]!r} is given to more than one column; "
                                       "give each column its own new name.")
        if isinstance(names, (list, tuple)) and all(isinstance(n, str) for n in names):
            ray = RayCall.of("rename_columns", list(names))
            op = Transform("Project", plan.rename_all_columns(list(names)), ray,
                           schema_of=projection.schema_of(plan.rename_all_columns(list(names))))
        elif not isinstance(names, dict):
            raise InvalidTypeError(
                f"rename_columns({names!r}): pass a dict old name -> new name, or a list of new names for every column."
            )
        else:
            ray = RayCall.of("rename_columns", dict(names))
            op = Transform("Project", plan.rename_columns(dict(names)), ray,
                           filter_names=projection.renamed_back(dict(names)),
                           schema_of=projection.schema_of(plan.rename_columns(dict(names))))
        return self._column_op(op, "rename_columns", repr(names), options)

    def _column_op(self, op: Transform, call: str, arg: str, options: dict[str, Any]) -> "Dataset":
        """``op`` with Ray's task ``options``, checked as ``map_batches`` checks them: ``concurrency``,
        ``num_cpus`` and ``num_gpus`` held by its block function run as ``map_batches`` runs a function
        (``plan.ColumnMap``); all of them given to its ``ray.data`` call."""
        strategies.check_remote_args(call, options)
        named = {k: options.pop(k, None) for k in ("compute", "concurrency", "num_cpus", "num_gpus", "memory")}
        concurrency = strategies.task_options(call, **named)
        cpus, gpus = named["num_cpus"], named["num_gpus"]
        if concurrency is None and cpus is None and gpus is None and named["memory"] is None and not options:
            return self._then(op)
        fn = op.fn if concurrency is None and cpus is None and gpus is None else \
            plan.ColumnMap(op.fn, call, arg, concurrency, cpus, gpus)
        # Ray takes a column operation's concurrency as one task count: a (min, max) range's max, as for a function
        on_ray = concurrency[1] if isinstance(concurrency, tuple) else concurrency
        given = {k: v for k, v in {"concurrency": on_ray, "num_cpus": cpus, "num_gpus": gpus,
                                   "memory": named["memory"], **options}.items() if v is not None}
        ray = op.ray.adding(**given) if isinstance(op.ray, RayCall) else op.ray
        return self._then(dataclasses.replace(op, fn=fn, ray=ray))


def _names(cols: Any, where: str) -> list[str]:
    cols = [cols] if isinstance(cols, str) else list(cols)
    if not all(isinstance(c, str) for c in cols):
        raise InvalidTypeError(f"{where}({cols!r}): pass column names (strings).")
    return cols
