"""Placement groups on the local engine: bundles held out of the machine's slots.

A :class:`Reservation` is pending until all its bundles fit in what the machine
has free at once; then it holds them (the machine's free amounts drop) and each
bundle becomes a :class:`SlotTable` of its own, which only work scheduled into
that bundle draws from. Removing it fails what still waits for it and gives the
bundles back; the engine kills what runs on them.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Callable

from muster.core import resources as res
from muster.core.local.slots import Allocation, NoticeClock, SlotTable, on_this_node
from muster.core.runtime import BundleRef, removed_error
from muster.exceptions import ActorPlacementGroupRemoved, ResourcesUnavailableError, TaskPlacementGroupRemoved


#: The fix a pending placement group's :class:`~muster.core.local.slots.BusyWarning` gives.
GROUP_FIX = ("let that work finish, free it (muster.kill(actor), remove_placement_group(group)), ask for less "
             "(smaller or fewer bundles), or oversubscribe this machine with muster.init(num_cpus=N) (num_gpus=, "
             "resources= for the others).")
#: ... and the one a task or actor waiting for room in its bundle gives.
BUNDLE_FIX = ("let that work finish, ask for less (num_cpus= / num_gpus= / resources= in .options()), schedule it "
              "into another bundle (placement_group_bundle_index=; -1 for the first with room), or make the "
              "group's bundles bigger.")


def describe(group: str, name: str, requests: list[dict[str, float]] | None = None, strategy: str = "PACK") -> str:
    """How messages name a placement group: by its name (else the end of its id, as its repr), then its
    ``requests`` (bundles) and strategy when given."""
    shown = f"placement group {name!r}" if name else f"placement group {group[-8:]}"
    if not requests:
        return shown
    return f"{shown} (bundles {', '.join('{' + res.fmt(b) + '}' for b in requests)}; {strategy})"


class Reservation:
    """One placement group's bundles. Thread-safe. ``label``: how messages name it, with its bundles and
    strategy; ``shown``: without them (:func:`describe`)."""

    def __init__(self, group: str, requests: list[dict[str, float]], name: str = "", strategy: str = "PACK"):
        self.group, self.requests = group, requests
        self.label, self.shown = describe(group, name, requests, strategy), describe(group, name)
        self.placed: Future = Future()  # done once held; its exception: removed before that
        self.stop = threading.Event()  # set on removal: a pending placement stops waiting
        self._cond = threading.Condition()  # shared by the bundles' tables: a wait for any bundle wakes on each
        self._held: list[Allocation] = []
        self.error: BaseException | None = None  # the removal, once removed
        self.bundles: list[SlotTable] = []

    def place(self, held: list[Allocation]) -> bool:
        """Hold ``held`` (one allocation per bundle, from the machine); False if removed meanwhile."""
        with self._cond:
            if self.error is not None:
                return False
            self._held = held
            self.bundles = [SlotTable(a.resources, {i: a.gpu_share for i in a.gpu_ids}, cond=self._cond)
                            for a in held]
            self.placed.set_result(None)  # under the lock: never after a removal's exception
        return True

    def acquire(self, request: dict[str, float], index: int,
                on_wait: Callable[[str], None] | None = None) -> Allocation:
        """Take ``request`` from bundle ``index`` (-1: the first bundle with room), waiting until the
        group is placed and the bundle has room (``on_wait`` told of the latter as by ``SlotTable.acquire``).
        Raises the removal's error once it is removed."""
        self.placed.result()  # while pending, the group's own warning tells the wait
        clock = NoticeClock()
        with self._cond:
            tables = self.bundles if index < 0 else [self.bundles[index]]
            while True:
                if self.error is not None:
                    raise self.error
                for table in tables:
                    got = table.try_take([request])
                    if got is not None:
                        return got[0]
                if on_wait is not None and clock.due():
                    on_wait(self._waiting_message(request, index))
                self._cond.wait(0.5)

    def _waiting_message(self, request: dict[str, float], index: int) -> str:
        free = "; ".join(f"bundle {i}: {res.fmt(t.free())} of {res.fmt(t.total())}" for i, t in enumerate(self.bundles)
                         if index in (-1, i))
        where = f"any bundle of {self.label}" if index < 0 else f"bundle {index} of {self.label}"
        return (f"Waiting for resources: {{{res.fmt(request)}}} in {where}; free now: {free}. Other work in the "
                "group holds the rest.")

    def tables(self, index: int) -> list[SlotTable]:
        """Bundle ``index``'s table (-1: every bundle's); none before the group is placed."""
        return list(self.bundles) if index < 0 else self.bundles[index:index + 1]

    def held(self) -> dict[str, float]:
        """What the group holds out of the machine (nothing while pending or once removed). It takes no lock:
        the machine's table asks, under its own."""
        return res.summed([a.resources for a in list(self._held)])

    def owns(self, alloc: Allocation) -> bool:
        return any(alloc.table is table for table in self.bundles)

    def remove(self, error: BaseException) -> list[Allocation]:
        """Fail every wait for this group with ``error``; return what it held, to give back."""
        with self._cond:
            self.error = error
            self.stop.set()
            held, self._held = self._held, []
            for table in self.bundles:
                table.close(error)
            self._cond.notify_all()
            if not self.placed.done():
                self.placed.set_exception(error)
        return held


