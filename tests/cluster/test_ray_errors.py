"""Ray's own failures reach users as muster's classes on a Ray cluster (``muster.init(address=...)``),
the ones muster's engine raises for the same situation, with what to do: never a ``ray.exceptions`` class
or an internal assert. Faults are real: a task's worker SIGKILLed, a node removed under a running task,
a running task force-cancelled. A plain cancel interrupts a running task on whichever node it runs; a task
cancelled while it waits in Ray's queue never runs."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

import muster
from muster.exceptions import NodeDiedError, TaskCancelledError, WorkerCrashedError

ray = pytest.importorskip("ray")


@muster.remote
def pid_then_sleep(path: str) -> int:
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(120)
    return os.getpid()


@muster.remote
def pid_then_tick(path: str) -> str:
    """Short sleeps, as a loop of Python work: Ray's interrupt lands between two of them."""
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    try:
        for _ in range(300):
            time.sleep(0.1)
    except KeyboardInterrupt as exc:
        with open(path + ".part", "w") as f:
            f.write(repr(exc))
        os.replace(path + ".part", path + ".seen")
        raise
    return "finished"


@muster.remote(num_cpus=2)
def hold_a_node(started: str, release: str) -> None:
    open(started, "w").close()
    while not os.path.exists(release):
        time.sleep(0.05)


@muster.remote
def touch(path: str) -> None:
    open(path, "w").close()


@muster.remote
def dies() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _pid_in(path: str, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while not (os.path.exists(path) and open(path).read()):
        assert time.monotonic() < deadline, "the task did not start"
        time.sleep(0.1)
    return int(open(path).read())


def _gone(pid: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.1)
    return False


def test_force_cancel_ends_a_running_tasks_worker(on_ray, tmp_path):
    """muster.cancel(force=True) of a running task failed with an AssertionError inside muster's Ray engine."""
    ref = pid_then_sleep.options(max_retries=0).remote(str(tmp_path / "pid"))
    pid = _pid_in(str(tmp_path / "pid"))
    muster.cancel(ref, force=True)
    with pytest.raises(TaskCancelledError):
        muster.get(ref, timeout=60)
    assert _gone(pid), f"the cancelled task's worker {pid} still runs"


def test_plain_cancel_interrupts_a_running_task(on_ray, tmp_path):
    """muster.cancel(ref) without force settled the ref but left the task running: the engine sent SIGINT
    to a pid it never had (a Ray task's process is on some node), so no KeyboardInterrupt reached it."""
    path = str(tmp_path / "pid")
    ref = pid_then_tick.options(max_retries=0).remote(path)
    pid = _pid_in(path)
    assert muster.cancel(ref) is None
    with pytest.raises(TaskCancelledError):
        muster.get(ref, timeout=60)
    deadline = time.monotonic() + 15
    while not os.path.exists(path + ".seen"):
        assert time.monotonic() < deadline, "the running task was not interrupted"
        time.sleep(0.1)
    assert open(path + ".seen").read() == "KeyboardInterrupt()"
    assert psutil.pid_exists(pid), "a plain cancel ends the task, not its worker process"


def test_cancel_of_a_queued_task_means_it_never_runs(on_ray, tmp_path):
    """A task cancelled while it waited in Ray's queue for a CPU was not cancelled in Ray: once a CPU was
    free it started, ran, and was interrupted only when its start reached the driver."""
    release, marker = str(tmp_path / "release"), str(tmp_path / "ran")
    held = [str(tmp_path / f"held{i}") for i in range(int(muster.cluster_resources()["CPU"]) // 2)]
    holders = [hold_a_node.remote(path, release) for path in held]
    deadline = time.monotonic() + 60  # within the test's timeout, so a failure says what did not happen
    while not all(os.path.exists(path) for path in held):
        assert time.monotonic() < deadline, (f"the tasks holding every CPU did not all start: free "
                                             f"{muster.available_resources().get('CPU')}")
        time.sleep(0.1)
    ref = touch.options(max_retries=0).remote(marker)
    time.sleep(1.0)  # in Ray's queue now, waiting for a CPU
    assert muster.cancel(ref) is None
    open(release, "w").close()
    muster.get(holders, timeout=60)
    muster.get(touch.remote(str(tmp_path / "later")), timeout=60)  # CPUs are free: a new task runs
    with pytest.raises(TaskCancelledError):
        muster.get(ref, timeout=60)
    time.sleep(2.0)
    assert not os.path.exists(marker), "the task cancelled while queued ran once CPUs were free"


def test_a_killed_tasks_worker_says_what_to_do(on_ray):
    with pytest.raises(WorkerCrashedError) as info:
        muster.get(dies.options(max_retries=0).remote(), timeout=60)
    assert not isinstance(info.value, ray.exceptions.RayError)
    assert "max_retries" in str(info.value) and str(info.value).startswith("task dies died: ")  # not "(pid None)"


def test_a_task_on_a_removed_node_is_a_worker_crash(on_ray, tmp_path):
    node = on_ray.add_node(num_cpus=1, resources={"doomed": 1})
    on_ray.wait_for_nodes()
    ref = pid_then_sleep.options(max_retries=0, resources={"doomed": 1}).remote(str(tmp_path / "pid"))
    _pid_in(str(tmp_path / "pid"))
    on_ray.remove_node(node)
    with pytest.raises(WorkerCrashedError) as info:
        muster.get(ref, timeout=120)
    err = info.value
    assert not isinstance(err, ray.exceptions.RayError), type(err).__mro__
    assert "max_retries" in str(err), str(err)
    if "node it was running on is dead" in str(err):  # Ray said NodeDiedError: muster's class of that name too
        assert isinstance(err, NodeDiedError), type(err).__mro__
