"""``muster.cluster_utils.Cluster`` (Ray's ``ray.cluster_utils.Cluster``): a mini Ray cluster of real raylets
on this machine, for testing code meant for a cluster. Start it, then ``muster.init(address=cluster.address)``
runs muster on it (``add_node``/``remove_node`` change what ``muster.cluster_resources()`` reports). It is
Ray's own class, so it needs Ray: ``pip install "muster[ray]"``."""

from __future__ import annotations

from typing import Any

__all__ = ["Cluster"]


def __getattr__(name: str) -> Any:
    if name != "Cluster":
        raise AttributeError(f"module 'muster.cluster_utils' has no attribute {name!r}; it provides Cluster.")
    try:
        from ray.cluster_utils import Cluster
    except ImportError as exc:
        raise ImportError(
            "muster.cluster_utils.Cluster is Ray's mini-cluster (real raylets, then muster.init(address=...)), "
            'which needs Ray: pip install "muster[ray]". On one machine without Ray, muster.init(num_cpus=N) '
            "gives the engine N CPUs."
        ) from exc
    return Cluster
