"""Ray Core APIs beyond remote/get/put/wait: cancel, exception names, async and threaded actors,
runtime context, num_returns and generators, named actors.  Real worker processes."""

from __future__ import annotations

import asyncio
import importlib
import os
import signal
import subprocess
import sys
import time

import pytest
from _task_helpers import TIMEOUT, wait_for, wait_for_file

import muster
from muster import exceptions
from muster.exceptions import TaskCancelledError


# -- cancel ---------------------------------------------------------------------------------------
@muster.remote(max_retries=3)
def sleepy(path):
    with open(path + ".part", "w") as f:  # whole or absent: the driver reads it as soon as it exists
        f.write(str(os.getpid()))
    os.replace(path + ".part", path)
    time.sleep(60)
    return "finished"


@muster.remote
def gate(path):
    deadline = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)
    return 1


@muster.remote
def after(x):
    return x + 1


@pytest.mark.parametrize("force", [False, True])
def test_cancel_a_running_task(tmp_path, force):
    marker = str(tmp_path / "started")
    ref = sleepy.remote(marker)
    pid = int(wait_for_file(marker))
    t0 = time.monotonic()
    assert muster.cancel(ref, force=force) is None
    with pytest.raises(TaskCancelledError):
        muster.get(ref, timeout=TIMEOUT)
    assert time.monotonic() - t0 < TIMEOUT
    if force:  # the process was killed; the task is not retried
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"worker {pid} still alive after cancel(force=True)")
    time.sleep(0.3)
    assert not os.path.exists(marker + ".again")
    assert muster.get(after.remote(1), timeout=TIMEOUT) == 2  # the engine still runs tasks


def test_cancel_a_task_waiting_on_its_argument_never_runs_it(tmp_path):
    opened = str(tmp_path / "open")
    dep = gate.remote(opened)
    ref = after.remote(dep)
    assert muster.cancel(ref) is None
    open(opened, "w").close()
    assert muster.get(dep, timeout=TIMEOUT) == 1
    with pytest.raises(exceptions.TaskCancelledError):
        muster.get(ref, timeout=TIMEOUT)
    assert muster.cancel(dep) is None  # already finished: left as it is; Ray's cancel returns None too
    assert muster.get(dep, timeout=TIMEOUT) == 1


def test_ray_exception_names_are_muster_classes(tmp_path):
    from muster.exceptions import (
        ActorDiedError,
        GetTimeoutError,
        RayActorError,
        RayError,
        RayTaskError,
        TaskUnschedulableError,
        WorkerCrashedError,
    )

    assert issubclass(RayTaskError, RayError) and issubclass(RayActorError, RayError)
    assert RayActorError is ActorDiedError and issubclass(ActorDiedError, WorkerCrashedError)
    # as Ray's: a RayActorError, so `except RayActorError` catches a call the restarting actor died under
    assert issubclass(exceptions.ActorUnavailableError, RayActorError)
    for name in ("ObjectLostError", "OwnerDiedError", "OutOfMemoryError", "ObjectStoreFullError", "NodeDiedError",
                 "TaskCancelledError", "RaySystemError", "ActorUnschedulableError", "RuntimeEnvSetupError"):
        assert issubclass(getattr(exceptions, name), RayError), name

    @muster.remote
    def boom():
        raise ValueError("bad input 7")

    with pytest.raises(RayTaskError, match="bad input 7") as info:
        muster.get(boom.remote(), timeout=TIMEOUT)
    assert isinstance(info.value, ValueError)
    slow = sleepy.remote(str(tmp_path / "started"))
    with pytest.raises(GetTimeoutError):
        muster.get(slow, timeout=0.1)
    muster.cancel(slow, force=True)
    assert issubclass(TaskUnschedulableError, exceptions.ResourcesUnavailableError)


# -- async and threaded actors --------------------------------------------------------------------
@muster.remote
class AsyncWaiter:
    def __init__(self):
        self.event = asyncio.Event()
        self.arrived = 0

    async def wait_all(self, n):
        self.arrived += 1
        if self.arrived == n:
            self.event.set()
        await asyncio.wait_for(self.event.wait(), 30)  # only returns if n calls overlap
        return self.arrived

    async def forever(self):
        await asyncio.sleep(60)

    def plain(self):
        return "plain"


