"""Placement groups (Ray's ``ray.util.placement_group``) on muster's engines.

A placement group reserves its bundles, as Ray's does. It is checked when it is made:
every bundle must fit a node, and all of them together the nodes as the strategy
places them (``STRICT_SPREAD`` needs a node per bundle, ``STRICT_PACK`` one node for
all; on the one-node embedded engine PACK, SPREAD and STRICT_PACK are all met by the
one node). A group that can never be
placed fails fast: ``ready()`` raises instead of waiting forever. A group that fits
but finds the engine busy is PENDING until what others hold frees up (on the embedded
engine, one warning after 5 s names what holds it); then it holds its bundles
(``available_resources()`` drops by them) and is CREATED.

Work scheduled into a group (``PlacementGroupSchedulingStrategy``, or the
``placement_group=`` / ``placement_group_bundle_index=`` options) draws on its bundle,
never on the general pool, and waits while the bundle is busy; work outside any group
cannot use what a group holds. A request that can never fit its bundle (any bundle,
for index -1) raises at ``.remote()``. ``remove_placement_group`` gives the bundles
back: actors in the group are killed (no restart), running tasks' workers are killed,
and work still waiting for the group fails with ``TaskPlacementGroupRemoved`` /
``ActorPlacementGroupRemoved``. On a Ray cluster engine the group is a Ray placement
group (``core/ray/groups.py``): Ray holds its bundles and places the work in them.
"""

from __future__ import annotations

import itertools
import time
import warnings
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from typing import Any

from muster.core import context
from muster.core import resources as res
from muster.core.api import get_runtime, is_current
from muster.core.runtime import BundleRef, name_taken_error
from muster.exceptions import (
    InvalidArgumentError,
    InvalidTypeError,
    ResourcesUnavailableError,
    TaskPlacementGroupRemoved,
    UnsupportedRayAPIError,
)
from muster.tasks import objects
from muster.tasks.labels import NODE_ID_LABEL, check_selector
from muster.tasks.objects import ObjectRef

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
_ids = itertools.count(1)
_KNOB = "smaller bundles in placement_group([...])"
_NO_GPU_FIX = ("drop 'GPU' from its bundles, or run where muster sees a GPU (CUDA_VISIBLE_DEVICES, "
               "muster.init(num_gpus=N))")
_NIL_ID = "f" * 32  # PlacementGroup.empty()'s id, as Ray's nil ids are all ones
_made: "dict[str, PlacementGroup]" = {}  # this process's groups, by id (placement_group_table)


