"""Ray's actor concurrency groups keep each group's own limit: at most N of a group's calls run at
once, and a group's calls never wait behind another group's.  Threaded and async actors, real
worker processes; each actor counts the calls it runs at once, per tag, and keeps the peak."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import warnings

import pytest
from _task_helpers import TIMEOUT, wait_for_file

import muster
from muster.exceptions import InvalidArgumentError

GROUPS = {"one": 1, "two": 2}


class _Peaks:
    """Calls running at once, per tag, and the most there ever were."""

    def __init__(self):
        self.lock = threading.Lock()
        self.running: dict[str, int] = {}
        self.peak: dict[str, int] = {}

    def enter(self, tag):
        with self.lock:
            self.running[tag] = self.running.get(tag, 0) + 1
            self.peak[tag] = max(self.peak.get(tag, 0), self.running[tag])

    def leave(self, tag):
        with self.lock:
            self.running[tag] -= 1


class Threaded:
    def __init__(self):
        self.counts, self.released = _Peaks(), threading.Event()

    def _work(self, tag, seconds):
        self.counts.enter(tag)
        time.sleep(seconds)
        self.counts.leave(tag)

    @muster.method(concurrency_group="one")
    def one(self, tag="one", seconds=0.3):
        self._work(tag, seconds)

    @muster.method(concurrency_group="two")
    def two(self, tag="two", seconds=0.3):
        self._work(tag, seconds)

    def plain(self, tag="default", seconds=0.3):
        self._work(tag, seconds)

    @muster.method(concurrency_group="one")
    def hold(self):
        return self.released.wait(30)  # False: nothing released it in time

    @muster.method(concurrency_group="two")
    def release(self):
        self.released.set()

    def peaks(self):
        return dict(self.counts.peak)


class Async:
    def __init__(self):
        # a threading.Event: each group runs on an event loop of its own, so an asyncio.Event could not be
        # set from group two for a waiter in group one (as in Ray)
        self.counts, self.released = _Peaks(), threading.Event()

    async def _work(self, tag, seconds):
        self.counts.enter(tag)
        await asyncio.sleep(seconds)
        self.counts.leave(tag)

    @muster.method(concurrency_group="one")
    async def one(self, tag="one", seconds=0.3):
        await self._work(tag, seconds)

    @muster.method(concurrency_group="two")
    async def two(self, tag="two", seconds=0.3):
        await self._work(tag, seconds)

    async def plain(self, tag="default", seconds=0.3):
        await self._work(tag, seconds)

    @muster.method(concurrency_group="one")
    async def hold(self):
        return await asyncio.to_thread(self.released.wait, 30)  # False: nothing released it in time

    @muster.method(concurrency_group="two")
    async def release(self):
        self.released.set()

    async def peaks(self):
        return dict(self.counts.peak)


@pytest.fixture(params=["threaded", "async"])
def grouped(request):
    """An actor with groups one (1) and two (2) and a default group of 2 (max_concurrency)."""
    cls = Threaded if request.param == "threaded" else Async
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: the groups' limits are kept
        actor = muster.remote(concurrency_groups=GROUPS, max_concurrency=2)(cls).remote()
    yield actor
    muster.kill(actor)


def test_each_group_runs_at_most_its_size_at_once(grouped):
    calls = [grouped.one.remote() for _ in range(3)] + [grouped.two.remote() for _ in range(4)]
    calls += [grouped.plain.remote() for _ in range(4)]
    muster.get(calls, timeout=TIMEOUT)
    assert muster.get(grouped.peaks.remote(), timeout=TIMEOUT) == {"one": 1, "two": 2, "default": 2}


def test_a_group_runs_while_another_is_saturated(grouped):
    muster.get(grouped.peaks.remote(), timeout=TIMEOUT)  # the actor is up: its start is not in the bound below
    holds = [grouped.hold.remote() for _ in range(6)]  # more than every group's limits together
    time.sleep(0.3)  # the holds reach the actor first
    # group two never waits behind group one: the first hold keeps group one for up to 30 s, so a release queued
    # behind it would miss this bound by 20 s (the bound was 2 s with 3 s holds: a loaded box's call missed it)
    muster.get(grouped.release.remote(), timeout=10)
    assert muster.get(holds, timeout=TIMEOUT) == [True] * 6


def test_a_call_picks_another_group_with_options(grouped):
    as_two = [grouped.one.options(concurrency_group="two").remote("one as two") for _ in range(4)]
    as_one = [grouped.two.options(concurrency_group="one").remote("two as one") for _ in range(3)]
    muster.get(as_two + as_one, timeout=TIMEOUT)
    assert muster.get(grouped.peaks.remote(), timeout=TIMEOUT) == {"one as two": 2, "two as one": 1}


@muster.remote
def _calls_in_group(actor, group, n):
    """Calls from inside a worker go through the driver: the group override travels with them."""
    return muster.get([actor.two.options(concurrency_group=group).remote("from a task") for _ in range(n)])


def test_a_worker_call_keeps_its_group_override():
    actor = muster.remote(concurrency_groups=GROUPS)(Threaded).remote()
    try:
        muster.get(_calls_in_group.remote(actor, "one", 3), timeout=TIMEOUT)
        assert muster.get(actor.peaks.remote(), timeout=TIMEOUT) == {"from a task": 1}
    finally:
        muster.kill(actor)


class Misnamed:
    @muster.method(concurrency_group="gpu")
    def f(self):
        return 1


def test_a_method_naming_an_unknown_group_fails_naming_the_groups():
    with pytest.raises(InvalidArgumentError, match=r"'gpu'.*\['compute', 'io'\]"):
        muster.remote(concurrency_groups={"io": 1, "compute": 2})(Misnamed).remote()
    with pytest.raises(InvalidArgumentError, match=r"'gpu'.*declares none"):
        muster.remote(Misnamed).remote()


def test_a_call_naming_an_unknown_group_fails_naming_the_groups():
    actor = muster.remote(concurrency_groups=GROUPS)(Threaded).remote()
    try:
        with pytest.raises(InvalidArgumentError, match=r"plain.options\(concurrency_group='gpu'\).*\['one', 'two'\]"):
            actor.plain.options(concurrency_group="gpu").remote()
        assert muster.get(actor.plain.remote(seconds=0), timeout=TIMEOUT) is None  # the actor is fine
    finally:
        muster.kill(actor)


@pytest.mark.parametrize("groups", [{"io": 0}, {"io": "2"}, ["io"]])
def test_bad_concurrency_groups_are_refused(groups):
    with pytest.raises(InvalidArgumentError, match="concurrency_groups="):
        muster.remote(concurrency_groups=groups)(Threaded).remote()


def _block_until(started: str, release: str, limit_s: float = 60.0) -> None:
    """Mark ``started``, then hold the thread (a sync wait: in an ``async def`` it blocks the event loop) until the
    test writes ``release`` (or ``limit_s``): a call queued behind the loop waits for the test, not for a
    duration a loaded machine may eat up."""
    open(started, "w").close()
    deadline = time.monotonic() + limit_s
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.01)


class Blocking:
    """An async actor whose group ``slow`` blocks its own event loop (a sync wait in an ``async def``)."""

    def __init__(self):
        self.init_loop = id(asyncio.get_running_loop())  # the constructor runs on the default group's loop

    @muster.method(concurrency_group="slow")
    async def block(self, started, release):
        _block_until(started, release)  # holds this group's loop, not the others'
        return id(asyncio.get_running_loop())

    @muster.method(concurrency_group="fast")
    async def ping(self):
        return threading.current_thread().name, id(asyncio.get_running_loop())

    async def default_ping(self):
        return threading.current_thread().name, id(asyncio.get_running_loop())

    def loops(self):
        return self.init_loop


def test_an_async_actors_groups_each_run_on_an_event_loop_of_their_own(tmp_path):
    actor = muster.remote(concurrency_groups={"slow": 1, "fast": 1})(Blocking).remote()
    started, release = str(tmp_path / "started"), str(tmp_path / "release")
    try:
        init_loop = muster.get(actor.loops.remote(), timeout=TIMEOUT)
        blocked = actor.block.remote(started, release)
        wait_for_file(started)  # the block has its group's loop, until the release below
        # not behind the blocked loop: a call queued there would wait for the release (a GetTimeoutError here);
        # it was a block of 2 s and a bound of 1.2 s, which two calls on a loaded box could miss
        fast_thread, fast_loop = muster.get(actor.ping.remote(), timeout=10)
        default_thread, default_loop = muster.get(actor.default_ping.remote(), timeout=10)
        open(release, "w").close()
        slow_loop = muster.get(blocked, timeout=TIMEOUT)
        assert default_loop == init_loop  # the default group's loop is the constructor's
        assert len({init_loop, fast_loop, slow_loop}) == 3
        assert fast_thread != default_thread
    finally:
        muster.kill(actor)


class Busy:
    """An async actor whose calls can block its (default group's) event loop, or just hold a place in it."""

    async def block(self, started, release):
        _block_until(started, release)  # the loop does nothing else meanwhile

    async def hold(self, release):
        """Hold a place in the group (not the loop) until the test writes ``release`` (at most 60 s)."""
        deadline = time.monotonic() + 60
        while not os.path.exists(release) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)