@muster.remote(max_concurrency=3)
class Threaded:
    def __init__(self):
        import threading

        self.barrier = threading.Barrier(3, timeout=30)

    def meet(self):
        return self.barrier.wait()  # needs three calls running at once


def test_async_actor_runs_calls_concurrently_and_cancels_one():
    a = AsyncWaiter.remote()
    try:
        assert sorted(muster.get([a.wait_all.remote(4) for _ in range(4)], timeout=TIMEOUT)) == [4, 4, 4, 4]
        assert muster.get(a.plain.remote(), timeout=TIMEOUT) == "plain"
        stuck = a.forever.remote()
        time.sleep(0.2)
        assert muster.cancel(stuck) is None
        with pytest.raises(TaskCancelledError) as cancelled:
            muster.get(stuck, timeout=TIMEOUT)
        assert isinstance(cancelled.value, exceptions.TaskError)  # Ray's RayTaskError(TaskCancelledError)
        with pytest.raises(ValueError, match="force=True"):
            muster.cancel(a.forever.remote(), force=True)
    finally:
        muster.kill(a)


def test_threaded_actor_overlaps_up_to_max_concurrency():
    t = Threaded.remote()
    try:
        assert sorted(muster.get([t.meet.remote() for _ in range(3)], timeout=TIMEOUT)) == [0, 1, 2]
    finally:
        muster.kill(t)


class Looper:
    """Ray's concurrency-groups sample, threaded: a control method stops a running loop."""

    def __init__(self):
        self.stopped = False

    @muster.method(concurrency_group="work")
    def loop(self):
        deadline = time.monotonic() + 20
        while not self.stopped and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.stopped

    @muster.method(concurrency_group="control")
    def stop(self):
        self.stopped = True


def test_concurrency_groups_let_a_control_method_run_beside_a_busy_one():
    looper = muster.remote(concurrency_groups={"control": 1, "work": 1})(Looper).remote()
    try:
        running = looper.loop.remote()
        muster.get(looper.stop.remote(), timeout=TIMEOUT)  # waited for the loop before: the loop ran to its end
        assert muster.get(running, timeout=TIMEOUT) is True
    finally:
        muster.kill(looper)


@muster.remote
async def async_task(x):
    await asyncio.sleep(0.01)
    return x * 3


def test_async_task():
    assert muster.get(async_task.remote(5), timeout=TIMEOUT) == 15


# -- runtime context -------------------------------------------------------------------------------
@muster.remote(num_cpus=2)
def who():
    ctx = muster.get_runtime_context()
    return ctx.get_job_id(), ctx.get_task_id(), ctx.get_actor_id(), ctx.get_node_id(), ctx.get_assigned_resources()


@muster.remote
class Who:
    def __init__(self):
        self.created_by = muster.get_runtime_context().get_task_id()

    def ids(self):
        ctx = muster.get_runtime_context()
        return ctx.get_actor_id(), ctx.get_task_id(), ctx.get_assigned_resources(), self.created_by


@muster.remote
class AsyncWho:
    async def task_id(self, delay):
        import asyncio

        before = muster.get_runtime_context().get_task_id()
        await asyncio.sleep(delay)  # the other call starts meanwhile
        return before, muster.get_runtime_context().get_task_id()


def test_runtime_context_in_driver_task_and_actor():
    driver = muster.get_runtime_context()
    assert driver.get_task_id() is None and driver.get_actor_id() is None
    job, task, actor, node, res = muster.get(who.remote(), timeout=TIMEOUT)
    _, task2, _, _, _ = muster.get(who.remote(), timeout=TIMEOUT)
    assert job == driver.get_job_id() and node == driver.get_node_id()
    assert task and task2 and task != task2 and actor is None
    assert res == {"CPU": 2.0}
    w = Who.options(num_cpus=1).remote()
    try:
        actor_id, task_id, res, created_by = muster.get(w.ids.remote(), timeout=TIMEOUT)
        again = muster.get(w.ids.remote(), timeout=TIMEOUT)[1]
        assert res == {"CPU": 1.0}
        int(actor_id, 16)  # hex, as Ray's ids are
        assert actor_id.startswith(job) and len(actor_id) > len(job)
        # each actor call (and the constructor) runs as a task with an id of its own, as in Ray
        assert len({task_id, again, created_by, task, task2}) == 5 and None not in {task_id, created_by}
    finally:
        muster.kill(w)
    a = AsyncWho.remote()
    try:
        first, second = muster.get([a.task_id.remote(0.3), a.task_id.remote(0)], timeout=TIMEOUT)
        assert first[0] == first[1] and second[0] == second[1] and first[0] != second[0]  # one per coroutine
    finally:
        muster.kill(a)


