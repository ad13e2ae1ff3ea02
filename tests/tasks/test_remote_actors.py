"""Actors through the public API: ``@muster.remote`` classes, ordered calls, death, restarts.

Every test kills the actors it starts (``muster.kill``), so the leak check
sees no worker left behind.  Deaths are real SIGKILLs.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import time

import pytest
from _task_helpers import TIMEOUT, wait_for, wait_for_file

import muster
from muster.exceptions import ActorDiedError, ActorUnavailableError, ResourcesUnavailableError


@muster.remote
class Counter:
    def __init__(self):
        self.i = 0

    def get(self):
        return self.i

    def incr(self, value):
        self.i += value

    def pid(self):
        return os.getpid()


@muster.remote(num_cpus=1, max_restarts=0)
class Log:
    def __init__(self, prefix=""):
        self.prefix, self.entries = prefix, []

    def append(self, item, delay=0.0):
        time.sleep(delay)
        self.entries.append(f"{self.prefix}{item}")

    def entries_(self):
        return list(self.entries)

    def pid(self):
        return os.getpid()

    def actor_id(self):
        return muster.get_runtime_context().get_actor_id()

    def block(self, started, seconds):
        open(started, "w").close()
        time.sleep(seconds)
        return "finished"

    def boom(self):
        raise KeyError("no such entry")


@pytest.fixture
def actors():
    """Start actors through ``actors(handle)``; every one is killed after the test."""
    made = []

    def track(handle):
        made.append(handle)
        return handle

    yield track
    for handle in made:
        muster.kill(handle)


def test_seed_counter_sample(actors):
    c = actors(Counter.remote())
    for _ in range(10):
        c.incr.remote(1)
    assert muster.get(c.get.remote(), timeout=TIMEOUT) == 10


def test_calls_run_in_submission_order(actors):
    log = actors(Log.remote())
    # Earlier calls sleep longer: any reordering or overlap would show.
    refs = [log.append.remote(i, delay=0.05 * (5 - i) if i < 5 else 0.0) for i in range(20)]
    muster.get(refs, timeout=TIMEOUT)
    assert muster.get(log.entries_.remote(), timeout=TIMEOUT) == [str(i) for i in range(20)]


def test_constructor_arguments_and_refs_as_arguments(actors):
    @muster.remote
    def make_prefix():
        return "item-"

    log = actors(Log.options(num_cpus=0).remote(make_prefix.remote()))
    log.append.remote(muster.put("a"))
    assert muster.get(log.entries_.remote(), timeout=TIMEOUT) == ["item-a"]


def test_actor_state_persists_in_one_process(actors):
    c = actors(Counter.remote())
    pids = set()
    for i in range(5):
        c.incr.remote(i)
        pids.add(muster.get(c.pid.remote(), timeout=TIMEOUT))
    assert muster.get(c.get.remote(), timeout=TIMEOUT) == 10
    assert len(pids) == 1 and os.getpid() not in pids


@muster.remote
def bump(counter, times):
    for _ in range(times):
        counter.incr.remote(1)
    return muster.get(counter.get.remote())


def test_actor_handles_can_be_passed_to_tasks(actors):
    c = actors(Counter.remote())
    c.incr.remote(100)
    assert muster.get(bump.remote(c, 5), timeout=TIMEOUT) == 105
    assert muster.get(c.get.remote(), timeout=TIMEOUT) == 105


@muster.remote
def start_counter():
    c = Counter.remote()
    c.incr.remote(7)
    return c


def test_an_actor_created_in_a_task_is_usable_from_the_driver(actors):
    c = actors(muster.get(start_counter.remote(), timeout=TIMEOUT))
    assert muster.get(c.get.remote(), timeout=TIMEOUT) == 7


def test_method_exception_keeps_its_type_and_the_actor_lives_on(actors):
    log = actors(Log.remote())
    with pytest.raises(KeyError) as info:
        muster.get(log.boom.remote(), timeout=TIMEOUT)
    assert "in boom" in str(info.value)  # the remote traceback names the method
    log.append.remote("after")
    assert muster.get(log.entries_.remote(), timeout=TIMEOUT) == ["after"]


@muster.remote
class Plain:  # no __init__: it takes no arguments
    @staticmethod
    def twice(x):
        return 2 * x


@muster.remote
class FromNew:  # no __init__, but a __new__ that takes an argument: not checked as argument-less
    def __new__(cls, x):
        self = super().__new__(cls)
        self.x = x
        return self

    def get(self):
        return self.x


def test_actor_and_method_arguments_are_checked_at_the_call_as_ray(actors):
    with pytest.raises(TypeError, match=r"Counter\.remote\(\): too many positional arguments; it takes \(\)"):
        Counter.remote(1)
    with pytest.raises(TypeError, match=r"Plain\.remote\(\): too many positional arguments"):
        Plain.remote(1)
    c = actors(Counter.remote())
    with pytest.raises(TypeError, match=r"Counter\.incr\.remote\(\): missing a required argument: 'value'"):
        c.incr.remote()
    with pytest.raises(TypeError, match="Log.remote"):
        Log.remote(prefix="a", suffix="b")
    p = actors(Plain.remote())
    with pytest.raises(TypeError, match=r"Plain\.twice\.remote\(\): missing a required argument: 'x'"):
        p.twice.remote()
    c.incr.remote(value=2)
    n = actors(FromNew.remote(4))
    assert muster.get([c.get.remote(), p.twice.remote(3), n.get.remote()], timeout=TIMEOUT) == [2, 6, 4]


def test_calling_a_class_or_method_directly_says_use_remote(actors):
    with pytest.raises(TypeError, match=r"Counter\.remote\("):
        Counter()
    c = actors(Counter.remote())
    with pytest.raises(TypeError, match=r"\.incr\.remote\("):
        c.incr(1)
    with pytest.raises(AttributeError, match="no_such_method"):
        c.no_such_method


@muster.remote
def misspell(counter):
    try:
        counter.incrr
    except AttributeError as exc:  # as in Ray: on access, in the task, not later as the actor's failure
        return str(exc)
    return "no error"


def test_a_missing_method_names_the_class_and_its_methods_closest_first(actors):
    c = actors(Counter.remote())
    with pytest.raises(AttributeError, match=r"Actor Counter has no method 'incrr'; did you mean 'incr'\? its "
                                             r"methods are \['incr', 'get', 'pid'\]\. Fix: call one of them"):
        c.incrr
    with pytest.raises(AttributeError, match=r"no method 'zzz'; its methods are \['get', 'incr', 'pid'\]"):
        c.zzz.remote()
    assert "did you mean 'incr'?" in muster.get(misspell.remote(c), timeout=TIMEOUT)


def test_impossible_actor_request_fails_at_remote_time():
    with pytest.raises(ResourcesUnavailableError, match="GPU=1"):
        Counter.options(num_gpus=1).remote()
    with pytest.raises(ResourcesUnavailableError, match="CPU=100"):
        Counter.options(num_cpus=100).remote()


def test_kill_fails_pending_and_later_calls(actors, tmp_path):
    log = actors(Log.remote())
    started = str(tmp_path / "started")
    pending = log.block.remote(started, 30)
    wait_for_file(started)
    muster.kill(log)
    with pytest.raises(ActorDiedError) as info:
        muster.get(pending, timeout=TIMEOUT)
    assert "stopped by muster.kill()" in str(info.value)  # not only "killed by SIGKILL": who did it
    with pytest.raises(ActorDiedError, match=r"stopped by muster.kill\(\)"):
        muster.get(log.entries_.remote(), timeout=TIMEOUT)


def test_actor_whose_process_dies_fails_pending_and_later_calls(actors, tmp_path):
    log = actors(Log.remote())
    pid = muster.get(log.pid.remote(), timeout=TIMEOUT)
    actor_id = muster.get(log.actor_id.remote(), timeout=TIMEOUT)
    started = str(tmp_path / "started")
    pending = log.block.remote(started, 30)
    wait_for_file(started)
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(ActorDiedError) as info:
        muster.get(pending, timeout=TIMEOUT)
    assert info.value.pid == pid and info.value.exitcode == -signal.SIGKILL
    assert info.value.actor_id == actor_id  # Ray's RayActorError.actor_id: which actor died
    assert pickle.loads(pickle.dumps(info.value)).actor_id == actor_id  # kept when passed on
    for _ in range(2):
        with pytest.raises(ActorDiedError) as info:
            muster.get(log.pid.remote(), timeout=TIMEOUT)
        assert info.value.actor_id == actor_id


class Flaky:
    """Dies (its process exits) the first time it runs ``work(1)``; logs each call it finishes."""

    def __init__(self, folder):
        self.folder = folder

    def work(self, i):
        if i == 1 and not os.path.exists(os.path.join(self.folder, "died")):
            open(os.path.join(self.folder, "died"), "w").close()
            sys.exit(3)  # ends the actor, as in Ray
        with open(os.path.join(self.folder, "log"), "a") as f:
            f.write(f"{i}\n")
        return i


@pytest.mark.parametrize("max_concurrency", [1, 2])
def test_max_task_retries_sends_the_calls_the_actor_died_under_again_in_order(actors, tmp_path, max_concurrency):
    flaky = actors(muster.remote(max_restarts=1, max_task_retries=1, max_concurrency=max_concurrency)(Flaky)
                   .remote(str(tmp_path)))
    assert muster.get([flaky.work.remote(i) for i in range(4)], timeout=TIMEOUT) == [0, 1, 2, 3]
    if max_concurrency == 1:  # one at a time: the retried calls ran in their order on the new process
        assert open(tmp_path / "log").read().split() == ["0", "1", "2", "3"]


def test_without_task_retries_the_call_fails_naming_the_exit_and_the_actor_restarts(actors, tmp_path):
    flaky = actors(muster.remote(max_restarts=1)(Flaky).remote(str(tmp_path)))
    assert muster.get(flaky.work.remote(0), timeout=TIMEOUT) == 0
    with pytest.raises(ActorUnavailableError, match="exited with code 3. The actor is restarting") as info:
        muster.get(flaky.work.remote(1), timeout=TIMEOUT)  # as Ray: it restarts, so not ActorDiedError itself
    assert info.value.exitcode == 3 and isinstance(info.value, ActorDiedError)  # still a RayActorError
    again = pickle.loads(pickle.dumps(info.value))
    assert type(again) is ActorUnavailableError and str(again) == str(info.value)
    assert again.actor_id == info.value.actor_id is not None
    assert _first_answer(lambda: flaky.work.remote(2)) == 2  # restarted (max_restarts=1)


class AsyncLeaver:
    async def leave(self):
        sys.exit(4)


def test_sys_exit_in_an_async_actor_ends_it_instead_of_stopping_its_event_loop(actors):
    leaver = actors(muster.remote(AsyncLeaver).remote())
    with pytest.raises(ActorDiedError, match="exited with code 4"):
        muster.get(leaver.leave.remote(), timeout=TIMEOUT)


def test_sys_exit_in_a_task_fails_the_task_and_never_ends_the_driver():
    @muster.remote(max_retries=0)
    def leaves():
        sys.exit(2)

    with pytest.raises(muster.exceptions.RayTaskError, match="SystemExit: 2") as info:
        muster.get(leaves.remote(), timeout=TIMEOUT)
    assert not isinstance(info.value, SystemExit)  # raised as the task's own type, it would end the driver


class Parent:
    def make_children(self, detached_name):
        self.child = Log.remote()
        self.detached = Log.options(name=detached_name, lifetime="detached").remote()
        return self.child, self.detached, os.getpid()


def test_an_actors_children_die_with_it_unless_detached(actors, tmp_path):
    parent = actors(muster.remote(Parent).remote())
    child, detached, pid = muster.get(parent.make_children.remote(f"kept-{tmp_path.name}"), timeout=TIMEOUT)
    try:
        assert muster.get([child.pid.remote(), detached.pid.remote()], timeout=TIMEOUT)
        os.kill(pid, signal.SIGKILL)  # the owner dies: Ray's actor fate-sharing
        with pytest.raises(ActorDiedError, match="the actor Parent that created it ended"):
            wait_for(lambda: muster.get(child.pid.remote(), timeout=TIMEOUT) and False, timeout=TIMEOUT)
        assert muster.get(detached.pid.remote(), timeout=TIMEOUT)  # lifetime="detached" outlives it
    finally:
        muster.kill(detached)


def _first_answer(make_ref, timeout=TIMEOUT):
    """Call until the actor answers (calls made while it restarts fail with ActorUnavailableError)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return muster.get(make_ref(), timeout=timeout)
        except ActorDiedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_actor_with_max_restarts_is_restarted_with_fresh_state(actors):
    c = actors(Counter.options(max_restarts=1).remote())
    c.incr.remote(5)
    assert muster.get(c.get.remote(), timeout=TIMEOUT) == 5
    first_pid = muster.get(c.pid.remote(), timeout=TIMEOUT)

    os.kill(first_pid, signal.SIGKILL)
    second_pid = _first_answer(lambda: c.pid.remote())
    assert second_pid != first_pid
    assert muster.get(c.get.remote(), timeout=TIMEOUT) == 0  # __init__ ran again
    c.incr.remote(2)
    assert muster.get(c.get.remote(), timeout=TIMEOUT) == 2

    # Its one restart is spent: the next death is final.
    os.kill(second_pid, signal.SIGKILL)
    assert wait_for(lambda: _raises_actor_died(c), TIMEOUT)
    time.sleep(0.3)  # a restart (wrongly) in progress would answer by now
    assert _raises_actor_died(c)


