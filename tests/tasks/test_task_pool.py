"""The engine's pool of task workers, seen through the public API.

A finished task's worker waits for the next task of the same resource shape;
a pooled worker that died must never be handed out again.
"""

from __future__ import annotations

import os
import signal

import psutil
from _task_helpers import TIMEOUT, wait_for

import muster
from muster.core import api as core_api


@muster.remote
def getpid():
    return os.getpid()


def test_sequential_tasks_of_one_shape_share_a_process_and_other_shapes_do_not():
    one = {muster.get(getpid.remote(), timeout=TIMEOUT) for _ in range(3)}
    two = {muster.get(getpid.options(num_cpus=2).remote(), timeout=TIMEOUT) for _ in range(3)}
    assert len(one) == 1 and len(two) == 1 and one != two


def test_a_pooled_worker_whose_send_fails_is_not_pooled_again():
    """Regression: a call that failed on a dead socket put the dead worker back in the pool.

    The worker is SIGKILLed while idle, and its reader thread is held off (by
    taking the lock it needs to mark the worker dead) so the engine cannot
    notice the death first.  The first attempt then fails on the send; the
    retry must fork a fresh worker instead of picking the same dead one.
    """
    rt = core_api.get_runtime()
    pid = muster.get(getpid.remote(), timeout=TIMEOUT)
    (worker,) = [a for pool in rt._task_pool.idle.values() for a in pool if a.pid == pid]
    with worker._death_lock:
        os.kill(pid, signal.SIGKILL)
        # Reaped by the zygote: every thread has exited, so its socket is closed.
        assert wait_for(worker.exited.is_set, 5) and not psutil.pid_exists(pid)
        new_pid = muster.get(getpid.options(max_retries=1).remote(), timeout=TIMEOUT)
    assert new_pid != pid
    assert wait_for(lambda: muster.available_resources()["CPU"] == 4.0, 5)
