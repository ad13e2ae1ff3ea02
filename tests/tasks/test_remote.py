"""Tasks through the public API: ``@muster.remote`` functions, options, nesting, errors, retries.

Real worker processes on the session engine (4 CPUs, no GPU); crashes are
real SIGKILLs.
"""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest
from _task_helpers import TIMEOUT, wait_for, wait_for_file

import muster
from muster.exceptions import (
    ActorDiedError,
    GetTimeoutError,
    ResourcesUnavailableError,
    TaskError,
    WorkerCrashedError,
)


@muster.remote
def square(x):
    return x * x


@muster.remote(num_cpus=1, max_retries=0)
def add(a, b=0):
    return a + b


@muster.remote
def getpid():
    return os.getpid()


@muster.remote
def sleep_then(seconds, value):
    time.sleep(seconds)
    return value


@muster.remote
def window(seconds):
    """(start, end) wall-clock times of a task that sleeps ``seconds``."""
    start = time.time()
    time.sleep(seconds)
    return start, time.time()


# -- submitting and getting ------------------------------------------------------------------
def test_seed_square_sample():
    futures = [square.remote(i) for i in range(4)]
    assert all(isinstance(f, muster.ObjectRef) for f in futures)
    assert muster.get(futures, timeout=TIMEOUT) == [0, 1, 4, 9]


def test_decorator_with_options_and_kwargs():
    assert muster.get(add.remote(2, b=40), timeout=TIMEOUT) == 42


def test_get_single_ref_and_list_keep_order():
    refs = [sleep_then.remote(0.3 - 0.1 * i, i) for i in range(3)]  # finish in reverse order
    assert muster.get(refs[1], timeout=TIMEOUT) == 1
    assert muster.get(refs, timeout=TIMEOUT) == [0, 1, 2]