def _raises_actor_died(handle) -> bool:
    try:
        muster.get(handle.pid.remote(), timeout=TIMEOUT)
    except ActorDiedError:
        return True
    return False


def test_actor_without_restarts_is_not_restarted(actors):
    c = actors(Counter.remote())
    pid = muster.get(c.pid.remote(), timeout=TIMEOUT)
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: _raises_actor_died(c), TIMEOUT)
    time.sleep(0.3)
    assert _raises_actor_died(c)


def test_kill_frees_the_actors_resources():
    before = muster.available_resources()["CPU"]
    log = Log.options(num_cpus=2).remote()
    try:
        muster.get(log.pid.remote(), timeout=TIMEOUT)
        assert muster.available_resources()["CPU"] == before - 2
    finally:
        muster.kill(log)
    assert wait_for(lambda: muster.available_resources()["CPU"] == before, 5)


def test_kill_rejects_what_is_not_an_actor():
    with pytest.raises(TypeError, match="actor handle"):
        muster.kill(Counter)


@muster.remote
class _FailsToStart:
    def __init__(self):
        raise ValueError("no config")

    def ping(self):
        return 1


def test_an_actor_whose_constructor_raised_is_dead_naming_why():
    """As Ray's RayActorError: its calls raise ActorDiedError, naming the constructor's exception."""
    actor = _FailsToStart.remote()
    with pytest.raises(ActorDiedError, match=r"constructor raised ValueError: no config") as info:
        muster.get(actor.ping.remote(), timeout=TIMEOUT)
    assert "_FailsToStart" in str(info.value) and "Traceback" in str(info.value)
    with pytest.raises(ActorDiedError):  # and stays so
        muster.get(actor.ping.remote(), timeout=TIMEOUT)


