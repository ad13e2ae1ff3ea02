"""An actor ends once no handle to it is left, as in Ray (``muster.tasks.lifetimes``): its pending
calls finish first, its ``__ray_shutdown__`` runs, and its CPUs come back, so a loop that makes
actors and drops them does not fill the machine. A handle that went to another process, a
detached actor and one a worker looked up by name are kept. Real worker processes."""

from __future__ import annotations

import os
import time

import pytest
from _task_helpers import TIMEOUT, wait_for, wait_for_file

import muster
from muster.util.state import list_actors


@muster.remote(num_cpus=1)
class Resource:
    def __init__(self, path=None):
        self.path = path

    def pid(self):
        return os.getpid()

    def slow(self, seconds):
        time.sleep(seconds)
        return "done"

    def __ray_shutdown__(self):
        if self.path:
            with open(self.path + ".part", "w") as f:
                f.write("shut down")
            os.replace(self.path + ".part", self.path)


def _state_of(pid):
    rows = list_actors(filters=[("pid", "=", pid)], detail=True, limit=10_000)
    return rows[0] if rows else None


def test_an_actor_ends_once_its_last_handle_is_dropped_and_its_shutdown_hook_runs(tmp_path):
    path = str(tmp_path / "hook")
    handle = Resource.remote(path)
    pid = muster.get(handle.pid.remote(), timeout=TIMEOUT)
    del handle
    assert wait_for_file(path) == "shut down"  # __ray_shutdown__, as Ray calls it
    assert wait_for(lambda: _state_of(pid)["state"] == "DEAD", TIMEOUT)
    why = _state_of(pid)["death_cause"]["actor_died_error_context"]["error_message"]
    assert "every handle to it was dropped" in why


def test_making_and_dropping_actors_in_a_loop_does_not_fill_the_machine(busy):
    for _ in range(2 * int(muster.cluster_resources()["CPU"])):  # each holds one CPU while it lives
        actor = Resource.remote()
        assert muster.get(actor.pid.remote(), timeout=TIMEOUT) > 0
    del actor
    assert not busy()  # nothing waited for the CPUs of actors no one could call any more


def test_a_pending_call_keeps_its_actor_until_it_returns():
    ref = Resource.remote().slow.remote(0.5)  # the handle is gone at once; the call is not
    time.sleep(0.3)
    assert muster.get(ref, timeout=TIMEOUT) == "done"


@muster.remote
def _call_later(handle, seconds):
    time.sleep(seconds)
    return muster.get(handle.pid.remote())


def test_a_handle_passed_to_a_task_keeps_the_actor():
    handle = Resource.remote()
    pid = muster.get(handle.pid.remote(), timeout=TIMEOUT)
    ref = _call_later.remote(handle, 0.6)
    del handle
    assert muster.get(ref, timeout=TIMEOUT) == pid
    time.sleep(1.0)  # five rounds of the reaper: muster cannot see the task drop its handle, so it is kept
    assert _state_of(pid)["state"] == "ALIVE"
    muster.kill(_handle_of(pid))


def _handle_of(pid):
    """A new handle of the live actor whose process is ``pid`` (as ``muster.get_actor`` gives for a name)."""
    from muster.tasks import actor

    [found] = [a for a in actor._actors.values() if a._dead is None and a._core.done() and a._core.result().pid == pid]
    return actor.ActorHandle(found)


@pytest.mark.parametrize("how", ["detached", "looked_up_in_a_task"])
def test_detached_actors_and_those_a_worker_looked_up_are_kept(how):
    name = f"kept_{how}"
    options = {"name": name, "lifetime": "detached"} if how == "detached" else {"name": name}
    handle = Resource.options(**options).remote()
    pid = muster.get(handle.pid.remote(), timeout=TIMEOUT)
    if how == "looked_up_in_a_task":
        assert muster.get(_pid_of_named.remote(name), timeout=TIMEOUT) == pid
    del handle
    time.sleep(1.0)  # five rounds of the reaper
    again = muster.get_actor(name)
    try:
        assert muster.get(again.pid.remote(), timeout=TIMEOUT) == pid
    finally:
        muster.kill(again)


@muster.remote
def _pid_of_named(name):
    return muster.get(muster.get_actor(name).pid.remote())