# -- num_returns and generators --------------------------------------------------------------------
@muster.remote(num_returns=3)
def three():
    return 1, "two", [3]


@muster.remote
def count_to(n):
    for i in range(n):
        yield i * 10


@muster.remote(num_returns="dynamic")
def dynamic(n):
    yield from range(n)


@muster.remote
class Pair:
    @muster.method(num_returns=2)
    def both(self):
        return "a", "b"

    def one(self):
        return ("x", "y")

    def letters(self):
        yield "p"
        yield "q"


def test_num_returns_generators_and_methods():
    refs = three.remote()
    assert len(refs) == 3 and muster.get(refs, timeout=TIMEOUT) == [1, "two", [3]]
    gen = count_to.remote(4)
    assert isinstance(gen, muster.ObjectRefGenerator)
    assert [muster.get(r, timeout=TIMEOUT) for r in gen] == [0, 10, 20, 30]
    assert gen.is_finished() and not gen.next_ready()
    lettered = Pair.remote()
    together = lettered.letters.remote()  # an actor's generator: its items come together, at its end
    assert wait_for(together.next_ready, TIMEOUT) and not together.is_finished()
    assert [muster.get(r, timeout=TIMEOUT) for r in together] == ["p", "q"] and together.is_finished()
    muster.kill(lettered)
    inner = muster.get(dynamic.remote(3), timeout=TIMEOUT)
    assert [muster.get(r, timeout=TIMEOUT) for r in inner] == [0, 1, 2]
    assert isinstance(inner, muster.DynamicObjectRefGenerator)  # Ray's older name

    async def consume():  # Ray's asyncio form: async for over the generator, await each ref
        return [await ref async for ref in count_to.remote(3)]

    assert asyncio.run(consume()) == [0, 10, 20]
    with pytest.raises(ValueError, match="num_returns=2"):
        muster.get(three.options(num_returns=2).remote()[0], timeout=TIMEOUT)
    p = Pair.remote()
    try:
        a, b = p.both.remote()
        assert muster.get([a, b], timeout=TIMEOUT) == ["a", "b"]
        x, y = p.one.options(num_returns=2).remote()
        assert muster.get(y, timeout=TIMEOUT) == "y"
    finally:
        muster.kill(p)


@muster.remote
def yields_two_then_raises():
    yield 0
    yield 1
    raise KeyError("no third")


def test_a_generator_with_num_returns_keeps_the_values_it_yielded_before_raising():
    refs = yields_two_then_raises.options(num_returns=4).remote()
    assert muster.get(refs[:2], timeout=TIMEOUT) == [0, 1]  # as in Ray: only the refs past them raise
    for ref in refs[2:]:
        with pytest.raises(KeyError, match="no third"):
            muster.get(ref, timeout=TIMEOUT)
    assert muster.get(yields_two_then_raises.options(num_returns=2).remote(), timeout=TIMEOUT) == [0, 1]


@muster.remote(max_retries=0)
def gated_stream(gate, die_after=None):
    yield "first"
    deadline = time.monotonic() + 60
    while not os.path.exists(gate) and time.monotonic() < deadline:  # held until the caller has the first
        time.sleep(0.01)
    yield "second"
    if die_after is not None:
        os.kill(os.getpid(), signal.SIGKILL)
    yield "third"


@muster.remote
def endless():
    i = 0
    while True:
        yield i
        i += 1
        time.sleep(0.005)