class PlacementGroup:
    """A set of resource bundles; pass it to ``PlacementGroupSchedulingStrategy``."""

    def __init__(self, bundles: list[dict[str, float]], strategy: str, name: str, error: BaseException | None,
                 lifetime: str | None = None):
        self.id = f"{next(_ids):032x}"
        self.bundle_specs, self.strategy, self.name, self.lifetime = bundles, strategy, name, lifetime
        self._error = error
        self._asked = time.monotonic()
        self._placed_after_s: float | None = None  # from placement_group() to its bundles held
        self._node = ""  # the node holding its bundles, once placed (the embedded engine's one node)
        self._removed = False
        self._engine: Any = None  # the engine holding its bundles (None in a worker's copy)
        self._made_on: Any = None  # the engine of the driver that made it (its name is taken while it lives there)
        self._placed: Future = Future()  # done once its bundles are held
        if error is not None:
            self._placed.set_exception(error)

    @staticmethod
    def empty() -> "PlacementGroup":
        """Ray's empty group: no bundles, a nil id (all ``f``); work scheduled into it runs outside any
        group, and ``ready()``/``wait()`` are done at once."""
        group = PlacementGroup([], "PACK", "", None)
        group.id = _NIL_ID
        group._placed.set_result(None)
        return group

    @property
    def is_empty(self) -> bool:
        """Whether this is :meth:`empty`'s group (its id is nil), as Ray's ``is_empty``."""
        return self.id == _NIL_ID

    @property
    def bundle_count(self) -> int:
        return len(self.bundle_specs)

    @property
    def removed(self) -> bool:
        """Removed, or of an engine since shut down (whose reservations went with it)."""
        return self._removed or (self._engine is not None and not is_current(self._engine))

    def ready(self) -> ObjectRef:
        """A ref to this group, ready once its bundles are held (it raises if the group can never be
        placed, or was removed first)."""
        out: Future = Future()

        def settle(placed: Future) -> None:
            exc = placed.exception()
            if exc is not None:
                out.set_exception(exc)
            elif self._removed:  # placed, then removed before ready() was asked: Ray's ready task fails too
                out.set_exception(TaskPlacementGroupRemoved(
                    f"placement group {self.id} ({self.name or 'unnamed'}) was removed by remove_placement_group() "
                    "before ready() was called; make a new placement_group(...) to reserve its bundles again."))
            else:
                out.set_result(self)

        self._placed.add_done_callback(settle)
        return objects.ObjectRef.new(out)

    def wait(self, timeout_seconds: float = 30) -> bool:
        """Whether the group is placed within ``timeout_seconds`` (False at once if it never can be).

        Raises:
            TaskPlacementGroupRemoved: the group was removed (``remove_placement_group``, or its engine shut
                down), as Ray's ``wait`` raises for a group that no longer exists: a ``while not pg.wait(1)``
                loop would otherwise spin forever.
        """
        wait_futures([self._placed], timeout=timeout_seconds)
        if self.removed:
            how = "by remove_placement_group()" if self._removed else "when muster.shutdown() ended its engine"
            raise TaskPlacementGroupRemoved(
                f"placement group {self.id} ({self.name or 'unnamed'}) was removed {how}, so it will never be "
                "ready; make a new placement_group(...) to reserve its bundles again.")
        return self._placed.done() and self._placed.exception() is None

    def _settle(self, placed: Future) -> None:
        """The engine placed the group (or removed it first)."""
        exc = placed.exception()
        if exc is not None:
            self._placed.set_exception(exc)
        else:
            self._placed_after_s = time.monotonic() - self._asked
            self._placed.set_result(None)

    def _bundle_for(self, request: dict[str, float], index: int, what: str) -> BundleRef:
        """Where ``what`` asking for ``request`` runs in this group: bundle ``index`` (-1: any).

        Raises:
            ResourcesUnavailableError: the group can never be placed.
            InvalidArgumentError: a bad index, or ``request`` never fits the bundle.
        """
        if self._error is not None:
            raise ResourcesUnavailableError(f"{what} is scheduled into a placement group that can never be "
                                            f"placed: {self._error}", total=getattr(self._error, "total", None))
        if isinstance(index, bool) or not isinstance(index, int) or not -1 <= index < self.bundle_count:
            raise InvalidArgumentError(f"{what}: placement_group_bundle_index={index!r}; the group has "
                                       f"{self.bundle_count} bundles: use -1 (any) to {self.bundle_count - 1}.")
        misfit = res.bundle_misfit(self.bundle_specs, request, index, what)
        if misfit:
            raise InvalidArgumentError(misfit)
        return BundleRef(self.id, index)

    def __eq__(self, other: object) -> bool:  # the same group, also when it came back from a worker
        return isinstance(other, PlacementGroup) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __getstate__(self) -> dict[str, Any]:  # a copy (in a task it was scheduled into) is placed
        return {k: v for k, v in self.__dict__.items() if k not in ("_placed", "_engine", "_made_on")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _engine=None, _made_on=None, _placed=Future())
        if self._error is not None:
            self._placed.set_exception(self._error)
        else:
            self._placed.set_result(None)

    def __repr__(self) -> str:
        return f"PlacementGroup(id={self.id[-8:]}, bundles={self.bundle_specs}, strategy={self.strategy})"

    def _row(self) -> dict[str, Any]:
        """Ray's ``placement_group_table`` entry: id, name, bundles, the node of each bundle ("" until
        placed), strategy, state and Ray's scheduling ``stats`` (latencies in ms). On a Ray cluster the
        nodes, state and stats are Ray's own."""
        row = self._own_row()
        theirs = self._engine.group_table_row(self.id) if self._engine is not None and not self.removed else None
        if theirs:
            row.update({k: theirs[k] for k in ("bundles_to_node_id", "state", "stats") if k in theirs})
        return row

    def _own_row(self) -> dict[str, Any]:
        if self.removed:
            state = scheduling = "REMOVED"
        elif self._error is not None:
            state = scheduling = "INFEASIBLE"
        elif self._placed.done():
            state, scheduling = "CREATED", "FINISHED"
        else:
            state, scheduling = "PENDING", "NO_RESOURCES"  # it waits for what other work holds
        placed_ms = (self._placed_after_s or 0.0) * 1000.0
        node = self._node if state == "CREATED" else ""
        return {"placement_group_id": self.id, "name": self.name, "bundles": dict(enumerate(self.bundle_specs)),
                "bundles_to_node_id": {i: node for i in range(self.bundle_count)},
                "strategy": self.strategy, "state": state,
                "stats": {"end_to_end_creation_latency_ms": placed_ms, "scheduling_latency_ms": placed_ms,
                          "scheduling_attempt": 1, "highest_retry_delay_ms": 0.0, "scheduling_state": scheduling}}


