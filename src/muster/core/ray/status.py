"""What ``muster status`` shows about a Ray cluster: its nodes and their resources, total and free."""

from __future__ import annotations

import logging
from typing import Any

from muster.core.ray import placement


def describe(address: str) -> dict[str, Any]:
    """Connect to the cluster at ``address`` for a moment and describe it.

    Returns:
        ``{"address", "nodes": [{"id", "ip", "alive", "head", "total", "free"}], "total", "free",
        "drivers"}`` -- ``drivers`` counts the muster drivers connected now (one hub actor each).
    """
    import ray

    from muster.core.ray.engine import check_reachable

    if address != "auto":
        check_reachable(address)
    ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    try:
        free_by_node = _free_by_node()
        nodes = []
        for n in ray.nodes():
            node_id = n["NodeID"]
            total = placement.cluster_view(n.get("Resources", {}))
            nodes.append({
                "id": node_id,
                "ip": n.get("NodeManagerAddress", ""),
                "alive": bool(n.get("Alive")),
                "head": "node:__internal_head__" in n.get("Resources", {}),
                "total": total,
                "free": free_by_node.get(node_id, total if n.get("Alive") else {}),
            })
        return {
            "address": address,
            "nodes": nodes,
            "total": placement.cluster_view(ray.cluster_resources()),
            "free": placement.cluster_view(ray.available_resources()),
            "drivers": _muster_drivers(),
        }
    finally:
        ray.shutdown()


def _free_by_node() -> dict[str, dict[str, float]]:
    try:
        from ray._private.state import available_resources_per_node

        return {k: placement.cluster_view(v) for k, v in available_resources_per_node().items()}
    except Exception:  # noqa: BLE001 - an internal API: without it, show totals only
        return {}


def _muster_drivers() -> int | None:
    try:
        from ray.util.state import list_actors

        actors = list_actors(filters=[("state", "=", "ALIVE")], limit=10000, raise_on_missing_output=False)
        return sum(1 for a in actors if str(getattr(a, "name", "") or "").startswith("muster-hub-"))
    except Exception:  # noqa: BLE001 - the state API needs the dashboard; without it, say nothing
        return None
