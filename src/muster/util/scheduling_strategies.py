"""Ray's scheduling strategies (``ray.util.scheduling_strategies``), accepted by ``.options(scheduling_strategy=...)``.

``PlacementGroupSchedulingStrategy`` runs the work in its group's reserved bundle
(``muster.util.placement_group``; on a Ray cluster, in Ray's bundle). ``NodeAffinitySchedulingStrategy``
runs it on that node (on a Ray cluster, through Ray's own; a hard one naming no live node is refused at
once: ``muster.tasks.options.node_of``). ``NodeLabelSchedulingStrategy`` is accepted, and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.util.placement_group import PlacementGroup


@dataclass(kw_only=True)
class PlacementGroupSchedulingStrategy:
    """Run in ``placement_group`` (bundle ``placement_group_bundle_index``; -1: any)."""

    placement_group: PlacementGroup | None
    placement_group_bundle_index: int = -1
    placement_group_capture_child_tasks: bool | None = None

    def __init__(self, placement_group: PlacementGroup | None, placement_group_bundle_index: int = -1,
                 placement_group_capture_child_tasks: bool | None = None):
        if placement_group is not None and not isinstance(placement_group, PlacementGroup):
            raise InvalidTypeError(f"PlacementGroupSchedulingStrategy(placement_group={placement_group!r}): pass the "
                            "group muster.util.placement_group(...) returned.")
        count = placement_group.bundle_count if placement_group is not None else 0
        if placement_group is not None and not -1 <= placement_group_bundle_index < count:
            raise InvalidArgumentError(f"PlacementGroupSchedulingStrategy(placement_group_bundle_index="
                             f"{placement_group_bundle_index}): the group has {count} bundles; use -1 to {count - 1}.")
        self.placement_group = placement_group
        self.placement_group_bundle_index = placement_group_bundle_index
        self.placement_group_capture_child_tasks = placement_group_capture_child_tasks


@dataclass(kw_only=True)
class NodeAffinitySchedulingStrategy:
    """Run on node ``node_id`` (a ``NodeID`` of ``muster.nodes()``); ``soft``: elsewhere when it cannot."""

    node_id: str
    soft: bool = False
    _spill_on_unavailable: bool = False
    _fail_on_unavailable: bool = False

    def __init__(self, node_id: str, soft: bool, **_: Any):
        self.node_id, self.soft = node_id, soft


@dataclass(kw_only=True)
class NodeLabelSchedulingStrategy:
    """Run on nodes with these labels (accepted; one node here)."""

    hard: dict[str, Any]
    soft: dict[str, Any] | None = None


__all__ = ["NodeAffinitySchedulingStrategy", "NodeLabelSchedulingStrategy", "PlacementGroupSchedulingStrategy"]
