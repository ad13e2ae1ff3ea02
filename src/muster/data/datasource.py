"""``ray.data.datasource``: Ray's datasource classes; muster's readers take their options directly
(``read_parquet(partitioning=...)``), so each name here fails naming that equivalent."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.data.datasource", name)