def test_remote_checks_the_arguments_at_the_call_as_ray():
    """Ray's highly_parallel example calls pi4_sample.remote() without its argument: Ray raises TypeError at
    .remote(); muster ran the task and failed at get()."""
    with pytest.raises(TypeError, match=r"square\.remote\(\): missing a required argument: 'x'; it takes \(x\)"):
        square.remote()
    with pytest.raises(TypeError, match="too many positional arguments"):
        add.remote(1, 2, 3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'c'"):
        add.options(num_cpus=0.5).remote(1, c=2)


def test_get_rejects_what_is_not_a_ref():
    with pytest.raises(TypeError, match=r"\.remote\(\)"):
        muster.get(square)


def test_get_timeout_raises_get_timeout_error():
    ref = sleep_then.remote(1.5, "late")
    with pytest.raises(GetTimeoutError) as info:
        muster.get(ref, timeout=0.2)
    # It gave up before the task finished: had get waited for it, the ref would be ready now.
    ready, not_ready = muster.wait([ref], num_returns=1, timeout=0)
    assert ready == [] and not_ready == [ref]
    assert isinstance(info.value, TimeoutError)
    assert muster.get(ref, timeout=TIMEOUT) == "late"  # the task itself goes on


def test_refs_are_passed_to_other_tasks():
    x = square.remote(3)
    # A top-level ref argument arrives as its value, after its task finished.
    assert muster.get(add.remote(x, b=square.remote(4)), timeout=TIMEOUT) == 25


@muster.remote
def sum_refs(refs):
    return sum(muster.get(refs))  # refs nested in a list arrive as refs


def test_refs_nested_in_arguments_can_be_got_inside_a_task():
    refs = [square.remote(i) for i in range(5)]
    assert muster.get(sum_refs.remote(refs), timeout=TIMEOUT) == 30


# -- nesting -----------------------------------------------------------------------------------
@muster.remote
def fan_out(n):
    inner = [square.remote(i) for i in range(n)]
    ready, _ = muster.wait(inner, num_returns=n, timeout=TIMEOUT)
    assert len(ready) == n
    ref = muster.put(sum(muster.get(inner, timeout=TIMEOUT)))
    return muster.get(ref)


def test_tasks_submitting_tasks_do_not_deadlock_when_every_cpu_is_busy():
    # 8 outer tasks on 4 CPUs: all CPUs are held by outer tasks that wait on inner
    # ones; only lending a waiting worker's CPU lets the inner tasks run.
    refs = [fan_out.remote(4) for _ in range(8)]
    assert muster.get(refs, timeout=60) == [0 + 1 + 4 + 9] * 8
    assert wait_for(lambda: muster.available_resources().get("CPU") == 4.0, 5)


@muster.remote(num_cpus=0)
def sleep_then(seconds, value):
    time.sleep(seconds)
    return value


@muster.remote(num_cpus=1, max_concurrency=2)
class TwoWaiters:
    def wait_on(self, seconds):
        return muster.get(sleep_then.remote(seconds, "done"), timeout=TIMEOUT)


def test_a_threaded_actor_waiting_in_get_on_two_threads_lends_its_cpu_once():
    # Both calls wait in muster.get at once: the actor's 1 CPU is lent once (it was lent twice, and the
    # machine counted 5 CPUs free of 4), and comes back once, after the last of them.
    actor = TwoWaiters.remote()
    refs = [actor.wait_on.remote(1.5) for _ in range(2)]
    seen = []
    while muster.wait(refs, num_returns=2, timeout=0)[1]:
        seen.append(muster.available_resources().get("CPU", 0.0))
        time.sleep(0.05)
    assert muster.get(refs, timeout=TIMEOUT) == ["done", "done"]
    assert max(seen) == 4.0, seen  # lent: every CPU free, never more
    assert wait_for(lambda: muster.available_resources().get("CPU") == 3.0, 5)  # the actor holds it again
    muster.kill(actor)


@muster.remote
def depth(n):
    return 0 if n == 0 else 1 + muster.get(depth.remote(n - 1))


def test_recursive_tasks_deeper_than_the_cpu_count():
    assert muster.get(depth.remote(6), timeout=60) == 6


# -- resources ---------------------------------------------------------------------------------
def test_tasks_wait_for_their_resources():
    big = window.options(num_cpus=4)  # the whole session engine
    first, second = big.remote(0.4), big.remote(0.4)
    (s1, e1), (s2, e2) = muster.get([first, second], timeout=TIMEOUT)
    assert s2 >= e1 or s1 >= e2, "two tasks holding every CPU ran at the same time"


@muster.remote
def wait_for_release(started, release):
    open(started, "w").close()
    deadline = time.time() + 30
    while not os.path.exists(release) and time.time() < deadline:
        time.sleep(0.01)
    return "released"


def test_options_num_cpus_holds_that_many_cpus(tmp_path):
    started, release = str(tmp_path / "started"), str(tmp_path / "release")
    ref = wait_for_release.options(num_cpus=3).remote(started, release)
    wait_for_file(started)
    try:
        assert muster.available_resources()["CPU"] == 1.0
    finally:
        open(release, "w").close()
    assert muster.get(ref, timeout=TIMEOUT) == "released"
    assert wait_for(lambda: muster.available_resources()["CPU"] == 4.0, 5)


def test_same_resource_shape_reuses_the_worker_process():
    pids = [muster.get(getpid.remote(), timeout=TIMEOUT) for _ in range(3)]
    assert len(set(pids)) == 1 and pids[0] != os.getpid()


def test_impossible_requests_return_a_ref_that_fails_fast_naming_ask_and_supply():
    """As in Ray, .remote() of a task that can never run returns a ref (with a warning naming what is
    missing); get() and wait() raise/return at once instead of hanging."""
    with pytest.warns(UserWarning, match="GPU=1"):
        ref = square.options(num_gpus=1).remote(2)
    ready, _ = muster.wait([ref], timeout=TIMEOUT)
    assert ready == [ref]
    with pytest.raises(ResourcesUnavailableError) as info:
        muster.get(ref, timeout=TIMEOUT)
    msg = str(info.value)
    assert "GPU=1" in msg and "GPU=0" in msg and "square" in msg
    with pytest.warns(UserWarning, match="CPU=100"):
        ref = square.options(num_cpus=100).remote(2)
    with pytest.raises(ResourcesUnavailableError) as info:
        muster.get(ref, timeout=TIMEOUT)
    assert "CPU=100" in str(info.value) and "CPU=4" in str(info.value)
    assert info.value.requested == {"CPU": 100.0}
    with pytest.warns(UserWarning, match="accelerator_x"):
        ref = square.options(resources={"accelerator_x": 1}).remote(2)
    with pytest.raises(ResourcesUnavailableError, match="accelerator_x"):
        muster.get(ref, timeout=TIMEOUT)


def test_options_are_validated():
    with pytest.raises(TypeError, match="max_restarts"):
        square.options(max_restarts=1)
    with pytest.raises(ValueError, match="num_cpus"):
        square.options(num_cpus=-1)
    with pytest.raises(TypeError, match="keyword"):
        muster.remote(1, 2)
    with pytest.raises(TypeError, match=r"square is already remote; call square.remote\(...\)"):
        muster.remote(square)
    # Ray's runtime_env keys muster does not apply (pip, a URI working_dir...) are accepted, and said to do nothing
    with pytest.warns(UserWarning, match=r"@muster.remote on square: runtime_env pip, working_dir have no effect"):
        square.options(runtime_env={"pip": ["requests"], "working_dir": "s3://b/code.zip", "env_vars": {"A": "1"}})
    with pytest.warns(UserWarning, match=r"memory=1073741824 is not reserved by muster.*num_cpus"):
        square.options(memory=2**30)
    with pytest.raises(ValueError, match=r"square.options\(max_calls=1\): max_calls cannot be set in .options\(\)"):
        square.options(max_calls=1)  # as in Ray: only @muster.remote(max_calls=...) sets it
    with pytest.raises(ValueError, match=r"max_calls=-1; use an integer >= 0"):
        muster.remote(max_calls=-1)(lambda: None)


@muster.remote(max_calls=2)
def pid_twice():
    return os.getpid()


@muster.remote(max_calls=2)
def pid_twice_fails():
    raise RuntimeError(f"failing in {os.getpid()}")


def test_max_calls_ends_the_worker_after_that_many_tasks_of_the_function():
    """As in Ray: a worker runs a max_calls function that many times, then exits and is replaced
    (a task that raised counts too)."""
    pids = [muster.get(pid_twice.remote(), timeout=TIMEOUT) for _ in range(6)]
    assert max(pids.count(p) for p in pids) == 2, pids  # reused up to the limit, never past it
    assert wait_for(lambda: not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"
                                    for p in set(pids)), 10), "a worker past its max_calls is still alive"
    failed = []
    for _ in range(4):
        with pytest.raises(RuntimeError, match="failing in") as info:
            muster.get(pid_twice_fails.remote(), timeout=TIMEOUT)
        failed.append(int(str(info.value).split("failing in ")[1].split()[0]))
    assert max(failed.count(p) for p in failed) <= 2, failed