def placement_group(
    bundles: list[dict[str, float]],
    strategy: str | None = None,
    name: str = "",
    lifetime: str | None = None,
    _soft_target_node_id: str | None = None,
    bundle_label_selector: list[dict[str, str]] | None = None,
    topology_strategy: dict[str, str] | None = None,
) -> PlacementGroup:
    """Make a placement group of ``bundles`` (each a dict like ``{"CPU": 1, "GPU": 1}``): it reserves
    them once they fit together (``ready()`` / ``wait()`` tell when).

    ``lifetime="detached"`` (Ray: the group outlives the job that made it) changes nothing on the embedded
    engine, where every group lives until it is removed or the engine shuts down with its driver. On a Ray
    cluster engine ``name`` and ``lifetime`` are given to Ray's group: a detached one stays on the cluster
    after the engine shuts down, and Ray finds it by name (``ray.util.get_placement_group``).

    Ray 2.60's other keywords: ``topology_strategy={"ray.io/node-id": strategy}`` is ``strategy=`` (other topology
    labels are refused: no node of muster's has one); ``bundle_label_selector`` (one selector per bundle) is checked
    against the node's labels as a task's ``label_selector`` is (``ray.io/node-id``: a selector the node satisfies
    changes nothing, one it does not is refused); ``_soft_target_node_id`` (STRICT_PACK only, as in Ray) is a hint
    the embedded engine's one node always meets, and on a Ray cluster is not handed to Ray (it warns).

    A ``name`` is taken while its group lives (placed, pending or infeasible, until removed or its engine
    shuts down): as Ray's GCS does within a namespace, a second live group of the same name is refused.

    Raises:
        ValueError: an empty or malformed bundle, an unknown strategy, or a ``lifetime`` other than
            None or "detached".
        RaySystemError: a live group already has ``name`` (on a Ray cluster, also one another driver made
            in the namespace, such as a detached group that outlived its driver).
        UnsupportedRayAPIError: called inside a task or actor.
    """
    strategy = _node_strategy(strategy, topology_strategy)
    if lifetime not in (None, "detached"):
        raise InvalidArgumentError(f"placement_group(lifetime={lifetime!r}): use None (the group goes with its "
                                   "driver) or 'detached'.")
    if strategy not in STRATEGIES:
        raise InvalidArgumentError(f"placement_group(strategy={strategy!r}): use one of {', '.join(STRATEGIES)}.")
    if not isinstance(bundles, list) or not bundles:
        raise InvalidArgumentError(f"placement_group(bundles={bundles!r}): "
                                   "pass a non-empty list of dicts like [{'CPU': 1}].")
    clean = []
    for i, b in enumerate(bundles):
        if not isinstance(b, dict) or not b or not any(v > 0 for v in b.values()):
            raise InvalidArgumentError(f"placement_group: bundle {i} is {b!r}; "
                                       "each bundle is a dict of positive amounts, e.g. {'CPU': 1}.")
        clean.append(res.normalize(dict(b), what=f"placement group bundle {i}"))
    if context.in_worker():  # get_runtime() there would start a second engine inside the worker
        raise UnsupportedRayAPIError(
            "placement_group() inside a task or actor: muster makes placement groups in the driver only. Make the "
            "group in the driver and pass it in; a task or actor can schedule work into it from anywhere.")
    _check_placement_hints(len(clean), strategy, _soft_target_node_id, bundle_label_selector)
    runtime = get_runtime()
    if name:  # this driver's groups; on a Ray cluster Ray also refuses a name another driver's group has
        _check_name_free(name, runtime)
    error = never_fits(clean, strategy, runtime.node_resources())
    pg = PlacementGroup(clean, strategy, name, error, lifetime)
    pg._made_on = runtime
    if runtime.name == "local":  # one node holds every bundle; on a Ray cluster Ray places them (not shown)
        from muster.tasks.runtime_context import node_id

        pg._node = node_id()
    if error is None:
        try:
            placed = runtime.reserve(pg.id, clean, strategy, name=name, lifetime=lifetime)
        except ResourcesUnavailableError as exc:  # the engine knows better (a GPU's shares cannot be split)
            pg._error = exc
            pg._placed.set_exception(exc)
        else:
            pg._engine = runtime
            placed.add_done_callback(pg._settle)
    _made[pg.id] = pg
    return pg