def test_builtin_methods_answer_while_a_coroutine_blocks_the_loop(tmp_path):
    actor = muster.remote(Busy).remote()  # Ray runs its __ray_* methods beside the loop, not on it
    started, release = str(tmp_path / "started"), str(tmp_path / "release")
    try:
        muster.get(actor.__ray_ready__.remote(), timeout=TIMEOUT)
        blocked = actor.block.remote(started, release)
        wait_for_file(started)  # the block has the loop, until the release below: a call behind it times out
        assert muster.get(actor.__ray_ready__.remote(), timeout=10) is True
        thread = muster.get(actor.__ray_call__.remote(lambda obj: threading.current_thread().name), timeout=10)
        assert "loop" not in thread
        open(release, "w").close()
        muster.get(blocked, timeout=TIMEOUT)
        blocked = actor.block.remote(started + "2", release + "2")  # released by nothing: it blocks for 60 s
        wait_for_file(started + "2")
        actor.__ray_terminate__.remote()  # ends it now, not once the loop is free
        with pytest.raises(muster.exceptions.ActorDiedError):
            muster.get(blocked, timeout=20)
    finally:
        muster.kill(actor)


def test_builtin_methods_wait_for_a_place_in_a_full_group(tmp_path):
    actor = muster.remote(max_concurrency=1)(Busy).remote()  # as Ray's: all its places taken, they wait
    release = str(tmp_path / "release")
    try:
        # its place is taken until the release below: a 2 s hold could end before the get's 0.8 s were up, were the
        # driver held up for 0.7 s on a loaded box
        held = actor.hold.remote(release)
        time.sleep(0.5)
        ready = actor.__ray_ready__.remote()
        with pytest.raises(muster.exceptions.GetTimeoutError):
            muster.get(ready, timeout=0.8)
        open(release, "w").close()
        assert muster.get(ready, timeout=TIMEOUT) is True
        muster.get(held, timeout=TIMEOUT)
    finally:
        muster.kill(actor)


