"""``ray.data.expressions``: ``col`` and ``lit`` for ``Dataset.with_column`` and ``filter(expr=...)``.

They build ``pyarrow.compute`` expressions, so arithmetic (``+ - * /``), comparisons and
``& | ~`` combine them as in Ray: ``ds.with_column("total", col("a") + col("b") * lit(2))``,
``ds.filter(expr=(col("x") > 5) & (col("label") == "a"))``.
"""

from __future__ import annotations

from typing import Any

import pyarrow.compute as pc

from muster.exceptions import InvalidTypeError

Expr = pc.Expression


def col(name: str) -> pc.Expression:
    """The column ``name``."""
    if not isinstance(name, str) or not name:
        raise InvalidTypeError(f"col({name!r}): pass a column name.")
    return pc.field(name)


def lit(value: Any) -> pc.Expression:
    """A constant."""
    return pc.scalar(value)


def __getattr__(name: str) -> Any:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.data.expressions", name)


__all__ = ["Expr", "col", "lit"]
