"""The names of Ray's private ``ray._raylet`` that user code imports, for scripts ported by changing
``ray`` to ``muster``: Ray's streaming-generator guide does ``from ray._raylet import
ObjectRefGenerator``. They are muster's own classes (``muster.ObjectRef``, ``muster.ObjectRefGenerator``);
Ray's other internals (``GcsClient``, the id classes) are not here."""

from __future__ import annotations

from typing import Any

from muster.tasks import ObjectRef, ObjectRefGenerator

DynamicObjectRefGenerator = ObjectRefGenerator  # num_returns="dynamic"
StreamingObjectRefGenerator = ObjectRefGenerator  # Ray's older name for the streaming one


def __getattr__(name: str) -> Any:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster._raylet", name)


__all__ = ["DynamicObjectRefGenerator", "ObjectRef", "ObjectRefGenerator", "StreamingObjectRefGenerator"]