def test_a_streaming_generator_hands_out_each_item_as_it_is_yielded(tmp_path):
    gate = str(tmp_path / "gate")
    gen = gated_stream.remote(gate)
    # the first item comes while the task is still running (it waits for this test's gate)
    assert muster.get(next(gen), timeout=TIMEOUT) == "first" and not gen.completed().future().done()
    assert not gen.next_ready() and not gen.is_finished()  # Ray's: the next item is not here yet
    with pytest.raises(NotImplementedError, match="muster.cancel"):
        gen.close()  # not supported, as in Ray
    open(gate, "w").close()
    assert wait_for(gen.next_ready, TIMEOUT)  # a bool, as Ray's (it was a ref, always truthy)
    assert [muster.get(r, timeout=TIMEOUT) for r in gen] == ["second", "third"]
    assert gen.is_finished() and not gen.next_ready()
    # an endless generator can be consumed as far as wanted
    stream = endless.remote()
    assert [muster.get(next(stream), timeout=TIMEOUT) for _ in range(5)] == [0, 1, 2, 3, 4]
    muster.cancel(stream.completed(), force=True)
    # a worker that dies mid-stream loses nothing it had yielded: then one ref that raises the crash
    dying = gated_stream.remote(gate, die_after=1)
    got = []
    for ref in dying:
        try:
            got.append(muster.get(ref, timeout=TIMEOUT))
        except exceptions.WorkerCrashedError:
            got.append("crashed")
    assert got == ["first", "second", "crashed"]


# -- named actors ----------------------------------------------------------------------------------
@muster.remote
class Box:
    def __init__(self, v):
        self.v = v

    def get(self):
        return self.v


@muster.remote
def read_box(name):
    return muster.get(muster.get_actor(name).get.remote())


def test_named_actors_get_if_exists_namespaces_and_lookup_from_a_task():
    from muster.util import list_named_actors

    b = Box.options(name="box", lifetime="detached").remote(1)
    try:
        again = Box.options(name="box", get_if_exists=True).remote(2)
        assert muster.get(again.get.remote(), timeout=TIMEOUT) == 1  # the existing one
        same = Box.options(name="box").get_or_create(5)  # Ray's newer spelling (an AttributeError before)
        assert muster.get(same.get.remote(), timeout=TIMEOUT) == 1
        with pytest.raises(exceptions.InvalidArgumentError, match=r"options\(name='...'\).get_or_create"):
            Box.get_or_create(6)
        with pytest.raises(exceptions.ActorAlreadyExistsError, match="already exists"):  # a ValueError too
            Box.options(name="box").remote(3)
        other = Box.options(name="box", namespace="elsewhere").remote(4)
        assert muster.get(muster.get_actor("box", namespace="elsewhere").get.remote(), timeout=TIMEOUT) == 4
        assert "box" in list_named_actors()
        assert {"name": "box", "namespace": "elsewhere"} in list_named_actors(all_namespaces=True)
        assert muster.get(read_box.remote("box"), timeout=TIMEOUT) == 1
        muster.kill(other)
        with pytest.raises(ValueError, match="Failed to look up actor 'box'"):
            muster.get_actor("box", namespace="elsewhere")
    finally:
        muster.kill(b)
    with pytest.raises(ValueError, match="no live actor"):
        muster.get_actor("box")


def test_ray_core_odds_and_ends():
    ref = muster.put(1)
    assert len(ref.hex()) == 56 and int(ref.hex(), 16) and ref.hex() != muster.put(2).hex()
    assert muster.wait([]) == ([], [])  # as Ray: nothing to wait for
    from muster.actor import ActorHandle  # Ray's type-hint import (the Monte Carlo walkthrough's)

    box = Box.remote(1)
    try:
        assert isinstance(box, ActorHandle)
    finally:
        muster.kill(box)
    with pytest.raises(exceptions.UnsupportedRayImportError, match=r"muster.util.iter .*muster.data"):
        importlib.import_module("muster.util.iter")  # Ray's ParallelIterator (its docstrings): a bare error before
    with pytest.raises(exceptions.UnsupportedRayImportError, match=r"muster.util.state.list_objects .*available"):
        from muster.util.state import list_objects  # noqa: F401
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("muster.no_such_module")  # an unknown name is still Python's own error


# -- what Ray's docstrings show (a sweep of them found each of these failing or different) ---------
@muster.remote
def _fails_fast():
    raise ValueError("bad")


@muster.remote
def _slow_one(release):
    """Done once ``release`` exists (a fixed sleep raced the bounds below: a worker slow to start ate it)."""
    deadline = time.monotonic() + 60
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.02)
    return 1


