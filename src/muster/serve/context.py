"""``serve.get_replica_context()``: who am I, inside a replica."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ReplicaContext:
    """The replica running the current code (Ray Serve's fields)."""

    app_name: str
    deployment: str
    replica_tag: str
    servable_object: Any = None

    @property
    def replica_id(self) -> str:
        return self.replica_tag


_current: ReplicaContext | None = None


def _set(ctx: ReplicaContext | None) -> None:
    global _current
    _current = ctx


def get_replica_context() -> ReplicaContext:
    """The context of the replica this code runs in.

    Raises:
        RayServeException: called outside a replica (for example in the driver).
    """
    if _current is None:
        from muster.serve.exceptions import RayServeException

        raise RayServeException(
            "serve.get_replica_context() only works inside a deployment's replica (in its __init__ or methods); "
            "it was called outside one."
        )
    return _current
