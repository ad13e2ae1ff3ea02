"""Ray's ``ray.util`` on muster: ``ActorPool``, ``queue.Queue``, placement groups, named actors, node address,
``as_completed``/``map_unordered`` and ``inspect_serializability``."""

from __future__ import annotations

from typing import Any

from muster.core.serialization import deregister_serializer, register_serializer
from muster.tasks import list_named_actors
from muster.tasks.runtime_context import node_ip_address
from muster.util.actor_pool import ActorPool
from muster.util.check_serialize import inspect_serializability
from muster.util.helpers import as_completed, log_once, map_unordered
from muster.util.placement_group import (
    PlacementGroup,
    get_current_placement_group,
    get_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)


def get_node_ip_address() -> str:
    """This node's IP address (127.0.0.1 on a machine with no network)."""
    return node_ip_address()


def __getattr__(name: str) -> Any:
    if name in ("queue", "scheduling_strategies", "actor_pool", "placement_group", "check_serialize", "helpers",
                "accelerators", "metrics", "state"):
        import importlib

        return importlib.import_module(f"muster.util.{name}")
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.util", name)


__all__ = [
    "ActorPool",
    "PlacementGroup",
    "as_completed",
    "deregister_serializer",
    "get_current_placement_group",
    "get_node_ip_address",
    "get_placement_group",
    "inspect_serializability",
    "list_named_actors",
    "log_once",
    "map_unordered",
    "placement_group",
    "placement_group_table",
    "register_serializer",
    "remove_placement_group",
]