class Counted:
    """An async actor that counts the calls it runs at once, whether on its loop or beside it."""

    def __init__(self):
        self.peaks = _Peaks()

    async def step(self, seconds):
        self.peaks.enter("all")
        await asyncio.sleep(seconds)
        self.peaks.leave("all")
        return self.peaks.peak["all"]


def _busy(obj, seconds):  # run by __ray_call__, beside the loop
    obj.peaks.enter("all")
    time.sleep(seconds)
    obj.peaks.leave("all")
    return obj.peaks.peak["all"]


def test_a_builtin_beside_the_loop_takes_a_place_in_its_group():
    """It ran beside the loop without a place: a coroutine of a one-place group ran with it."""
    actor = muster.remote(max_concurrency=1)(Counted).remote()
    try:
        muster.get(actor.__ray_ready__.remote(), timeout=TIMEOUT)
        beside = actor.__ray_call__.remote(_busy, 0.5)
        step = actor.step.remote(0.1)
        assert muster.get([beside, step], timeout=TIMEOUT) == [1, 1]
    finally:
        muster.kill(actor)


class Plain:
    pass


def test_rays_system_group_is_accepted_and_runs_beside_the_groups(tmp_path):
    """Ray's libraries call ``__ray_call__.options(concurrency_group="_ray_system")`` on any actor: it runs
    (one at a time) while the actor's own group is full."""
    actor = muster.remote(max_concurrency=1)(Busy).remote()
    plain = muster.remote(Plain).remote()  # one call at a time: it runs in its turn
    release = str(tmp_path / "release")
    try:
        muster.get(actor.__ray_ready__.remote(), timeout=TIMEOUT)  # up: its start is not in the bound below
        held = actor.hold.remote(release)  # the group's one place, until the release below
        time.sleep(0.3)
        thread = actor.__ray_call__.options(concurrency_group="_ray_system").remote(
            lambda obj: threading.current_thread().name)
        # a call waiting for the group's place would wait for the release: a GetTimeoutError here. With a 2 s
        # hold, the bound was 1.5 s, the actor's start included, which a loaded box could miss
        assert "builtins" in muster.get(thread, timeout=10)
        open(release, "w").close()
        ran = plain.__ray_call__.options(concurrency_group="_ray_system").remote(lambda obj: type(obj).__name__)
        assert muster.get(ran, timeout=TIMEOUT) == "Plain"
        muster.get(held, timeout=TIMEOUT)
    finally:
        muster.kill(actor)
        muster.kill(plain)
