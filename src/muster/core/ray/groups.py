"""User placement groups on the Ray engine: each is a real Ray placement group.

``muster.util.placement_group`` asks the engine to ``reserve`` a group; here that
makes a Ray placement group of the same bundles and strategy, so the cluster holds
them (``available_resources()`` drops) and Ray decides when they are placed. Work
scheduled into a bundle runs with Ray's ``PlacementGroupSchedulingStrategy`` on that
bundle; removing the group removes Ray's, which ends what runs in it. The group's ``name``
and ``lifetime`` are Ray's (a detached group stays on the cluster when the engine shuts
down), and its ``placement_group_table`` row takes Ray's node of each bundle and state.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, InvalidStateError
from typing import Any

import ray
from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from muster.core.ray.errors import from_ray
from muster.core.runtime import BundleRef, name_taken_error, removed_error

# Ray's scheduling states of a group it is still placing: a removal then can leak what it prepared
_PLACING = ("QUEUED", "SCHEDULING_STARTED")
SETTLE_BOUND_S = 10.0


def remove_settled(ray_group: Any, bound_s: float = SETTLE_BOUND_S) -> None:
    """Remove Ray's ``ray_group`` once Ray is not half-way through placing it (waiting at most ``bound_s``).

    Ray 2.60 places a group in two phases, prepare then commit, node by node. A group removed between them
    keeps the bundles already prepared held on their raylets for the cluster's life, and Ray's group
    scheduler stops placing later groups (ray-project/ray#64693): after it, a gang or group needing a
    whole node waits forever. Placing takes milliseconds, so the wait is short; a group Ray cannot place
    (no resources, infeasible) is not mid-placement and is removed at once.
    """
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        try:
            row = placement_group_table(ray_group)
        except Exception:  # noqa: BLE001 - the cluster is gone: the removal below says so, or not
            break
        if row.get("state") != "PREPARED" and (row.get("stats") or {}).get("scheduling_state") not in _PLACING:
            break
        time.sleep(0.005)
    remove_placement_group(ray_group)


class RayGroups:
    """The user's placement groups on one Ray engine, by muster's group id. Thread-safe."""

    def __init__(self) -> None:
        self._groups: dict[str, tuple[Any, Future]] = {}  # id -> (Ray's group, placed)
        self._detached: set[str] = set()  # groups made with lifetime="detached": they outlive this driver
        self._lock = threading.Lock()

    def reserve(self, group: str, bundles: list[dict[str, float]], strategy: str, name: str = "",
                lifetime: str | None = None) -> Future:
        """Make Ray's group (named ``name``, Ray's ``lifetime``); the future is done once Ray placed it
        (its exception: removed first)."""
        try:
            ray_group = placement_group([dict(b) for b in bundles], strategy=strategy, name=name, lifetime=lifetime)
        except ray.exceptions.RaySystemError as exc:
            if name and "already exists" in str(exc):  # another driver's group has it (this one's are checked first)
                raise name_taken_error(name, "a group another driver made in this namespace on the Ray cluster, "
                                       "e.g. a detached one that outlived its driver",
                                       "ray.util.remove_placement_group(ray.util.get_placement_group({!r}))") from None
            raise from_ray(exc, f"placement group {name or group}") from None
        placed: Future = Future()
        with self._lock:
            self._groups[group] = (ray_group, placed)
            if lifetime == "detached":
                self._detached.add(group)

        def settle(ready: Future) -> None:
            try:
                if ready.exception() is not None:
                    placed.set_exception(removed_error(group))
                else:
                    placed.set_result(None)
            except InvalidStateError:  # the removal settled it first
                pass

        ray_group.ready().future().add_done_callback(settle)
        return placed

    def strategy(self, bundle: BundleRef) -> PlacementGroupSchedulingStrategy:
        """Ray's strategy for work in ``bundle``. Raises ``TaskPlacementGroupRemoved`` for a group not here."""
        with self._lock:
            entry = self._groups.get(bundle.group)
        if entry is None:
            raise removed_error(bundle.group)
        # muster's driver starts every child task itself (and puts captured ones in the group): Ray captures none
        return PlacementGroupSchedulingStrategy(entry[0], placement_group_bundle_index=bundle.index,
                                                placement_group_capture_child_tasks=False)

    def holds(self, group: str) -> bool:
        with self._lock:
            return group in self._groups

    def table_row(self, group: str) -> dict[str, Any] | None:
        """Ray's ``placement_group_table`` row of ``group``'s Ray group (None: not here, or Ray has none)."""
        with self._lock:
            entry = self._groups.get(group)
        if entry is None:
            return None
        try:
            return placement_group_table(entry[0]) or None
        except Exception:  # noqa: BLE001 - the cluster is gone
            return None

    def remove(self, group: str) -> None:
        """Remove Ray's group (Ray ends the actors and tasks in it); a wait for its placement fails."""
        with self._lock:
            entry = self._groups.pop(group, None)
            self._detached.discard(group)
        if entry is None:
            return
        ray_group, placed = entry
        if not placed.done():
            try:
                placed.set_exception(removed_error(group))
            except InvalidStateError:  # placed meanwhile
                pass
        try:
            remove_settled(ray_group)
        except Exception:  # noqa: BLE001 - the cluster is gone
            pass

    def clear(self) -> None:
        """Remove every group but the detached ones, which Ray keeps after this driver is gone."""
        with self._lock:
            groups = [g for g in self._groups if g not in self._detached]
            for group in self._detached:
                self._groups.pop(group, None)
            self._detached.clear()
        for group in groups:
            self.remove(group)


def is_removal(exc: BaseException) -> bool:
    """Whether Ray failed work because its placement group was removed."""
    return isinstance(exc, (ray.exceptions.TaskPlacementGroupRemoved, ray.exceptions.ActorPlacementGroupRemoved))