def _node_strategy(strategy: str | None, topology: dict[str, str] | None) -> str:
    """The strategy across nodes that ``strategy=`` or Ray's ``topology_strategy=`` asks for (PACK by default)."""
    if topology is None:
        return strategy if strategy is not None else "PACK"
    if strategy is not None:
        raise InvalidArgumentError(f"placement_group(strategy={strategy!r}, topology_strategy={topology!r}): pass "
                                   f"one of them (topology_strategy={{'{NODE_ID_LABEL}': {strategy!r}}} is strategy=).")
    if not isinstance(topology, dict) or set(topology) - {NODE_ID_LABEL}:
        raise InvalidArgumentError(
            f"placement_group(topology_strategy={topology!r}): muster's nodes have no topology labels (only "
            f"'{NODE_ID_LABEL}'), so a group cannot be packed by one. Leave the other labels out, or use strategy=.")
    return topology.get(NODE_ID_LABEL, "PACK")


def _check_placement_hints(n: int, strategy: str, target: str | None, selectors: list[Any] | None) -> None:
    """Ray's ``_soft_target_node_id`` and ``bundle_label_selector`` of a group of ``n`` bundles."""
    if target is not None:
        if strategy != "STRICT_PACK" or not isinstance(target, str) or not target or \
                set(target.lower()) - set("0123456789abcdef"):
            raise InvalidArgumentError(
                f"placement_group(_soft_target_node_id={target!r}, strategy={strategy!r}): as in Ray, pass a node's "
                "hex id (muster.nodes()[i]['NodeID']) with strategy='STRICT_PACK'.")
        if get_runtime().name == "ray":
            warnings.warn(f"placement_group(_soft_target_node_id={target!r}) is not handed to Ray by muster: Ray "
                          "places the group where STRICT_PACK fits. Leave it out to silence this.", stacklevel=3)
    if selectors is None:
        return
    if not isinstance(selectors, list) or len(selectors) != n:
        raise InvalidArgumentError(f"placement_group(bundle_label_selector={selectors!r}): pass a list with one "
                                   f"selector (a dict, {{}} for none) per bundle: {n} of them.")
    for i, selector in enumerate(selectors):
        check_selector(selector, "placement_group()", f"bundle_label_selector[{i}]")


def _check_name_free(name: str, runtime: Any) -> None:
    """Refuse ``name`` while a group of this engine that has it lives (Ray 2.60's GCS fails the second
    ``placement_group(name=...)`` of a namespace with ``RaySystemError`` "... name ... already exists")."""
    for pg in _made.values():
        if pg.name == name and not pg._removed and pg._made_on is runtime:
            raise name_taken_error(name, f"group {pg.id}, {pg._row()['state']}")


