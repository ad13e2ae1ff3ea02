"""Placement arithmetic for gangs on multi-node clusters (pure: no cluster needed)."""

from __future__ import annotations

import pytest

from muster.core.ray.placement import bundles_on, capacity, check_gang, cluster_view
from muster.exceptions import ResourcesUnavailableError

NODES = [{"CPU": 2.0}, {"CPU": 2.0, "GPU": 1.0}, {"CPU": 4.0, "GPU": 2.0}]


def test_bundles_on_counts_whole_bundles_per_node():
    assert bundles_on({"CPU": 4.0, "GPU": 2.0}, {"CPU": 1.0, "GPU": 1.0}) == 2
    assert bundles_on({"CPU": 3.0}, {"CPU": 2.0}) == 1
    assert bundles_on({"CPU": 3.0}, {"GPU": 1.0}) == 0


@pytest.mark.parametrize(
    "request_, strategy, expected",
    [
        ({"CPU": 1.0}, "PACK", 8),
        ({"CPU": 1.0}, "SPREAD", 8),
        ({"CPU": 1.0}, "STRICT_PACK", 4),
        ({"CPU": 1.0}, "STRICT_SPREAD", 3),
        ({"CPU": 3.0}, "PACK", 1),  # 8 CPUs in all, but only one node holds 3
        ({"CPU": 1.0, "GPU": 1.0}, "PACK", 3),
    ],
)
def test_capacity_per_strategy(request_, strategy, expected):
    assert capacity(NODES, request_, strategy) == expected


def test_check_gang_names_each_node_and_the_fix():
    check_gang(NODES, {"CPU": 1.0}, 8, "PACK")
    with pytest.raises(ResourcesUnavailableError) as info:
        check_gang(NODES, {"CPU": 3.0}, 2, "SPREAD")
    msg = str(info.value)
    assert "2 x {CPU=3}" in msg and "node 0: CPU=2" in msg and "node 2: CPU=4, GPU=2" in msg
    assert "cannot span nodes" in msg and "Fix:" in msg
    assert info.value.requested == {"CPU": 6.0} and info.value.total["CPU"] == 8.0
    with pytest.raises(ResourcesUnavailableError, match="placement_strategy='PACK'"):
        check_gang(NODES, {"CPU": 1.0}, 4, "STRICT_SPREAD")


def test_cluster_view_drops_rays_bookkeeping():
    raw = {"CPU": 2.0, "memory": 1e9, "object_store_memory": 1e8, "node:10.0.0.1": 1.0,
           "node:__internal_head__": 1.0, "accelerator_type:A100": 1.0, "slot": 1.0, "GPU": 0.0}
    assert cluster_view(raw) == {"CPU": 2.0, "slot": 1.0}
