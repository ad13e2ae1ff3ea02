"""``muster.cancel`` on work that already runs, as in Ray: a plain or threaded actor's method is not
interrupted, ``get_runtime_context().is_canceled()`` turns True in it, and ``get`` raises
``TaskCancelledError`` once it returns.  Real worker processes."""

from __future__ import annotations

import os
import time

import pytest
from _task_helpers import TIMEOUT, wait_for_file

import muster
from muster.exceptions import TaskCancelledError


def _mark(path, text="1"):
    with open(path + ".part", "w") as f:  # whole or absent: the driver reads it as soon as it exists
        f.write(text)
    os.replace(path + ".part", path)


class WorkerBody:
    """Ray's sample: a long method that checks is_canceled() now and then and stops early."""

    def __init__(self):
        self.outcome = None

    def long_running(self, started, linger=0.0):
        _mark(started)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if muster.get_runtime_context().is_canceled():
                time.sleep(linger)  # cleaning up: the caller must not hear before it returns
                self.outcome = "canceled"
                return "canceled"
            time.sleep(0.02)
        self.outcome = "completed"
        return "completed"

    def stubborn(self, started, finished):
        _mark(started)
        time.sleep(1.0)  # never checks: a cancel does not stop it
        _mark(finished)
        return "done"

    def touch(self, path):
        _mark(path)

    def checks_once(self):
        return muster.get_runtime_context().is_canceled()

    def get_outcome(self):
        return self.outcome


def _cancel_then_get(ref, timeout=TIMEOUT):
    """Cancel ``ref``, expect its get to raise TaskCancelledError; the seconds that took."""
    t0 = time.monotonic()
    assert muster.cancel(ref) is None
    with pytest.raises(TaskCancelledError):
        muster.get(ref, timeout=timeout)
    return time.monotonic() - t0


def _running(actor, tmp_path, linger=0.0):
    """A ref to ``actor.long_running``, once it runs."""
    started = str(tmp_path / "started")
    ref = actor.long_running.remote(started, linger)
    wait_for_file(started)
    return ref


Worker = muster.remote(WorkerBody)
ThreadedWorker = muster.remote(max_concurrency=2)(WorkerBody)


def test_is_canceled_lets_a_running_sync_actor_method_stop_and_get_raises_after_it_returns(tmp_path):
    w = Worker.remote()
    try:
        ref = _running(w, tmp_path, 0.5)
        assert _cancel_then_get(ref) >= 0.4  # it waited for the method's cleanup, as Ray's get does
        assert muster.get(w.get_outcome.remote(), timeout=TIMEOUT) == "canceled"
        assert muster.get(w.checks_once.remote(), timeout=TIMEOUT) is False  # the next call is not cancelled
        assert muster.cancel(ref) is None  # done already
    finally:
        muster.kill(w)


def test_a_cancelled_sync_method_that_never_checks_runs_to_its_end_before_get_raises(tmp_path):
    w = Worker.remote()
    try:
        started, finished = str(tmp_path / "started"), str(tmp_path / "finished")
        ref = w.stubborn.remote(started, finished)
        wait_for_file(started)
        _cancel_then_get(ref)  # not its "done": the call was cancelled
        assert os.path.exists(finished)  # get raised only once the method had returned
    finally:
        muster.kill(w)


def test_a_call_queued_behind_a_running_one_fails_at_once_and_never_runs(tmp_path):
    w = Worker.remote()
    try:
        running = _running(w, tmp_path)
        ran = str(tmp_path / "ran")
        queued = w.touch.remote(ran)
        time.sleep(0.2)  # sent to the actor, waiting there behind the running call
        _cancel_then_get(queued, timeout=5)  # before the running call ends (it runs for 20 s)
        _cancel_then_get(running)
        assert muster.get(w.get_outcome.remote(), timeout=TIMEOUT) == "canceled"  # the actor got past it
        assert not os.path.exists(ran)  # as in Ray: a cancelled call that had not started never runs
    finally:
        muster.kill(w)


def test_threaded_actor_call_sees_is_canceled_and_fails_once_it_returns(tmp_path):
    w = ThreadedWorker.remote()
    try:
        ref = _running(w, tmp_path, 0.3)
        assert muster.get(w.checks_once.remote(), timeout=TIMEOUT) is False  # runs beside it
        assert _cancel_then_get(ref) >= 0.25
        assert muster.get(w.get_outcome.remote(), timeout=TIMEOUT) == "canceled"
    finally:
        muster.kill(w)


@muster.remote(max_retries=0)
def interruptible(started, seen):
    _mark(started)
    try:
        time.sleep(30)
    except KeyboardInterrupt:  # what cancel raises in a running task
        _mark(seen, str(muster.get_runtime_context().is_canceled()))
        raise


@muster.remote
def not_cancelled():
    return muster.get_runtime_context().is_canceled()


def test_is_canceled_in_a_task(tmp_path):
    assert muster.get(not_cancelled.remote(), timeout=TIMEOUT) is False
    started, seen = str(tmp_path / "started"), str(tmp_path / "seen")
    ref = interruptible.remote(started, seen)
    wait_for_file(started)
    _cancel_then_get(ref)
    assert wait_for_file(seen) == "True"


@muster.remote
class AsyncWorker:
    async def check(self):
        try:
            muster.get_runtime_context().is_canceled()
        except RuntimeError as exc:
            return str(exc)
        return "no error"


def test_is_canceled_is_refused_in_the_driver_and_in_async_actors():
    with pytest.raises(RuntimeError, match="only available inside a task or an actor method"):
        muster.get_runtime_context().is_canceled()
    a = AsyncWorker.remote()
    try:
        assert "not supported in an async actor" in muster.get(a.check.remote(), timeout=TIMEOUT)
    finally:
        muster.kill(a)


@muster.remote
class SlowToStart:
    """An actor whose constructor takes a while: calls made meanwhile wait in the driver for it."""

    def __init__(self, seconds):
        time.sleep(seconds)

    def touch(self, path):
        _mark(path)

    async def touch_async(self, path):
        _mark(path)


@pytest.mark.parametrize("method", ["touch", "touch_async"])
def test_a_call_cancelled_while_its_actor_still_starts_never_runs(tmp_path, method):
    a = SlowToStart.remote(1.5)
    try:
        path = str(tmp_path / "ran")
        ref = getattr(a, method).remote(path)
        time.sleep(0.5)  # the call is handed to the sender, which waits for the actor's process
        _cancel_then_get(ref)
        after = str(tmp_path / "after")
        muster.get(getattr(a, method).remote(after), timeout=TIMEOUT)  # the actor has run what it was sent
        assert os.path.exists(after) and not os.path.exists(path)  # Ray never runs a cancelled pending call
    finally:
        muster.kill(a)