@muster.remote
class _Streams:
    def count(self, n):
        yield from range(n)

    async def tens(self, n):
        for i in range(n):
            yield i * 10


@muster.remote
class _SyncStreams:
    def count(self, n):
        yield from range(n)


def test_generator_methods_stream_their_items_as_generator_tasks_do(actors):
    """Ray's generator guide: generator methods of plain, threaded and async actors. Before, the
    call returned one ref to an unpicklable generator, and num_returns="streaming" raised."""
    plain, threaded = actors(_SyncStreams.remote()), actors(_SyncStreams.options(max_concurrency=2).remote())
    asynchronous = actors(_Streams.remote())
    for actor in (plain, threaded, asynchronous):
        assert [muster.get(r, timeout=TIMEOUT) for r in actor.count.remote(3)] == [0, 1, 2]
    assert [muster.get(r, timeout=TIMEOUT) for r in asynchronous.tens.remote(2)] == [0, 10]
    streamed = plain.count.options(num_returns="streaming").remote(2)
    assert [muster.get(r, timeout=TIMEOUT) for r in streamed] == [0, 1]
    dynamic = muster.get(plain.count.options(num_returns="dynamic").remote(2), timeout=TIMEOUT)
    assert [muster.get(r, timeout=TIMEOUT) for r in dynamic] == [0, 1]


