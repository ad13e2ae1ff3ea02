"""The engine's process tree: graceful kill, shutdown, and a killed zygote.

Each test uses its own small ``LocalRuntime`` (no torch preload) because it
ends that engine's processes on purpose.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import pytest

from muster.core.resources import machine  # without the node: resources every engine has
from muster.exceptions import ActorDiedError, RuntimeNotStartedError

from _shared import wait_for

TIMEOUT = 30


class Sleeper:
    def pid(self) -> int:
        return os.getpid()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


@pytest.fixture
def local_rt(small_rt):
    return small_rt


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_kill_with_grace_lets_an_idle_actor_exit_cleanly(local_rt):
    h = local_rt.create_actor(Sleeper, (), {}, {"CPU": 1})
    local_rt.kill(h, grace_s=5.0)
    assert local_rt.exit_status(h, timeout_s=5) == 0
    assert wait_for(lambda: machine(local_rt.available()) == {"CPU": 2.0})


def test_kill_with_grace_forces_a_busy_actor_after_the_grace(local_rt):
    h = local_rt.create_actor(Sleeper, (), {}, {"CPU": 1})
    busy = h.call("sleep", 60)
    time.sleep(0.1)
    local_rt.kill(h, grace_s=0.3)
    assert local_rt.exit_status(h, timeout_s=5) == -signal.SIGKILL
    assert isinstance(busy.exception(5), ActorDiedError)


def test_shutdown_ends_every_worker_and_the_zygote(local_rt):
    handles = [local_rt.create_actor(Sleeper, (), {}, {"CPU": 1}) for _ in range(2)]
    pending = handles[0].call("sleep", 60)
    pids = [h.pid for h in handles]
    zygote = local_rt._zygote
    local_rt.shutdown()
    assert zygote.poll() is not None
    assert wait_for(lambda: all(_gone(p) for p in pids)), [p for p in pids if not _gone(p)]
    assert isinstance(pending.exception(5), ActorDiedError)
    assert all(isinstance(h.call("pid").exception(5), ActorDiedError) for h in handles)
    local_rt.shutdown()  # idempotent
    with pytest.raises(RuntimeNotStartedError):
        local_rt.create_actor(Sleeper, (), {}, {"CPU": 1})


def test_killed_zygote_takes_its_workers_and_later_launches_say_why(local_rt):
    h = local_rt.create_actor(Sleeper, (), {}, {"CPU": 1})
    pid = h.pid
    died = threading.Event()
    h.set_handlers(None, lambda handle, err: died.set())
    pending = h.call("sleep", 60)
    os.kill(local_rt._zygote.pid, signal.SIGKILL)
    assert died.wait(5), "the actor's death was not reported"
    assert isinstance(pending.exception(5), ActorDiedError)
    assert wait_for(lambda: _gone(pid)), "worker outlived its zygote"
    assert wait_for(lambda: machine(local_rt.available()) == {"CPU": 2.0})
    assert wait_for(lambda: local_rt._zygote.poll() is not None)
    with pytest.raises(RuntimeNotStartedError, match=r"muster\.init\(\)"):
        local_rt.create_actor(Sleeper, (), {}, {"CPU": 1})
    err = local_rt.submit(os.getpid, (), {}, {"CPU": 1}).exception(TIMEOUT)
    assert isinstance(err, RuntimeNotStartedError)
    assert machine(local_rt.available()) == {"CPU": 2.0}  # failed launches hold nothing