def test_get_gpu_ids_is_empty_without_gpus():
    @muster.remote
    def gpu_ids():
        return muster.get_gpu_ids()

    assert muster.get_gpu_ids() == []
    assert muster.get(gpu_ids.remote(), timeout=TIMEOUT) == []


# -- errors ------------------------------------------------------------------------------------
def test_calling_a_remote_function_directly_says_use_remote():
    with pytest.raises(TypeError, match=r"square\.remote\("):
        square(3)


def divide_helper(a, b):
    return a / b


@muster.remote
def divide(a, b):
    return divide_helper(a, b)


def test_task_exception_keeps_its_type_and_remote_traceback():
    muster.get(square.remote(1), timeout=TIMEOUT)  # the worker was forked for `square`
    try:
        muster.get(divide.remote(1, 0), timeout=TIMEOUT)
    except ZeroDivisionError as exc:
        err = exc
    else:
        pytest.fail("a task's ZeroDivisionError did not reach muster.get")
    assert isinstance(err, TaskError)
    assert isinstance(err.cause, ZeroDivisionError)
    assert "divide_helper" in err.remote_traceback and "divide_helper" in str(err)
    # The message names the task that raised, even in a worker reused from another task.
    assert "task divide" in str(err) and "task square" not in str(err)
    assert err.pid != os.getpid()


class QuotaExceeded(Exception):
    pass


@muster.remote
def over_quota():
    raise QuotaExceeded("used 11 of 10")


def test_custom_exception_class_is_caught_by_its_own_type():
    with pytest.raises(QuotaExceeded, match="used 11 of 10"):
        muster.get(over_quota.remote(), timeout=TIMEOUT)


