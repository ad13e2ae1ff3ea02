"""``ray.data.context``: ``DataContext`` (muster.data's), for scripts that import it from here."""

from __future__ import annotations

from typing import Any

from muster.data.execution import DataContext


def __getattr__(name: str) -> Any:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.data.context", name)


__all__ = ["DataContext"]
