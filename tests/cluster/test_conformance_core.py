"""One behaviour, two engines: every test here runs on the embedded engine and on a Ray cluster.

Ray Core's side: tasks, objects, actors and errors must look the same to user
code whichever engine runs them, inside a training function too; and the
engine seam keeps its ordering contract.  Training and Tune are in
test_conformance_train.py, muster.data and Serve in test_conformance_data_serve.py
(each starts its own Ray cluster, a few seconds: sharing one across modules was not worth its code).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import torch
from _shared import check_in_fork

import muster
import muster.train as train
from muster.exceptions import (
    ActorDiedError,
    ActorUnavailableError,
    ResourcesUnavailableError,
    RuntimeNotStartedError,
    TaskError,
    WorkerCrashedError,
)
from muster.train import RunConfig, ScalingConfig
from muster.train.torch import TorchTrainer
from muster.util.scheduling_strategies import NodeAffinitySchedulingStrategy


# -- tasks and objects ------------------------------------------------------------
@muster.remote
def double(x):
    return 2 * x


@muster.remote
def fan_out(n):
    """A task that starts tasks and gets their results (served by the driver)."""
    return sum(muster.get([double.remote(i) for i in range(n)]))


@muster.remote
def total(values):
    return sum(values)


def test_tasks_return_values_in_order(engine):
    assert muster.get([double.remote(i) for i in range(6)]) == [0, 2, 4, 6, 8, 10]


def test_nested_tasks_do_not_deadlock(engine):
    assert muster.get(fan_out.remote(4)) == 12


def test_put_get_and_object_ref_arguments(engine):
    ref = muster.put(list(range(100)))
    assert muster.get(total.remote(ref)) == 4950
    assert muster.get(total.remote(muster.put([1, 2]))) == 3
    big = torch.arange(1 << 18, dtype=torch.float32)  # 1 MiB: out-of-band on the local engine
    assert torch.equal(muster.get(muster.put(big)), big)


def test_wait_returns_ready_refs_first(engine):
    @muster.remote
    def slow(s):
        time.sleep(s)
        return s

    fast_ref, slow_ref = slow.remote(0.0), slow.remote(3.0)
    ready, pending = muster.wait([slow_ref, fast_ref], num_returns=1, timeout=10)
    assert ready == [fast_ref] and pending == [slow_ref]
    assert muster.get(slow_ref) == 3.0


@muster.remote(max_calls=1)
def once_per_worker():
    return os.getpid()


def test_max_calls_gives_each_task_a_fresh_worker(engine):
    """As in Ray: a worker that ran max_calls tasks of the function exits (on Ray, Ray ends it)."""
    pids = [muster.get(once_per_worker.remote(), timeout=60) for _ in range(3)]  # one after another
    assert len(set(pids)) == 3, pids


def test_cluster_resources_are_plain_cpu_counts_and_ray_memory_bytes(engine):
    total_cpus = muster.cluster_resources()["CPU"]
    assert total_cpus >= 4 and set(muster.available_resources()) <= set(muster.cluster_resources())
    for view in (muster.cluster_resources(), muster.available_resources()):  # Ray's keys, in bytes
        assert view["memory"] > 1e8 and view["object_store_memory"] > 1e7, view
        assert isinstance(view["memory"], float) and isinstance(view["object_store_memory"], float)
    if engine == "ray":  # Ray's own figures, not muster's guess
        import ray

        ray_total = ray.cluster_resources()
        assert muster.cluster_resources()["memory"] == ray_total["memory"]
        assert muster.cluster_resources()["object_store_memory"] == ray_total["object_store_memory"]


@muster.remote
def where_am_i():
    return muster.get_runtime_context().get_node_id()


def test_node_ids_agree_between_the_driver_its_tasks_and_nodes(engine):
    listed = {n["NodeID"] for n in muster.nodes() if n.get("Alive")}
    assert muster.get_runtime_context().get_node_id() in listed
    assert set(muster.get([where_am_i.remote() for _ in range(4)])) <= listed
    if engine == "ray":  # Ray's own ids
        import ray

        assert listed == {n["NodeID"] for n in ray.nodes() if n.get("Alive")}


@muster.remote
class WhereAmI:
    def node(self):
        return muster.get_runtime_context().get_node_id()


def test_rays_node_resources_run_work_on_the_head_node(engine):
    """Ray gives each node one unit of ``node:<its IP>`` and the head ``node:__internal_head__``; Ray's users ask
    for a little of one to pick the node (muster refused them as resources no node has)."""
    total, ip = muster.cluster_resources(), muster.util.get_node_ip_address()
    assert total["node:__internal_head__"] == 1.0 and total[f"node:{ip}"] >= 1.0, total
    head = muster.get_runtime_context().get_node_id()  # the driver is on the head node
    on_head = where_am_i.options(resources={"node:__internal_head__": 0.01})
    assert set(muster.get([on_head.remote() for _ in range(4)], timeout=60)) == {head}
    actor = WhereAmI.options(resources={"node:__internal_head__": 0.01, f"node:{ip}": 0.01}).remote()
    assert muster.get(actor.node.remote(), timeout=60) == head
    muster.kill(actor)
    with pytest.warns(UserWarning), pytest.raises(ResourcesUnavailableError, match="node:10.255.0.9 names no node"):
        muster.get(double.options(resources={"node:10.255.0.9": 0.01}).remote(1), timeout=30)


def test_node_affinity_runs_work_on_the_named_node(engine):
    """Ray's NodeAffinitySchedulingStrategy: work runs on that node (on a cluster muster ignored it); with
    soft=False a node no one has fails at once, naming the live ones; with soft=True it runs elsewhere."""
    nodes = [n["NodeID"] for n in muster.nodes() if n.get("Alive")]
    here = muster.get_runtime_context().get_node_id()
    target = next((n for n in nodes if n != here), here)  # on Ray, a node other than the driver's
    pinned = where_am_i.options(scheduling_strategy=NodeAffinitySchedulingStrategy(target, soft=False))
    assert set(muster.get([pinned.remote() for _ in range(4)], timeout=60)) == {target}
    actor = WhereAmI.options(scheduling_strategy=NodeAffinitySchedulingStrategy(target, soft=False)).remote()
    assert muster.get(actor.node.remote(), timeout=60) == target
    muster.kill(actor)
    nowhere = "ab" * 28
    assert muster.get(where_am_i.options(scheduling_strategy=NodeAffinitySchedulingStrategy(nowhere, soft=True))
                      .remote(), timeout=60) in nodes
    with pytest.warns(UserWarning), pytest.raises(ResourcesUnavailableError, match=f"{nowhere}.*names no live"):
        muster.get(where_am_i.options(scheduling_strategy=NodeAffinitySchedulingStrategy(nowhere, soft=False))
                   .remote(), timeout=30)
    with pytest.raises(ResourcesUnavailableError, match=target):
        WhereAmI.options(scheduling_strategy=NodeAffinitySchedulingStrategy(nowhere, soft=False)).remote()


@muster.remote
def my_job():
    return muster.get_runtime_context().get_job_id()


@muster.remote
class JobOf:
    def job(self):
        here = muster.get_runtime_context()
        return here.get_job_id(), here.get_actor_id()


def test_the_driver_its_tasks_and_actors_share_one_job_id(engine):
    job = muster.get_runtime_context().get_job_id()
    actor = JobOf.remote()
    (task_job, (actor_job, actor_id)) = muster.get([my_job.remote(), actor.job.remote()])
    assert task_job == actor_job == job and actor_id.startswith(job)  # an actor's id begins with its job's
    muster.kill(actor)
    if engine == "ray":  # the id Ray gives the driver's job, which Ray's tools show
        import ray

        assert job == ray.get_runtime_context().get_job_id()


# -- errors -------------------------------------------------------------------------
@muster.remote
def fails(x):
    raise KeyError(f"no such key {x}")


@muster.remote
def dies():
    os.kill(os.getpid(), signal.SIGKILL)


def test_task_error_carries_the_remote_traceback(engine):
    with pytest.raises(TaskError) as info:
        muster.get(fails.remote("k"))
    err = info.value
    assert err.cause_type == "KeyError" and isinstance(err.cause, KeyError)
    assert "no such key k" in str(err) and "in fails" in err.remote_traceback
    assert err.function_name == "fails" and err.traceback_str == err.remote_traceback  # Ray's names


@muster.remote
def yields_then_fails(n):
    yield from range(n)
    raise KeyError("after the items")


@muster.remote
def yields_then_dies():
    yield "kept"
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_failing_generator_keeps_the_items_it_yielded(engine):
    """Items yielded before an error arrive, then one ref that raises; after a worker's death, the
    items that had arrived, then one ref that raises the crash (as in Ray: next() does not raise)."""
    refs = list(yields_then_fails.remote(2))
    assert len(refs) == 3 and muster.get(refs[:2]) == [0, 1]
    with pytest.raises(KeyError, match="after the items"):
        muster.get(refs[2])
    crashed = list(yields_then_dies.options(max_retries=0).remote())
    # the local engine streams each item on the worker's own link, so it is in before the death is;
    # Ray's events travel apart from the task's end, so there the item may come too late to count
    kept = muster.get(crashed[:-1])
    assert kept == ["kept"] if engine == "local" else kept in ([], ["kept"])
    with pytest.raises(WorkerCrashedError):
        muster.get(crashed[-1], timeout=60)


def test_a_killed_task_is_a_worker_crash(engine):
    with pytest.raises(WorkerCrashedError):
        muster.get(dies.options(max_retries=0).remote(), timeout=60)


@muster.remote
def forks_and_prints():
    """Fork a child (as a DataLoader's workers are) at the worst moment for log forwarding: while
    the worker's forwarder, where there is one, is in the middle of a batch (its lock held)."""
    import sys

    forwarder = getattr(sys.modules.get("muster.core.ray.worker"), "_forwarder", None)
    with forwarder._lock if forwarder is not None else threading.Lock():
        outcome = check_in_fork(lambda: print("printed by the forked child", flush=True) is None, timeout=20)
    print("printed by the task after its child ended")
    return outcome


def test_a_child_forked_by_a_task_prints_and_exits(engine):
    assert muster.get(forks_and_prints.remote(), timeout=90) == "passed"


def _put_says_why_it_cannot() -> bool:
    try:
        muster.put(1)
    except RuntimeNotStartedError as err:
        return "forked from a muster worker by user code" in str(err)
    return False


@muster.remote
def child_calls_muster():
    """A forked child that calls muster (as a DataLoader worker reading a shard would) is told why it
    cannot, instead of writing on its parent's connection and waiting for a reply that never comes."""
    return check_in_fork(_put_says_why_it_cannot, timeout=20), muster.get(muster.put("parent"))


def test_a_child_forked_by_a_task_gets_a_clear_error_from_muster_calls(engine):
    assert muster.get(child_calls_muster.remote(), timeout=90) == ("passed", "parent")


def test_impossible_request_fails_at_once(engine):
    t0 = time.monotonic()
    with pytest.raises(ResourcesUnavailableError, match="CPU"):
        muster.get(double.options(num_cpus=64).remote(1))
    assert time.monotonic() - t0 < 10


@muster.remote
def returns_a_lock():
    return threading.Lock()


def test_a_result_that_does_not_pickle_is_the_pickling_errors_class_naming_who_returned_it(engine):
    """As Ray's ``RayTaskError(TypeError)``: ``except TypeError`` catches it (it was a MusterError naming muster's
    internals, ``__task__`` or ``_muster_call``, not the function or method)."""
    with pytest.raises(TypeError, match="task returns_a_lock returned a value that cannot be sent back") as info:
        muster.get(returns_a_lock.remote(), timeout=60)
    assert isinstance(info.value, TaskError) and "_thread.lock" in str(info.value)
    actor = Counter.remote(0)
    with pytest.raises(TypeError, match="actor Counter's method make_lock returned a value"):
        muster.get(actor.make_lock.remote(), timeout=60)
    assert muster.get(actor.add.remote(2), timeout=60) == 2  # the actor is fine
    muster.kill(actor)


# -- actors -------------------------------------------------------------------------
@muster.remote
class Counter:
    def __init__(self, start):
        self.n = start

    def add(self, k):
        self.n += k
        return self.n

    def where(self):
        return os.getpid()

    def boom(self):
        raise ValueError("actor method failed")

    def make_lock(self):
        return threading.Lock()


def test_actor_calls_run_in_order_and_keep_state(engine):
    c = Counter.remote(10)
    assert muster.get([c.add.remote(i) for i in range(1, 5)]) == [11, 13, 16, 20]
    muster.kill(c)


def test_actor_error_leaves_the_actor_alive(engine):
    c = Counter.remote(0)
    with pytest.raises(TaskError, match="actor method failed"):
        muster.get(c.boom.remote())
    assert muster.get(c.add.remote(1)) == 1
    muster.kill(c)


@muster.remote(concurrency_groups={"one": 1, "two": 2})
class Grouped:
    """Counts its calls running at once, per concurrency group, and keeps the peak."""

    def __init__(self):
        self.lock, self.running, self.peak = threading.Lock(), {}, {}

    def _work(self, group):
        with self.lock:
            self.running[group] = self.running.get(group, 0) + 1
            self.peak[group] = max(self.peak.get(group, 0), self.running[group])
        time.sleep(0.3)
        with self.lock:
            self.running[group] -= 1

    @muster.method(concurrency_group="one")
    def one(self):
        self._work("one")

    @muster.method(concurrency_group="two")
    def two(self):
        self._work("two")

    def peaks(self):
        return self.peak


def test_concurrency_groups_keep_their_own_limits(engine):
    g = Grouped.remote()  # on Ray too, muster's actor host keeps the limits (not Ray's own groups)
    try:
        muster.get([g.one.remote() for _ in range(3)] + [g.two.remote() for _ in range(4)], timeout=60)
        assert muster.get(g.peaks.remote()) == {"one": 1, "two": 2}
    finally:
        muster.kill(g)


def test_actor_killed_from_outside_fails_its_calls(engine):
    c = Counter.remote(0)
    pid = muster.get(c.where.remote())
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(ActorDiedError):
        for _ in range(100):  # the death is noticed within moments
            muster.get(c.add.remote(1), timeout=30)
            time.sleep(0.05)
    muster.kill(c)


class Sleeper:
    """Says where it runs; ``nap`` marks that it started, then sleeps (a call to kill the actor under)."""

    def where(self):
        return os.getpid()

    def nap(self, started):
        open(started, "w").close()
        time.sleep(30)


class AsyncSleeper:
    async def where(self):
        return os.getpid()

    async def nap(self, started):
        import asyncio

        open(started, "w").close()
        await asyncio.sleep(30)


def _killed_under_a_call(actor, started):
    """SIGKILL the actor's process while its ``nap`` call runs; that call's error."""
    pid = muster.get(actor.where.remote(), timeout=30)
    ref = actor.nap.remote(str(started))
    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(ActorDiedError) as info:  # RayActorError: caught as before
        muster.get(ref, timeout=60)
    started.unlink()
    return pid, info.value


@pytest.mark.parametrize("cls", [Sleeper, AsyncSleeper])
def test_a_call_the_actor_died_under_is_actor_unavailable_while_it_restarts(engine, tmp_path, cls):
    """As Ray: with restarts left the call fails with ActorUnavailableError; once they are spent, ActorDiedError."""
    actor = muster.remote(max_restarts=1)(cls).remote()
    try:
        first, error = _killed_under_a_call(actor, tmp_path / "started")
        assert type(error) is ActorUnavailableError, repr(error)
        assert f"actor {cls.__name__}" in str(error) and "restarting (restarts left after this one: 0)" in str(error)
        assert "max_task_retries" in str(error) and error.actor_id
        second = None
        for _ in range(200):  # later calls go to the restarted actor
            try:
                second = muster.get(actor.where.remote(), timeout=30)
                break
            except ActorUnavailableError:
                time.sleep(0.05)
        assert second not in (None, first)
        _, error = _killed_under_a_call(actor, tmp_path / "started")  # its one restart is spent
        assert type(error) is ActorDiedError, repr(error)
    finally:
        muster.kill(actor)


def test_an_actor_whose_last_handle_is_dropped_ends(engine):
    """As in Ray: a (non-detached) actor no handle is left to ends, its pending call answered first."""
    c = Counter.remote(0)
    pid = muster.get(c.where.remote())
    last = c.add.remote(5)
    del c
    assert muster.get(last, timeout=30) == 5

    def gone():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    deadline = time.monotonic() + 30
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(), f"the actor's process {pid} still runs after its last handle was dropped"


@muster.remote
class Stoppable:
    """Ray's sample: a plain actor's long method stops once is_canceled() says the call was cancelled."""

    def __init__(self):
        self.outcome = None

    def long_running(self, started):
        open(started, "w").close()
        for _ in range(1000):
            if muster.get_runtime_context().is_canceled():
                self.outcome = "canceled"
                return "canceled"
            time.sleep(0.02)
        self.outcome = "completed"
        return "completed"

    def get_outcome(self):
        return self.outcome


def test_a_running_plain_actor_call_sees_is_canceled_and_get_raises_task_cancelled(engine, tmp_path):
    from muster.exceptions import TaskCancelledError

    s = Stoppable.remote()
    started = str(tmp_path / "started")
    ref = s.long_running.remote(started)
    deadline = time.monotonic() + 60
    while not os.path.exists(started) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert muster.cancel(ref) is None
    with pytest.raises(TaskCancelledError):
        muster.get(ref, timeout=30)
    assert muster.get(s.get_outcome.remote(), timeout=30) == "canceled"
    muster.kill(s)


def _write(path, text):
    with open(path + ".part", "w") as f:  # whole or absent
        f.write(text)
    os.replace(path + ".part", path)


@muster.remote
def child_loop(started, outcome, seconds):
    open(started, "w").close()
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(0.02)
    except KeyboardInterrupt:
        _write(outcome, "interrupted")
        raise
    _write(outcome, "completed")


@muster.remote
def parent_of_child_loop(started, outcome, seconds):
    return muster.get(child_loop.remote(started, outcome, seconds))


@pytest.mark.parametrize("recursive", [True, False])
def test_cancel_reaches_the_tasks_a_task_started_unless_recursive_is_false(engine, tmp_path, recursive):
    """Ray's ``cancel(recursive=True)``, its default: the child task a cancelled task waits on is
    interrupted too; with ``recursive=False`` it runs to its end."""
    from muster.exceptions import TaskCancelledError

    started, outcome = str(tmp_path / "started"), str(tmp_path / "outcome")
    ref = parent_of_child_loop.remote(started, outcome, 30 if recursive else 1)
    deadline = time.monotonic() + 60
    while not os.path.exists(started) and time.monotonic() < deadline:
        time.sleep(0.02)
    if engine == "local":  # the state API names the parent of the child
        from muster.util.state import list_tasks

        def running_children():  # its row says RUNNING once its start event is in (it may trail the file)
            rows = list_tasks(filters=[("name", "=", "child_loop")], limit=10_000)
            return [t["parent_task_id"] for t in rows if t["state"] == "RUNNING"]

        while not running_children() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert running_children() == [ref.task_id()]
    muster.cancel(ref, recursive=recursive)
    with pytest.raises(TaskCancelledError):
        muster.get(ref, timeout=30)
    while not os.path.exists(outcome) and time.monotonic() < deadline:
        time.sleep(0.02)
    with open(outcome) as f:
        assert f.read() == ("interrupted" if recursive else "completed")


# -- Ray Core from a training function ---------------------------------------------
def core_calls_loop():
    """Ray Core from the training function: tasks, and an actor that ends with the run."""
    rank = train.get_context().get_world_rank()
    counter = Counter.options(name=f"in-run-{rank}").remote(rank)
    train.report({"doubled": muster.get(double.remote(21)), "count": muster.get(counter.add.remote(5))})


def test_a_training_loop_runs_tasks_and_its_actors_end_with_the_run(engine, storage):
    result = TorchTrainer(
        core_calls_loop, scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=storage, name=f"core_calls_{engine}", verbose=0),
    ).fit()
    assert result.error is None
    assert (result.metrics["doubled"], result.metrics["count"]) == (42, 5)
    for rank in (0, 1):
        with pytest.raises(ValueError):
            muster.get_actor(f"in-run-{rank}")


