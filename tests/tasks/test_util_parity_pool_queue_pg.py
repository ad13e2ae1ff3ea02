"""Ray's ``ray.util`` samples ported to muster (imports changed only), where muster differed from Ray or gave an
unclear error: ActorPool after a failed submit, Queue batch arguments and use after shutdown, a placement group's
``ready()`` after ``remove_placement_group``."""

from __future__ import annotations

import pytest
from _task_helpers import TIMEOUT

import muster
from muster.exceptions import InvalidArgumentError, InvalidTypeError, TaskPlacementGroupRemoved
from muster.util import ActorPool, placement_group, placement_group_table, remove_placement_group
from muster.util.queue import Queue


@muster.remote
class Doubler:
    def double(self, v):
        return 2 * v


def test_actor_pool_keeps_its_actor_when_fn_fails_before_starting_work():
    actor = Doubler.remote()
    try:
        pool = ActorPool([actor])
        with pytest.raises(AttributeError, match="dubble"):  # a typo in the method name
            pool.submit(lambda a, v: a.dubble.remote(v), 1)
        with pytest.raises(InvalidTypeError, match=r"got int 1; e.g. lambda a, v: a.method.remote\(v\)"):
            pool.submit(lambda a, v: v, 1)  # forgot .remote(...)
        assert pool.has_free() and not pool.has_next()  # the actor is still in the pool, idle
        assert list(pool.map(lambda a, v: a.double.remote(v), [1, 2, 3])) == [2, 4, 6]
        assert pool.pop_idle() is actor
        pool.submit(lambda a, v: a.double.remote(v), 4)  # waits for an actor the pool no longer has
        with pytest.raises(InvalidArgumentError, match=r"1 submitted value\(s\) wait for an actor .*push\(\)"):
            pool.get_next(timeout=TIMEOUT)
        pool.push(actor)
        assert pool.get_next(timeout=TIMEOUT) == 8
    finally:
        muster.kill(actor)


def test_queue_batch_arguments_and_use_after_shutdown_say_what_to_do():
    q = Queue()
    try:
        with pytest.raises(InvalidArgumentError, match=r"get_nowait_batch\(num_items=-1\): pass a number >= 0"):
            q.get_nowait_batch(-1)  # Ray: ValueError; it used to return [] silently
        with pytest.raises(InvalidTypeError, match=r"get_nowait_batch\(num_items='2'\): pass an int"):
            q.get_nowait_batch("2")  # Ray: TypeError; it used to fail inside the queue's actor
        with pytest.raises(InvalidTypeError, match=r"put_nowait_batch\(5\): pass an iterable.*put_nowait\(\) adds"):
            q.put_nowait_batch(5)
        q.put_nowait_batch((1, 2))
        assert q.get_nowait_batch(2) == [1, 2]
    finally:
        q.shutdown()
    q.shutdown()  # a second shutdown is a no-op, as in Ray
    for call in (lambda: q.put(1), lambda: q.get_nowait(), lambda: q.qsize(), lambda: q.get_nowait_batch(1)):
        with pytest.raises(AttributeError, match=r"was shut down .*make a new Queue"):  # Ray: AttributeError too
            call()


def test_a_queue_with_a_negative_maxsize_is_unbounded_as_in_ray():
    """Ray 2.60 (run side by side): ``Queue(maxsize=-1)`` is unbounded, as an ``asyncio.Queue`` or ``queue.Queue`` is;
    muster refused it with an InvalidArgumentError."""
    q = Queue(maxsize=-1)
    try:
        q.put_nowait_batch(range(5))
        q.put(5, block=False)
        assert not q.full() and q.qsize() == 6
        assert q.get_nowait_batch(6) == [0, 1, 2, 3, 4, 5]
    finally:
        q.shutdown()
    with pytest.raises(InvalidTypeError, match=r"Queue\(maxsize='3'\): use an integer"):
        Queue(maxsize="3")  # Ray: a TypeError at its first put, from inside its actor


def test_ready_of_a_removed_placement_group_raises_and_the_table_names_a_wrong_argument():
    pg = placement_group([{"CPU": 1}], name="parity_removed")
    assert muster.get(pg.ready(), timeout=TIMEOUT) == pg
    remove_placement_group(pg)
    with pytest.raises(TaskPlacementGroupRemoved, match=r"\(parity_removed\) was removed .*make a new placement"):
        muster.get(pg.ready(), timeout=TIMEOUT)  # Ray: TaskPlacementGroupRemoved; it used to resolve to the group
    assert placement_group_table(pg)["state"] == "REMOVED"
    with pytest.raises(TaskPlacementGroupRemoved, match="removed by remove_placement_group"):
        pg.wait(0.1)  # Ray's wait raises for a group that no longer exists; False made `while not wait()` spin
    with pytest.raises(InvalidTypeError, match=r"placement_group_table\('parity_removed'\): pass a PlacementGroup"):
        placement_group_table("parity_removed")


def test_every_ray_accelerator_constant_is_there_with_rays_value():
    import muster.util.accelerators as acc

    ray_260_only = {  # names Ray 2.60's ray.util.accelerators has that muster lacked
        "AMD_RADEON_R9_200_HD_7900": "AMD-Radeon-R9-200-HD-7900", "AMD_RADEON_HD_7900": "AMD-Radeon-HD-7900",
        "APPLE_SILICON": "Apple-Silicon", "APPLE_M1": "M1", "APPLE_M1_PRO": "M1-Pro", "APPLE_M1_MAX": "M1-Max",
        "APPLE_M1_ULTRA": "M1-Ultra", "APPLE_M2": "M2", "APPLE_M2_PRO": "M2-Pro", "APPLE_M2_MAX": "M2-Max",
        "APPLE_M2_ULTRA": "M2-Ultra", "APPLE_M3": "M3", "APPLE_M3_PRO": "M3-Pro", "APPLE_M3_MAX": "M3-Max",
        "METAX_C500": "MXC500", "METAX_C550": "MXC550", "MOBILINT_ARIES": "MOBILINT_ARIES",
        "MOBILINT_REGULUS": "MOBILINT_REGULUS",
    }
    assert {name: getattr(acc, name, None) for name in ray_260_only} == ray_260_only