class _Broke(Exception):
    pass


@muster.remote
def _two_then_raise(fail_at=2):
    for i in range(fail_at):
        yield i
    raise _Broke(f"broke after {fail_at}")


@muster.remote
class _BrokenStreams:
    def count(self, n):
        yield from range(n)
        raise _Broke("plain")

    async def tens(self, n):
        for i in range(n):
            yield i * 10
        raise _Broke("async")


def _drain(gen):
    """Each item's value, or the exception its get raised."""
    out = []
    for ref in gen:
        try:
            out.append(muster.get(ref, timeout=TIMEOUT))
        except _Broke as exc:
            out.append(exc)
    return out


@muster.remote
def _drain_in_a_task(gen_or_actor):
    gen = _two_then_raise.remote() if gen_or_actor is None else gen_or_actor.count.remote(1)
    return [v if not isinstance(v, Exception) else str(v).splitlines()[0] for v in _drain(gen)]


def test_items_a_generator_yielded_before_it_raised_are_kept_then_its_error(actors):
    """Ray's generator guide: on a failure, next() returns a ref whose get raises; the items before it
    stay readable. Before, the first next() raised and every item was lost."""
    values = _drain(_two_then_raise.remote())
    assert values[:2] == [0, 1] and len(values) == 3
    assert isinstance(values[2], _Broke) and "broke after 2" in str(values[2])
    first = _drain(_two_then_raise.remote(0))  # raised before any item: one ref that raises
    assert len(first) == 1 and isinstance(first[0], _Broke)
    inner = muster.get(_two_then_raise.options(num_returns="dynamic").remote(), timeout=TIMEOUT)
    assert _drain(inner)[:2] == [0, 1]
    streams = actors(_BrokenStreams.remote())
    plain, tens = _drain(streams.count.remote(2)), _drain(streams.tens.remote(2))
    assert plain[:2] == [0, 1] and isinstance(plain[2], _Broke) and "plain" in str(plain[2])
    assert tens[:2] == [0, 10] and isinstance(tens[2], _Broke) and "async" in str(tens[2])
    # from inside a worker, for a generator task and an actor's generator method alike
    drained = muster.get(_drain_in_a_task.remote(None), timeout=TIMEOUT)
    assert drained == [0, 1, "test_remote_actors._Broke: broke after 2"]
    assert muster.get(_drain_in_a_task.remote(streams), timeout=TIMEOUT) == [0, "test_remote_actors._Broke: plain"]


@muster.remote
def _seven():
    return 7


@muster.remote
class _AsyncGetter:
    """An async actor whose method calls the blocking ``get`` (Ray warns, once per process)."""

    async def blocking_get(self):
        import warnings

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = muster.get(_seven.remote())
            again = muster.get(_seven.remote())  # once: the second says nothing
        return value + again, [str(w.message) for w in caught]

    async def awaited(self):
        return await _seven.remote()


def test_a_blocking_get_in_an_async_actor_warns_once_naming_await():
    actor = _AsyncGetter.remote()
    try:
        value, messages = muster.get(actor.blocking_get.remote(), timeout=TIMEOUT)
        assert value == 14
        assert len(messages) == 1 and "blocks its event loop" in messages[0] and "await ref" in messages[0]
        assert muster.get(actor.awaited.remote(), timeout=TIMEOUT) == 7
    finally:
        muster.kill(actor)