@muster.remote
def _gets_both(release):
    t0 = time.monotonic()
    slow = _slow_one.remote(release)
    try:
        muster.get([slow, _fails_fast.remote()])
    except ValueError:
        return time.monotonic() - t0, [slow]  # in a list: the caller waits for it (a ref as a result is its value)
    return None


@muster.remote
def _ticks(n, every, release):
    """Its first item at once, the rest only once ``release`` exists (never, in the test below): a wait that
    waited for the whole stream never returns. (A 5 s stream raced a 3 s bound on the wait, which a worker
    slow to start on a loaded CI machine ate.)"""
    yield 0
    deadline = time.monotonic() + 60
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.02)
    for i in range(1, n):
        time.sleep(every)
        yield i


@muster.remote
def _named_task():
    ctx = muster.get_runtime_context()
    return ctx.get_task_name(), ctx.get_task_function_name()


@muster.remote(max_restarts=3)
class _Leaves:
    def __init__(self, marker):
        import atexit

        self.marker = marker
        atexit.register(lambda: open(marker, "w").close())

    @muster.method  # bare, as Ray allows
    def names(self):
        ctx = muster.get_runtime_context()
        return ctx.get_task_name(), ctx.get_task_function_name()

    def leave(self):
        from muster.actor import exit_actor

        exit_actor()


@muster.remote
def _uses_builtins(actor) -> tuple:
    """Ray's built-in methods through a handle passed to a task (refused as unknown methods there before)."""
    ready = muster.get(actor.__ray_ready__.remote(), timeout=TIMEOUT)
    called = muster.get(actor.__ray_call__.remote(lambda obj: obj.marker), timeout=TIMEOUT)
    try:
        muster.get(actor.__ray_terminate__.remote(), timeout=TIMEOUT)
    except exceptions.ActorDiedError as e:
        return ready, called, str(e)
    return ready, called, "still alive"


def test_ray_builtin_actor_methods_work_through_a_handle_inside_a_task(tmp_path):
    marker = str(tmp_path / "m")
    ready, called, ended = muster.get(_uses_builtins.remote(_Leaves.remote(marker)), timeout=TIMEOUT)
    assert ready is True and called == marker and "exited on purpose" in ended


def test_get_raises_the_first_error_at_once_and_wait_sees_a_generators_next_item(tmp_path):
    t0 = time.monotonic()
    release = str(tmp_path / "release")
    slow = _slow_one.remote(release)
    with pytest.raises(ValueError, match="bad"):
        muster.get([slow, _fails_fast.remote()])  # it waited for the slow task first
    assert time.monotonic() - t0 < 30  # the slow one is held until released below
    took, (nested,) = muster.get(_gets_both.remote(release), timeout=TIMEOUT)
    assert took < 30  # the same in a worker
    open(release, "w").close()
    assert muster.get([slow, nested], timeout=TIMEOUT) == [1, 1]  # they ran on: done before the test ends
    gen = _ticks.remote(20, 0.25, str(tmp_path / "never"))
    t0 = time.monotonic()
    ready, _ = muster.wait([gen], timeout=TIMEOUT)  # it waited for the whole stream (here: for ever)
    assert ready == [gen] and time.monotonic() - t0 < TIMEOUT
    assert muster.get(next(gen)) == 0
    assert muster.cancel(gen) is None  # a generator is cancelled through its task (refused before)
    with pytest.raises(TaskCancelledError):
        for ref in gen:
            muster.get(ref, timeout=TIMEOUT)