def test_a_failed_dependency_fails_the_task_that_needed_it():
    with pytest.raises(ZeroDivisionError):
        muster.get(add.remote(divide.remote(1, 0)), timeout=TIMEOUT)


@muster.remote
def crash(attempts_file):
    with open(attempts_file, "a") as f:
        f.write(f"{os.getpid()}\n")
    os.kill(os.getpid(), signal.SIGKILL)


@muster.remote(max_retries=2)
def crash_once(marker):
    if not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return "survived"


def test_crashed_worker_with_no_retries_raises_worker_crashed_error(tmp_path):
    attempts = tmp_path / "attempts"
    with pytest.raises(WorkerCrashedError) as info:
        muster.get(crash.options(max_retries=0).remote(str(attempts)), timeout=TIMEOUT)
    err = info.value
    assert not isinstance(err, ActorDiedError)
    pids = attempts.read_text().split()
    assert len(pids) == 1 and err.pid == int(pids[0])
    assert err.exitcode == -signal.SIGKILL and "SIGKILL" in str(err) and "crash" in str(err)
    assert wait_for(lambda: muster.available_resources()["CPU"] == 4.0, 5)


def test_crashed_worker_is_retried_max_retries_times(tmp_path):
    attempts = tmp_path / "attempts"
    with pytest.raises(WorkerCrashedError):
        muster.get(crash.options(max_retries=2).remote(str(attempts)), timeout=TIMEOUT)
    pids = attempts.read_text().split()
    assert len(pids) == 3 and len(set(pids)) == 3  # first try + 2 retries, each in a fresh process


def test_retry_after_a_crash_succeeds(tmp_path):
    marker = tmp_path / "crashed-once"
    assert muster.get(crash_once.remote(str(marker)), timeout=TIMEOUT) == "survived"
    assert marker.exists()  # it really crashed the first time


@muster.remote(max_retries=3)
def raise_value_error(attempts_file):
    with open(attempts_file, "a") as f:
        f.write("x")
    raise ValueError("not retried")


def test_exceptions_are_not_retried_unless_asked(tmp_path):
    attempts = tmp_path / "attempts"
    with pytest.raises(ValueError):
        muster.get(raise_value_error.remote(str(attempts)), timeout=TIMEOUT)
    assert attempts.read_text() == "x"
    attempts.unlink()
    with pytest.raises(ValueError):
        muster.get(raise_value_error.options(retry_exceptions=True, max_retries=2).remote(str(attempts)),
                   timeout=TIMEOUT)
    assert attempts.read_text() == "xxx"
    for listed, runs in (([KeyError], "x"), ([KeyError, ValueError], "xxx"), ([Exception], "xxx")):
        attempts.unlink()  # a list retries only those types (and their subclasses), as in Ray
        with pytest.raises(ValueError):
            muster.get(raise_value_error.options(retry_exceptions=listed, max_retries=2).remote(str(attempts)),
                       timeout=TIMEOUT)
        assert attempts.read_text() == runs, listed
    with pytest.raises(ValueError, match=r"retry_exceptions='yes'"):
        raise_value_error.options(retry_exceptions="yes")


