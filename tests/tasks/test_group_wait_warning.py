"""Placement groups never wait silently either (see test_busy_wait_warning.py for tasks and actors).

A group whose bundles fit the machine but are held by other work stays pending; after ``slots._WAIT_NOTICE_S``
one warning on muster's logger names the group (its name, bundles and strategy), what is free, what holds the
rest and the fix. A task or actor scheduled into a bundle that other work of the group fills is warned about
the same way, naming the bundle. Groups placed promptly, and work that finds room in its bundle, are not.
"""

from __future__ import annotations

import os
import time

from _task_helpers import TIMEOUT, wait_for
from _waiting_work import Needy, hold_until, nap

import muster
from muster.core.local import slots
from muster.util.placement_group import placement_group, remove_placement_group
from muster.util.scheduling_strategies import PlacementGroupSchedulingStrategy


def _cpus() -> int:
    return int(muster.cluster_resources()["CPU"])


def _holding(cpus: int, tmp_path, **options):
    """A task holding ``cpus`` CPUs (in a bundle, with ``options``) until the returned ``go`` file exists."""
    go, started = str(tmp_path / "go"), str(tmp_path / "started")
    ref = hold_until.options(num_cpus=cpus, **options).remote(go, started)
    assert wait_for(lambda: os.path.exists(started), TIMEOUT)
    return ref, go


def test_a_pending_placement_group_is_warned_about_naming_it_its_holders_and_the_fix(busy, monkeypatch, tmp_path):
    monkeypatch.setattr(slots, "_WAIT_NOTICE_S", 0.3)
    cpus = _cpus()
    ref, go = _holding(cpus, tmp_path)
    t0 = time.monotonic()
    pg = placement_group([{"CPU": 1}] * cpus, strategy="SPREAD", name="late-group")
    try:
        assert wait_for(busy, timeout=10), "no warning for a placement group waiting for CPUs a task holds"
        assert time.monotonic() - t0 >= 0.3 and not pg.wait(0)  # not before the delay; still pending
        time.sleep(1.0)  # told twice more meanwhile: still one warning
        (message,) = busy()
        bundles = ", ".join(["{CPU=1}"] * cpus)
        assert f"placement group 'late-group' (bundles {bundles}; SPREAD) has waited" in message, message
        assert "to be placed." in message and f"free now: CPU=0 of CPU={cpus}" in message
        assert "Held by: task hold_until (pid " in message and "It is placed once CPU is freed" in message
        assert "remove_placement_group" in message and "smaller or fewer bundles" in message  # the fix
        open(go, "w").close()
        holder = muster.get(ref, timeout=TIMEOUT)
        assert f"(pid {holder}, CPU={cpus})" in message
        assert muster.get(pg.ready(), timeout=TIMEOUT) == pg  # placed once the holder is done
    finally:
        open(go, "w").close()
        remove_placement_group(pg)
    assert len(busy()) == 1


def test_work_waiting_for_room_in_its_bundle_is_warned_about_naming_the_bundle(busy, monkeypatch, tmp_path):
    monkeypatch.setattr(slots, "_WAIT_NOTICE_S", 0.3)
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], name="full-bundle")
    assert pg.wait(TIMEOUT)
    into = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=1)
    ref, go = _holding(1, tmp_path, scheduling_strategy=into)
    try:
        waiting = nap.options(scheduling_strategy=into).remote(0)
        needy = Needy.options(num_cpus=1, scheduling_strategy=into).remote()
        assert wait_for(lambda: len(busy()) == 2, timeout=10), f"not one warning each: {busy()}"
        task = next(m for m in busy() if m.startswith("muster: task nap has waited"))
        actor = next(m for m in busy() if m.startswith("muster: actor Needy has waited"))
        for message in (task, actor):
            assert "{CPU=1} in bundle 1 of placement group 'full-bundle' (bundles {CPU=1}, {CPU=1}; PACK)" in message
            assert "free now: bundle 1: CPU=0 of CPU=1" in message and "Held by: task hold_until (pid " in message
            assert "placement_group_bundle_index=" in message  # the fix: another bundle, or less
        assert muster.wait([waiting], timeout=0)[0] == []
        open(go, "w").close()
        assert muster.get(needy.ping.remote(), timeout=TIMEOUT) == "pong"
        muster.kill(needy)
        assert muster.get(waiting, timeout=TIMEOUT) == "rested"
    finally:
        open(go, "w").close()
        remove_placement_group(pg)
    assert len(busy()) == 2


def test_groups_placed_promptly_and_work_with_room_in_its_bundle_are_not_warned_about(busy, tmp_path):
    started = str(tmp_path / "started")
    short = nap.options(num_cpus=_cpus()).remote(1.0, started)  # holds every CPU for 1 s: well under the delay
    assert wait_for(lambda: os.path.exists(started), TIMEOUT)
    pg = placement_group([{"CPU": 1}], name="soon")
    assert muster.get(pg.ready(), timeout=TIMEOUT) == pg and muster.get(short, timeout=TIMEOUT) == "rested"
    into = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0)
    first = nap.options(scheduling_strategy=into).remote(1.0)
    assert muster.get([first, nap.options(scheduling_strategy=into).remote(0)], timeout=TIMEOUT) == ["rested"] * 2
    remove_placement_group(pg)
    assert busy() == []


def test_work_waiting_for_what_a_group_holds_names_the_group(busy, monkeypatch):
    # The group holds every CPU, one bundle of them used by an actor: the group is what holds them (before, the
    # actor alone was named, with half of them).
    monkeypatch.setattr(slots, "_WAIT_NOTICE_S", 0.3)
    cpus = _cpus()
    pg = placement_group([{"CPU": cpus // 2}, {"CPU": cpus - cpus // 2}], name="holds-all")
    assert pg.wait(TIMEOUT)
    needy = Needy.options(num_cpus=cpus // 2, scheduling_strategy=PlacementGroupSchedulingStrategy(pg, 0)).remote()
    assert muster.get(needy.ping.remote(), timeout=TIMEOUT) == "pong"
    waiting = nap.remote(0)
    try:
        assert wait_for(busy, timeout=10), "no warning for a task waiting for CPUs a group holds"
        (message,) = busy()
        assert f"Held by: placement group 'holds-all' (CPU={cpus}). It starts once CPU is freed." in message, message
    finally:
        remove_placement_group(pg)  # kills the actor too
    assert muster.get(waiting, timeout=TIMEOUT) == "rested"