def test_exit_actor_task_names_placement_group_table_and_init_as_a_context(tmp_path):
    from muster.actor import exit_actor
    from muster.util import get_placement_group, placement_group, placement_group_table

    assert muster.get(_named_task.remote(), timeout=TIMEOUT) == ("_named_task", f"{__name__}._named_task")
    marker = str(tmp_path / "atexit")
    a = _Leaves.remote(marker)
    assert muster.get(a.names.remote(), timeout=TIMEOUT) == ("_Leaves.names", f"{__name__}._Leaves.names")
    with pytest.raises(exceptions.ActorDiedError, match=r"exited on purpose \(muster.actor.exit_actor\(\)"):
        muster.get(a.leave.remote(), timeout=TIMEOUT)
    with pytest.raises(exceptions.ActorDiedError, match="exited on purpose"):  # not restarted, despite max_restarts
        muster.get(a.names.remote(), timeout=TIMEOUT)
    assert os.path.exists(marker)  # its own atexit handlers ran
    b = _Leaves.remote(str(tmp_path / "b"))  # Ray's built-in methods of every actor
    assert muster.get(b.__ray_ready__.remote(), timeout=TIMEOUT) is True
    assert muster.get(b.__ray_call__.remote(lambda obj, suffix: obj.marker + suffix, "!"), timeout=TIMEOUT) \
        == str(tmp_path / "b") + "!"
    with pytest.raises(exceptions.ActorDiedError, match="exited on purpose"):
        muster.get(b.__ray_terminate__.remote(), timeout=TIMEOUT)
    with pytest.raises(TypeError, match="no actor runs"):
        exit_actor()
    assert muster.get_runtime_context().get_task_name() is None
    pg = placement_group([{"CPU": 1}], name="pg-table")
    assert pickle_round_trip(pg) == pg and len({pg, pickle_round_trip(pg)}) == 1
    assert placement_group_table(pg)["state"] == "CREATED" and pg.id in placement_group_table()
    assert get_placement_group("pg-table") == pg
    muster.util.remove_placement_group(pg)
    with pytest.raises(ValueError, match="no live placement group"):
        get_placement_group("pg-table")
    rt = muster.init(ignore_reinit_error=True)
    assert rt.address_info["address"] == "local" and rt.dashboard_url is None
    # the rest of Ray's RayContext (the gentle_walkthrough notebook shows ray.init()'s repr)
    import platform

    assert rt.python_version == platform.python_version() and rt.ray_version == muster.__version__
    with pytest.warns(DeprecationWarning, match="address_info"):
        assert rt["node_ip_address"] == rt.address_info["node_ip_address"]
    assert repr(rt).startswith("LocalRuntime(engine='local', address='local', python_version=")


def pickle_round_trip(obj):
    import pickle

    return pickle.loads(pickle.dumps(obj))


# -- Ray's smaller names ---------------------------------------------------------------------------
@muster.remote
def env_and_group(name: str):
    context = muster.get_runtime_context()
    return os.environ.get(name), context.get_placement_group_id(), context.should_capture_child_tasks_in_placement_group


def test_runtime_env_cloudpickle_and_deprecated_context_ids_as_rays():
    from muster import cloudpickle
    from muster.runtime_env import RuntimeEnv
    from muster.util.placement_group import placement_group, remove_placement_group
    from muster.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    env = RuntimeEnv(env_vars={"MUSTER_BREADTH": "typed"}, pip=["nothing-installed"])
    assert env == {"env_vars": {"MUSTER_BREADTH": "typed"}, "pip": ["nothing-installed"]}
    with pytest.warns(UserWarning, match="runtime_env pip has no effect"):
        ref = env_and_group.options(runtime_env=env).remote("MUSTER_BREADTH")
    assert muster.get(ref, timeout=TIMEOUT) == ("typed", None, False)
    with pytest.raises(TypeError, match="env_vars maps names to string values"):
        RuntimeEnv(env_vars={"N": 4})
    group = placement_group([{"CPU": 1}])
    try:
        muster.get(group.ready(), timeout=TIMEOUT)
        strategy = PlacementGroupSchedulingStrategy(group, placement_group_capture_child_tasks=True)
        ref = env_and_group.options(scheduling_strategy=strategy).remote("NOT_SET")
        assert muster.get(ref, timeout=TIMEOUT) == (None, group.id, True)
    finally:
        remove_placement_group(group)

    square = cloudpickle.loads(cloudpickle.dumps(lambda x: x * x))  # plain pickle refuses a lambda
    assert square(7) == 49
    with pytest.warns(UserWarning, match="enable_task_events=False has no effect"):
        @muster.remote
        class Quiet:
            @muster.method(enable_task_events=False)  # Ray's switch for its task-event log: every task is listed
            def ping(self):
                return "pong"

    q = Quiet.remote()
    assert muster.get(q.ping.remote(), timeout=TIMEOUT) == "pong"
    muster.kill(q)
    context = muster.get_runtime_context()
    with pytest.warns(DeprecationWarning, match="use get_node_id"):
        assert context.node_id.hex() == context.get_node_id()
    with pytest.warns(DeprecationWarning, match="use get_job_id"):
        assert context.job_id.hex() == context.get_job_id()


