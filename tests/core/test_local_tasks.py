"""Tasks on the local engine: ``runtime.submit`` -> Future, pooled workers, crashes.

Task workers stay in a pool after their task (that is what makes the second
task fast), so every test here uses its own small ``LocalRuntime`` and shuts
it down; the zygote skips preloading torch to keep that cheap.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from muster.core.resources import machine  # without the node: resources every engine has
from muster.exceptions import ActorDiedError, TaskError, WorkerCrashedError

from _shared import wait_for

TIMEOUT = 30


def power(base: int, exp: int = 2) -> int:
    return base**exp


def getpid() -> int:
    return os.getpid()


def raise_key_error(key: str) -> None:
    def lookup_that_fails() -> None:
        raise KeyError(key)

    lookup_that_fails()


def sleep_forever_after_writing_pid(path: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)
    while True:
        time.sleep(1)


class Holder:
    def pid(self) -> int:
        return os.getpid()


@pytest.fixture
def task_rt(small_rt):
    return small_rt


def _read_pid(path: str, timeout: float = TIMEOUT) -> int:
    assert wait_for(lambda: os.path.exists(path), timeout), f"{path} never appeared"
    with open(path) as f:
        return int(f.read())


def test_submit_returns_the_result(task_rt):
    fut = task_rt.submit(power, (3,), {"exp": 4}, {"CPU": 1})
    assert fut.result(TIMEOUT) == 81
    assert machine(task_rt.available()) == {"CPU": 2.0}


def test_task_exception_becomes_task_error(task_rt):
    err = task_rt.submit(raise_key_error, ("missing-key",), {}, {"CPU": 1}).exception(TIMEOUT)
    assert isinstance(err, TaskError)
    assert isinstance(err.cause, KeyError) and err.cause.args == ("missing-key",)
    assert err.cause_type == "KeyError"
    assert "lookup_that_fails" in err.remote_traceback
    # The worker survived its task raising and is reused.
    assert task_rt.submit(power, (2,), {}, {"CPU": 1}).result(TIMEOUT) == 4
    assert machine(task_rt.available()) == {"CPU": 2.0}


def test_same_resource_shape_reuses_the_worker(task_rt):
    first = task_rt.submit(getpid, (), {}, {"CPU": 1}).result(TIMEOUT)
    second = task_rt.submit(getpid, (), {}, {"CPU": 1}).result(TIMEOUT)
    assert first == second != os.getpid()
    other_shape = task_rt.submit(getpid, (), {}, {"CPU": 2}).result(TIMEOUT)
    assert other_shape != first
    assert machine(task_rt.available()) == {"CPU": 2.0}


def test_sigkilled_task_gives_worker_crashed_error_naming_pid_and_signal(task_rt, tmp_path):
    path = str(tmp_path / "task.pid")
    fut = task_rt.submit(sleep_forever_after_writing_pid, (path,), {}, {"CPU": 1})
    pid = _read_pid(path)
    assert machine(task_rt.available()) == {"CPU": 1.0}
    os.kill(pid, signal.SIGKILL)
    err = fut.exception(10)
    assert isinstance(err, WorkerCrashedError) and not isinstance(err, ActorDiedError)
    assert err.pid == pid and err.exitcode == -9 and err.signal == signal.SIGKILL
    assert str(pid) in str(err) and "SIGKILL" in str(err)
    assert wait_for(lambda: machine(task_rt.available()) == {"CPU": 2.0})
    # The pool does not hand out the dead worker again.
    again = task_rt.submit(getpid, (), {}, {"CPU": 1}).result(TIMEOUT)
    assert again != pid


def test_idle_pooled_worker_dying_does_not_free_its_slots_twice(task_rt):
    """Regression: an idle pool worker has already given its slots back."""
    pid = task_rt.submit(getpid, (), {}, {"CPU": 2}).result(TIMEOUT)
    assert machine(task_rt.available()) == {"CPU": 2.0}
    os.kill(pid, signal.SIGKILL)
    time.sleep(1.0)  # let the engine notice the death and run its bookkeeping
    assert machine(task_rt.available()) == {"CPU": 2.0}
    assert task_rt.submit(getpid, (), {}, {"CPU": 2}).result(TIMEOUT) != pid


def test_task_waiting_for_a_pooled_worker_does_not_deadlock_the_engine(task_rt):
    """Regression: waiting for a pooled worker's slots must not hold the engine lock."""
    pooled_pid = task_rt.submit(getpid, (), {}, {"CPU": 2}).result(TIMEOUT)
    holder = task_rt.create_actor(Holder, (), {}, {"CPU": 2})  # everything busy
    fut = task_rt.submit(getpid, (), {}, {"CPU": 2})
    time.sleep(0.3)
    assert not fut.done()  # it waits for the CPUs...
    done = threading.Event()
    threading.Thread(target=lambda: (task_rt.kill(holder), done.set()), daemon=True).start()
    assert done.wait(5)
    assert fut.result(TIMEOUT) == pooled_pid  # ...and gets them once the holder is gone
    assert wait_for(lambda: machine(task_rt.available()) == {"CPU": 2.0})


def test_submit_more_than_exists_fails_at_once(task_rt):
    from muster.exceptions import ResourcesUnavailableError

    t0 = time.monotonic()
    with pytest.raises(ResourcesUnavailableError, match="CPU=3"):
        task_rt.submit(getpid, (), {}, {"CPU": 3})
    assert time.monotonic() - t0 < 20  # the alternative is waiting forever for resources that never come