class _CodedError(Exception):
    """An exception whose __init__ cannot be called again with its args (pickling it fails)."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


@muster.remote
def _raise_coded():
    raise _CodedError("bad thing", 42)


@muster.remote
def _code_seen_in_a_task():
    try:
        muster.get(_raise_coded.remote(), timeout=TIMEOUT)
    except _CodedError as exc:
        return exc.code


def test_an_exception_that_does_not_pickle_is_still_caught_by_its_type_with_its_attributes():
    """Before, it came back as a bare TaskError (cause None): `except _CodedError` missed it."""
    with pytest.raises(_CodedError, match="bad thing") as info:
        muster.get(_raise_coded.remote(), timeout=TIMEOUT)
    assert info.value.code == 42 and "_raise_coded" in str(info.value)  # the remote traceback stays
    assert muster.get(_code_seen_in_a_task.remote(), timeout=TIMEOUT) == 42


@muster.remote
def _raise_from_user_code():
    raise LookupError("the real error")


@muster.remote
class _RaisesInAMethod:
    def method(self):
        raise LookupError("the real error")


@muster.remote
def _raise_in_a_generator():
    yield 1
    raise LookupError("the real error")


def test_a_remote_traceback_starts_at_the_users_code_as_rays_does():
    """Ray's task_exceptions guide shows the user's frames only; muster's worker loop, which called the
    function, sent its own frames first (core/local/worker.py, tasks/worker_side.py)."""
    actor = _RaisesInAMethod.remote()
    refs = [_raise_from_user_code.remote(), actor.method.remote(), list(_raise_in_a_generator.remote())[-1]]
    for ref, where in zip(refs, ("_raise_from_user_code", "method", "_raise_in_a_generator")):
        with pytest.raises(LookupError) as info:
            muster.get(ref, timeout=TIMEOUT)
        frames = [line for line in info.value.traceback_str.splitlines() if line.startswith("  File ")]
        assert len(frames) == 1 and frames[0].endswith(f"in {where}"), info.value.traceback_str
        assert info.value.traceback_str.rstrip().endswith("LookupError: the real error")
    muster.kill(actor)


@muster.remote
def _raise_key_error():
    return {}["missing"]


def test_a_task_key_error_prints_as_the_task_error_not_as_a_repr_of_it():
    """KeyError's own str() quotes its argument: the error printed as one repr'd string, \\n and all."""
    with pytest.raises(KeyError) as info:
        muster.get(_raise_key_error.remote(), timeout=TIMEOUT)
    text = str(info.value)
    assert text.startswith("KeyError: 'missing'\n") and "in _raise_key_error" in text, text


@muster.remote
def _gets_a_failing_task():
    return muster.get(_raise_key_error.remote())


@muster.remote
class _GetsAFailingTask:
    def run(self):
        return muster.get(_raise_key_error.remote())


def test_an_error_a_nested_get_passed_on_keeps_its_class_as_rays():
    """Ray raises RayTaskError(KeyError) for a task whose nested get raised KeyError; muster raised a plain
    TaskError, which ``except KeyError`` missed."""
    actor = _GetsAFailingTask.remote()
    for ref, outer in ((_gets_a_failing_task.remote(), "task _gets_a_failing_task"),
                       (actor.run.remote(), "actor _GetsAFailingTask")):
        with pytest.raises(KeyError) as info:
            muster.get(ref, timeout=TIMEOUT)
        text = str(info.value)
        assert text.startswith("KeyError: 'missing'\n") and isinstance(info.value.cause, KeyError), text
        assert f"Raised in {outer}" in text and "Raised in task _raise_key_error" in text, text  # both named
    muster.kill(actor)


@muster.remote
def own_task_id():
    return muster.get_runtime_context().get_task_id()


@muster.remote(num_returns=2)
def ids_twice():
    task = muster.get_runtime_context().get_task_id()
    return task, task


@muster.remote
class IdActor:
    def own_task_id(self):
        return muster.get_runtime_context().get_task_id()


@muster.remote
def task_ids_seen_in_a_worker():
    ref = own_task_id.remote()
    return (ref.task_id().hex(), muster.get(ref, timeout=TIMEOUT), ref.job_id().hex(),
            muster.put(1).task_id(), ref.is_nil())


def test_a_refs_task_id_job_id_and_nil_are_rays():
    ref = own_task_id.remote()
    assert ref.task_id().hex() == muster.get(ref, timeout=TIMEOUT) == ref.task_id()  # the id the task saw
    assert muster.util.state.get_task(ref.task_id())["task_id"] == ref.task_id()
    job = muster.get_runtime_context().get_job_id()
    assert ref.job_id().hex() == job and not ref.is_nil()
    first, second = ids_twice.remote()
    assert first.task_id() == second.task_id() == muster.get(first, timeout=TIMEOUT)
    actor = IdActor.remote()
    call = actor.own_task_id.remote()
    assert call.task_id().hex() == muster.get(call, timeout=TIMEOUT)
    muster.kill(actor)
    assert muster.put(1).task_id() is None  # no task made it (Ray gives the putting task's id)
    seen, inside, job_inside, put_task, nil = muster.get(task_ids_seen_in_a_worker.remote(), timeout=TIMEOUT)
    assert (seen, job_inside, put_task, nil) == (inside, job, None, False)
    empty = muster.ObjectRef.nil()
    assert empty.is_nil() and empty.hex() == "f" * 56 and muster.ObjectRef(empty.binary()).is_nil()