@muster.remote
class AsyncInit:
    async def __init__(self, x):  # awaited on the actor's loop, as in Ray
        await asyncio.sleep(0)
        self.x, self.loop = x, asyncio.get_running_loop()

    async def state(self):
        return self.x, self.loop is asyncio.get_running_loop()


@muster.remote
class LoopInInit:
    def __init__(self):  # an async actor's constructor runs on its loop: it may start background tasks there
        self.ticks = 0
        self.ticker = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self):
        while True:
            self.ticks += 1
            await asyncio.sleep(0.01)

    async def ticked(self):
        await asyncio.sleep(0.1)
        return self.ticks


def test_an_async_actors_constructor_runs_on_its_loop_and_may_be_async():
    """Before, ``async def __init__`` failed (__init__() should return None, not 'coroutine') and
    ``asyncio.get_running_loop()`` in a constructor raised: there was no loop yet."""
    a, b = AsyncInit.remote(5), LoopInInit.remote()
    try:
        assert muster.get(a.state.remote(), timeout=TIMEOUT) == (5, True)
        assert muster.get(b.ticked.remote(), timeout=TIMEOUT) > 1
    finally:
        muster.kill(a)
        muster.kill(b)


# -- Ray's private modules that its docs import, and ray.util.accelerators ---------------------------
def test_rays_raylet_names_accelerator_types_and_private_internals_as_ported_scripts_use_them():
    from muster._raylet import ObjectRef, ObjectRefGenerator  # Ray's streaming-generator guide imports these
    from muster.util.accelerators import NVIDIA_TESLA_V100

    assert ObjectRef is muster.ObjectRef and ObjectRefGenerator is muster.ObjectRefGenerator
    gen = count_to.options(num_returns="streaming").remote(2)
    assert isinstance(gen, ObjectRefGenerator) and [muster.get(r, timeout=TIMEOUT) for r in gen] == [0, 10]
    assert muster.get(after.options(accelerator_type=NVIDIA_TESLA_V100).remote(1), timeout=TIMEOUT) == 2
    assert muster.util.accelerators.NVIDIA_H100 == "H100"
    with pytest.raises(AttributeError, match="as a string"):
        muster.util.accelerators.NOT_A_CARD
    with pytest.raises(exceptions.UnsupportedRayImportError, match="internal_api.free, drop the ObjectRef"):
        importlib.import_module("muster._private.internal_api")
    with pytest.raises(exceptions.UnsupportedRayAPIError, match="memory_summary, muster.available_resources"):
        muster._private.internal_api.free


def test_rays_runtime_context_and_shard_extras_name_their_equivalent():
    """They were plain AttributeErrors with no word of what to use (a training shard's to_tf among them)."""
    import muster.data as md

    ctx = muster.get_runtime_context()
    with pytest.raises(exceptions.UnsupportedRayAPIError, match="nearest equivalent: get_placement_group_id"):
        ctx.current_placement_group_id
    with pytest.raises(exceptions.UnsupportedRayAPIError, match="only runtime_env's env_vars"):
        ctx.get_runtime_env_string()
    with pytest.raises(AttributeError, match="no attribute 'not_a_field'"):
        ctx.not_a_field
    shard = md.range(2).iterator()
    with pytest.raises(exceptions.UnsupportedRayAPIError, match=r"DataIterator.iter_tf_batches .*iter_batches"):
        shard.iter_tf_batches()
    assert not hasattr(shard, "to_tf") and shard.materialize().count() == 2


def test_cluster_utils_cluster_is_rays_mini_cluster(tmp_path):
    """Ray's testing tips build a mini-cluster with ray.cluster_utils.Cluster; the port imports it from muster
    (tests/cluster's fixture does); without Ray the error names the extra to install."""
    pytest.importorskip("ray")
    import ray.cluster_utils

    from muster.cluster_utils import Cluster

    assert Cluster is ray.cluster_utils.Cluster
    script = "import sys; sys.modules['ray'] = None\nfrom muster.cluster_utils import Cluster\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and 'pip install "muster[ray]"' in proc.stderr, proc.stderr
