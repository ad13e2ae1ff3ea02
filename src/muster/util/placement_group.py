"""Placement groups (Ray's ``ray.util.placement_group``) on muster's one-node engine.

A placement group is checked when it is made: every bundle, and for the
packing strategies all of them together, must fit in what the engine has
(``STRICT_SPREAD`` with more than one bundle cannot be placed on one node).
A group that can never be placed fails fast: ``ready()`` raises instead of
waiting forever.  A placed group does not reserve its resources: each task
or actor scheduled into it still takes its own ``num_cpus``/``num_gpus``
from the engine, so on one machine the group is a label, not a reservation.
"""

from __future__ import annotations

import itertools
from typing import Any

from muster.core import resources as res
from muster.core.api import get_runtime
from muster.exceptions import InvalidArgumentError, InvalidTypeError, ResourcesUnavailableError
from muster.tasks import objects
from muster.tasks.objects import ObjectRef

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
_ids = itertools.count(1)
_made: "dict[str, PlacementGroup]" = {}  # this process's groups, by id (placement_group_table)


class PlacementGroup:
    """A set of resource bundles; pass it to ``PlacementGroupSchedulingStrategy``."""

    def __init__(self, bundles: list[dict[str, float]], strategy: str, name: str, error: BaseException | None):
        self.id = f"{next(_ids):032x}"
        self.bundle_specs, self.strategy, self.name = bundles, strategy, name
        self._error = error
        self.removed = False

    @property
    def bundle_count(self) -> int:
        return len(self.bundle_specs)

    def ready(self) -> ObjectRef:
        """A ref that is ready once the group is placed (it raises if the group can never be)."""
        from concurrent.futures import Future

        fut: Future = Future()
        if self._error is not None:
            fut.set_exception(self._error)
        else:
            fut.set_result(True)
        return objects.ObjectRef.new(fut)

    def wait(self, timeout_seconds: float = 30) -> bool:
        """Whether the group is placed (at once on this engine)."""
        return self._error is None and not self.removed

    def __eq__(self, other: object) -> bool:  # the same group, also when it came back from a worker
        return isinstance(other, PlacementGroup) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"PlacementGroup(id={self.id[-8:]}, bundles={self.bundle_specs}, strategy={self.strategy})"

    def _row(self) -> dict[str, Any]:
        state = "REMOVED" if self.removed else "CREATED" if self._error is None else "INFEASIBLE"
        return {"placement_group_id": self.id, "name": self.name, "strategy": self.strategy, "state": state,
                "bundles": dict(enumerate(self.bundle_specs))}


def placement_group(
    bundles: list[dict[str, float]],
    strategy: str = "PACK",
    name: str = "",
    lifetime: str | None = None,
    **ray_options: Any,
) -> PlacementGroup:
    """Make a placement group of ``bundles`` (each a dict like ``{"CPU": 1, "GPU": 1}``).

    Raises:
        ValueError: an empty or malformed bundle, or an unknown strategy.
    """
    if strategy not in STRATEGIES:
        raise InvalidArgumentError(f"placement_group(strategy={strategy!r}): use one of {', '.join(STRATEGIES)}.")
    if not isinstance(bundles, list) or not bundles:
        raise InvalidArgumentError(f"placement_group(bundles={bundles!r}): pass a non-empty list of dicts like [{{'CPU': 1}}].")
    clean = []
    for i, b in enumerate(bundles):
        if not isinstance(b, dict) or not b or not any(v > 0 for v in b.values()):
            raise InvalidArgumentError(f"placement_group: bundle {i} is {b!r}; each bundle is a dict of positive amounts, "
                             "e.g. {'CPU': 1}.")
        clean.append(res.normalize(dict(b), what=f"placement_group bundle {i}"))
    error: BaseException | None = None
    total = get_runtime().resources()
    try:
        if strategy == "STRICT_SPREAD" and len(clean) > 1:
            raise ResourcesUnavailableError(
                f"placement_group(strategy='STRICT_SPREAD') with {len(clean)} bundles needs {len(clean)} nodes; "
                "muster's engine has one. Use strategy='PACK' or 'SPREAD'.", total=total)
        summed: dict[str, float] = {}
        for b in clean:
            res.ensure_feasible(b, 1, total, what="placement group bundle")
            for k, v in b.items():
                summed[k] = summed.get(k, 0.0) + v
        res.ensure_feasible(summed, 1, total, what=f"placement group ({len(clean)} bundles together)")
    except ResourcesUnavailableError as exc:
        error = exc
    pg = PlacementGroup(clean, strategy, name, error)
    _made[pg.id] = pg
    return pg


def remove_placement_group(pg: PlacementGroup) -> None:
    """Remove ``pg`` (tasks already running in it go on)."""
    if not isinstance(pg, PlacementGroup):
        raise InvalidTypeError(f"remove_placement_group() takes a PlacementGroup, got {type(pg).__name__}.")
    pg.removed = True


def placement_group_table(placement_group: PlacementGroup | None = None) -> dict[str, Any]:
    """Ray's table of placement groups: one group's row, or every group this process made by id
    (``placement_group_id``, ``name``, ``strategy``, ``state``: CREATED, REMOVED or INFEASIBLE,
    ``bundles`` by index)."""
    if placement_group is not None:
        return placement_group._row()
    return {pg.id: pg._row() for pg in _made.values()}


def get_placement_group(placement_group_name: str) -> PlacementGroup:
    """The live group named ``placement_group_name`` (made in this process).

    Raises:
        ValueError: no live group has that name.
    """
    for pg in reversed(list(_made.values())):
        if pg.name == placement_group_name and pg.name and not pg.removed:
            return pg
    names = sorted({pg.name for pg in _made.values() if pg.name and not pg.removed})
    raise InvalidArgumentError(
        f"get_placement_group({placement_group_name!r}): no live placement group has that name; the named ones "
        f"are {names or 'none'} (name it with placement_group(..., name=))."
    )


def get_current_placement_group() -> PlacementGroup | None:
    """The group the calling task or actor was scheduled into (None in the driver and outside any group)."""
    from muster.tasks import worker_side

    info = worker_side.current()
    return info.placement_group if info is not None else None


def __getattr__(name: str) -> Any:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.util.placement_group", name)