def never_fits(bundles: list[dict[str, float]], strategy: str, nodes: list[dict[str, float]]) -> BaseException | None:
    """Why ``bundles`` can never be placed on an engine whose nodes have ``nodes`` (None: they can)."""
    total, summed = res.summed(nodes), res.summed(bundles)
    try:
        if strategy == "STRICT_SPREAD" and len(bundles) > len(nodes):
            raise ResourcesUnavailableError(
                f"placement_group(strategy='STRICT_SPREAD') with {len(bundles)} bundles needs {len(bundles)} nodes; "
                f"the engine has {len(nodes)}. Use strategy='PACK' or 'SPREAD', or add nodes.", total=total)
        for i, b in enumerate(bundles):
            if len(nodes) == 1:
                res.ensure_feasible(b, 1, total, what=f"placement group bundle {i}", knob=_KNOB,
                                    no_gpu_fix=_NO_GPU_FIX)
            elif not any(res.fits(b, node) for node in nodes):
                raise _no_node_holds(f"bundle {i} {{{res.fmt(b)}}}", nodes, total)
        if strategy == "STRICT_PACK" and len(nodes) > 1 and not any(res.fits(summed, node) for node in nodes):
            raise _no_node_holds(f"STRICT_PACK's {len(bundles)} bundles together {{{res.fmt(summed)}}}", nodes, total)
        res.ensure_feasible(summed, 1, total, what=f"placement group ({len(bundles)} bundles together)", knob=_KNOB,
                            no_gpu_fix=_NO_GPU_FIX)
    except ResourcesUnavailableError as exc:
        return exc
    return None


def _no_node_holds(what: str, nodes: list[dict[str, float]], total: dict[str, float]) -> ResourcesUnavailableError:
    listing = "; ".join(f"node {i}: {res.fmt(node)}" for i, node in enumerate(nodes))
    return ResourcesUnavailableError(
        f"placement group: {what} fits on none of the nodes ({listing}), and a bundle never spans nodes. "
        "Fix: make the bundles smaller, use strategy='PACK' or 'SPREAD', or add a bigger node.", total=total)


def remove_placement_group(pg: PlacementGroup) -> None:
    """Remove ``pg`` and give its bundles back. As in Ray, what still uses them is killed: its actors
    (for good: no restart), the workers of its running tasks; work still waiting for the group fails."""
    if not isinstance(pg, PlacementGroup):
        raise InvalidTypeError(f"remove_placement_group() takes a PlacementGroup, got {type(pg).__name__}.")
    if pg.removed:
        return
    pg._removed = True
    if pg._engine is None:  # never placed (infeasible): nothing held
        return
    from muster.tasks import actor

    actor.kill_in_group(pg, reason=f"its placement group {pg.id} was removed (remove_placement_group)")
    pg._engine.unreserve(pg.id)


def placement_group_table(placement_group: PlacementGroup | None = None) -> dict[str, Any]:
    """Ray's table of placement groups: one group's row, or every group this process made by id
    (``placement_group_id``, ``name``, ``bundles`` by index, ``bundles_to_node_id`` (the node id of each
    bundle, "" until placed; Ray's on a Ray cluster), ``strategy``, ``state`` (PENDING, CREATED, REMOVED or
    INFEASIBLE) and ``stats``: ``end_to_end_creation_latency_ms`` and ``scheduling_latency_ms`` (both the
    time from ``placement_group()`` until the bundles were held), ``scheduling_attempt``,
    ``highest_retry_delay_ms`` and ``scheduling_state`` (Ray's QUEUED... names: NO_RESOURCES while pending,
    FINISHED once placed, INFEASIBLE, REMOVED))."""
    if placement_group is not None:
        if not isinstance(placement_group, PlacementGroup):
            raise InvalidTypeError(
                f"placement_group_table({placement_group!r}): pass a PlacementGroup (what placement_group() or "
                f"get_placement_group(name) returns), not a {type(placement_group).__name__}; or no argument for "
                "every group.")
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