# -- the seam's ordering contract ------------------------------------------------------
class Chatty:
    """Sends events to the driver, then dies without a word."""

    def send_then_die(self, n):
        from muster.core import context

        for i in range(n):
            context.send_event({"i": i}, wait=(i == n - 1))  # the last one waits: all have arrived
        os.kill(os.getpid(), signal.SIGKILL)


def test_events_arrive_in_order_and_before_the_death(engine):
    """The controller's durability rests on this: what a worker sent is handled before its death."""
    from muster.core.api import get_runtime

    seen: list = []
    died = threading.Event()

    def on_event(handle, payload):
        time.sleep(0.002)  # a slow handler must not let the death overtake the events
        seen.append(payload["i"])
        return True

    def on_death(handle, error):
        seen.append(("died", type(error).__name__))
        died.set()

    runtime = get_runtime()
    actor = runtime.create_actor(Chatty, (), {}, {"CPU": 1.0}, label="chatty")
    actor.set_handlers(on_event, on_death)
    fut = actor.call("send_then_die", 40)
    with pytest.raises(ActorDiedError):
        fut.result(timeout=60)
    assert died.wait(30)
    assert seen == list(range(40)) + [("died", "ActorDiedError")]
    assert not actor.is_alive()


@muster.remote
def read_env(names):
    return {n: os.environ.get(n) for n in names}


def test_driver_environment_reaches_workers(engine, monkeypatch):
    """NCCL/torch/cloud variables and those named in MUSTER_WORKER_ENV reach every worker."""
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    monkeypatch.setenv("MY_SETTING", "42")
    monkeypatch.setenv("MUSTER_WORKER_ENV", "MY_SETTING")
    names = ["NCCL_DEBUG", "AWS_REGION", "MY_SETTING"]
    assert muster.get(read_env.remote(names)) == {"NCCL_DEBUG": "INFO", "AWS_REGION": "eu-west-3", "MY_SETTING": "42"}
