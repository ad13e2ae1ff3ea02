"""Pure placement arithmetic for gangs on a multi-node cluster: no Ray, no I/O.

A gang of ``n`` identical bundles fits a cluster when, under its strategy:

* ``PACK`` / ``SPREAD``: the nodes together hold ``n`` bundles (a bundle never
  spans nodes, so each node counts the whole bundles it can hold);
* ``STRICT_PACK``: one node holds all ``n``;
* ``STRICT_SPREAD``: ``n`` different nodes hold one each.
"""

from __future__ import annotations

import math
import re
from typing import Mapping, Sequence

from muster.core import resources as res
from muster.exceptions import ResourcesUnavailableError

NodeResources = Mapping[str, float]


def bundles_on(node: NodeResources, request: Mapping[str, float]) -> int:
    """How many copies of ``request`` one node can hold."""
    counts = [math.floor(node.get(k, 0.0) / v + 1e-9) for k, v in request.items() if v > 0]
    return min(counts) if counts else 1 << 30


def capacity(nodes: Sequence[NodeResources], request: Mapping[str, float], strategy: str) -> int:
    """How many bundles of ``request`` the nodes can hold under ``strategy``."""
    per_node = [bundles_on(node, request) for node in nodes]
    if strategy == "STRICT_PACK":
        return max(per_node, default=0)
    if strategy == "STRICT_SPREAD":
        return sum(1 for c in per_node if c > 0)
    return sum(per_node)


def check_gang(
    nodes: Sequence[NodeResources], request: Mapping[str, float], n: int, strategy: str, what: str = "gang"
) -> None:
    """Raise ``ResourcesUnavailableError`` if ``n`` x ``request`` can never be placed on ``nodes``.

    The message names what was asked, what each node has, and how to fix it.
    """
    fits = capacity(nodes, request, strategy)
    if fits >= n:
        return
    total = res.summed(nodes)
    listing = "; ".join(f"node {i}: {res.fmt(node)}" for i, node in enumerate(nodes)) or "no live nodes"
    if strategy == "STRICT_PACK":
        why = f"STRICT_PACK puts all {n} on one node, and the largest holds {fits}"
    elif strategy == "STRICT_SPREAD":
        why = f"STRICT_SPREAD needs {n} different nodes that each hold one, and {fits} do"
    else:
        why = f"a worker's bundle cannot span nodes, and the nodes together hold {fits} whole bundles"
    hints = ["lower num_workers or the resources per worker", "add nodes to the cluster (`ray start --address=...`)"]
    if strategy.startswith("STRICT"):
        hints.insert(0, "use placement_strategy='PACK' or 'SPREAD'")
    raise ResourcesUnavailableError(
        f"{what}: cannot ever place {n} x {{{res.fmt(request)}}} ({strategy}) on this Ray cluster: {why}. "
        f"Cluster: {listing}. Fix: {'; '.join(hints)}.",
        requested={k: v * n for k, v in request.items()},
        total=total,
    )


#: Ray's names for what a placement group holds: ``CPU_group_<id>``, ``CPU_group_<index>_<id>``, ``bundle_group_...``
_GROUP_RESOURCE = re.compile(r".+_group_(\d+_)?[0-9a-f]{16,}$")


def cluster_view(raw: Mapping[str, float], nodes: bool = False) -> dict[str, float]:
    """Ray's resource dict without its bookkeeping entries (memory, accelerator_type:..., the
    per-placement-group names: what a group holds is already out of the plain amounts, and unless
    ``nodes``, the ``node:<ip>`` and ``node:__internal_head__`` ones work may ask for to pick a node)."""
    skip = ("memory", "object_store_memory")
    kinds = ("accelerator_type:",) if nodes else ("node:", "accelerator_type:")
    return {
        k: float(v)
        for k, v in raw.items()
        if k not in skip and not k.startswith(kinds) and v and not _GROUP_RESOURCE.match(k)
    }