class Reservations:
    """The engine's placement groups by id, held out of the machine's ``slots``. Thread-safe."""

    def __init__(self, slots: SlotTable):
        self._slots = slots
        self._groups: dict[str, Reservation] = {}
        self._lock = threading.Lock()

    def reserve(self, group: str, bundles: list[dict[str, float]], name: str = "", strategy: str = "PACK",
                on_wait: Callable[[str], None] | None = None) -> Future:
        """Hold ``bundles`` for ``group`` now if they fit, else as soon as they do (see ``Runtime.reserve``);
        ``on_wait`` is told while it waits, as by ``SlotTable.acquire``."""
        requests = [on_this_node(res.normalize(b, what=f"placement group bundle {i}")) for i, b in enumerate(bundles)]
        if not self._slots.could_hold(requests):
            listing = "; ".join("{" + res.fmt(b) + "}" for b in requests)
            raise ResourcesUnavailableError(
                f"placement group of {len(requests)} bundles ({listing}) cannot ever be placed together on this "
                f"machine ({res.fmt(self._slots.total())}): a bundle's share of a GPU cannot span GPUs. Fix: make "
                "the bundles smaller or fewer.", total=self._slots.total())
        reservation = Reservation(group, requests, name, strategy)
        with self._lock:
            self._groups[group] = reservation
        held = self._slots.try_take(requests)
        if held is not None:
            reservation.place(held)
        else:  # pending: placed once what others hold frees up
            threading.Thread(target=self._place_when_free, args=(reservation, on_wait), name="muster-placement",
                             daemon=True).start()
        return reservation.placed

    def _place_when_free(self, reservation: Reservation, on_wait: Callable[[str], None] | None) -> None:
        held = self._slots.take_when_free(reservation.requests, reservation.stop, on_wait)
        if held is not None and not reservation.place(held):  # removed meanwhile
            for alloc in held:
                self._slots.release(alloc)

    def holds(self, group: str) -> bool:
        with self._lock:
            return group in self._groups

    def groups(self) -> list[Reservation]:
        with self._lock:
            return list(self._groups.values())

    def tables(self, bundle: BundleRef) -> list[SlotTable]:
        """The tables work scheduled into ``bundle`` draws from (none once its group is gone)."""
        with self._lock:
            reservation = self._groups.get(bundle.group)
        return [] if reservation is None else reservation.tables(bundle.index)

    def remove(self, group: str) -> Reservation | None:
        """Remove ``group`` (None: no such group): what waits for it fails with its ``error``, and
        its bundles go back to the machine. What runs on them is the caller's to stop."""
        with self._lock:
            reservation = self._groups.pop(group, None)
        if reservation is not None:
            for alloc in reservation.remove(removed_error(group)):
                self._slots.release(alloc)
        return reservation

    def clear(self) -> None:
        """Remove every group (the engine shuts down): pending placements stop waiting."""
        with self._lock:
            groups = list(self._groups)
        for group in groups:
            self.remove(group)

    def take(self, request: dict[str, float], bundle: BundleRef | None, actor: bool = False,
             on_wait: Callable[[str], None] | None = None) -> Allocation:
        """Hold ``request``: from the machine, or from ``bundle`` of a group (waiting until it has room);
        ``on_wait`` is told while it waits."""
        if bundle is None:
            return self._slots.acquire(request, 1, on_wait=on_wait)[0]
        with self._lock:
            reservation = self._groups.get(bundle.group)
        try:
            if reservation is None:
                raise removed_error(bundle.group)
            return reservation.acquire(request, bundle.index, on_wait)
        except TaskPlacementGroupRemoved as exc:
            if actor:
                raise ActorPlacementGroupRemoved(str(exc)) from None
            raise

