"""``muster.util.multiprocessing.Pool``: Python's ``multiprocessing.Pool`` on actors, as Ray 2.60's
``ray.util.multiprocessing.Pool`` behaves (results, order, errors), on the session engine."""

from __future__ import annotations

import logging
import multiprocessing
import os
import time

import pytest
from _task_helpers import TIMEOUT

import muster
from muster.exceptions import InvalidArgumentError, InvalidTypeError, MusterError


def square(x):
    return x * x


def add(a, b=0):
    return a + b


def fail_on_three(x):
    if x == 3:
        raise KeyError(f"bad {x}")
    return x


def sleep_for(seconds):
    time.sleep(seconds)
    return seconds


def set_env(value):
    os.environ["POOL_INIT"] = value


def env_and_pid(_):
    return os.environ.get("POOL_INIT"), os.getpid()


def test_results_and_their_order():
    from muster.util.multiprocessing import Pool  # Ray's module path; it was refused before

    with Pool(2) as pool:
        assert pool.map(square, range(10)) == [x * x for x in range(10)]
        assert pool.map(square, (x for x in range(5)), chunksize=2) == [0, 1, 4, 9, 16]
        assert pool.map(square, []) == []
        assert pool.starmap(add, [(1, 2), (3, 4), (5, 6)], chunksize=2) == [3, 7, 11]
        assert pool.apply(add, (1,), {"b": 5}) == 6
        assert pool.apply(lambda: 7) == 7
        assert list(pool.imap(square, range(7))) == [x * x for x in range(7)]
        assert list(pool.imap(square, iter(range(6)), chunksize=2)) == [x * x for x in range(6)]
        # as each finishes (one batch per process in flight; the third waits for the process that ran 0.0)
        assert list(pool.imap_unordered(sleep_for, [0.6, 0.0, 0.3])) == [0.0, 0.6, 0.3]
        assert pool.starmap_async(add, [(1, 1), (2, 2)]).get(TIMEOUT) == [2, 4]


def test_a_raising_function_raises_its_own_exception_and_callbacks():
    from muster.util.multiprocessing import Pool

    with Pool(2) as pool:
        with pytest.raises(KeyError, match="bad 3"):
            pool.map(fail_on_three, range(5), chunksize=1)
        with pytest.raises(KeyError, match="bad 3"):
            pool.apply(fail_on_three, (3,))
        results = pool.imap(fail_on_three, range(5))
        assert [next(results) for _ in range(3)] == [0, 1, 2]
        with pytest.raises(KeyError):  # at its place; the iterator goes on after it
            next(results)
        assert list(results) == [4]

        values, errors = [], []
        done = pool.map_async(square, range(4), chunksize=1, callback=values.append, error_callback=errors.append)
        assert done.get(TIMEOUT) == [0, 1, 4, 9]
        assert done.ready() and done.successful() and values == [[0, 1, 4, 9]] and errors == []
        failed = pool.map_async(fail_on_three, range(5), callback=values.append, error_callback=errors.append)
        failed.wait(TIMEOUT)
        assert failed.ready() and not failed.successful()
        assert [type(e) for e in errors] == [KeyError] and len(values) == 1  # the callback is not called
        with pytest.raises(KeyError):
            failed.get()


def test_timeouts_are_multiprocessing_timeouts():
    from muster.util.multiprocessing import Pool, TimeoutError

    assert TimeoutError is multiprocessing.TimeoutError  # as Ray exports it
    with Pool(1) as pool:
        called = []
        slow = pool.apply_async(sleep_for, (1.0,), callback=called.append)
        assert slow.wait(0.05) is None and not slow.ready()
        with pytest.raises(ValueError, match="not ready") as early:
            slow.successful()
        assert isinstance(early.value, MusterError)
        with pytest.raises(multiprocessing.TimeoutError) as info:
            slow.get(timeout=0.05)
        assert isinstance(info.value, MusterError) and "get(timeout=0.05)" in str(info.value)
        assert slow.get(TIMEOUT) == 1.0 and slow.successful()
        slow.wait(TIMEOUT)
        assert called == [1.0]
        results = pool.imap(sleep_for, [0.5, 0])
        with pytest.raises(TimeoutError):
            results.next(timeout=0.05)
        assert results.next(timeout=TIMEOUT) == 0.5


def test_closed_pool_and_bad_arguments_raise_muster_errors_naming_them():
    from muster.util.multiprocessing import Pool

    cpus = int(muster.cluster_resources()["CPU"])
    with pytest.raises(InvalidArgumentError, match=rf"Pool\(processes={cpus + 1}\).*{cpus} CPUs"):
        Pool(cpus + 1)
    with pytest.raises(InvalidArgumentError, match=r"Pool\(processes=0\)"):
        Pool(0)
    pool = Pool(1)
    with pytest.raises(InvalidArgumentError, match="still running"):
        pool.join()
    with pytest.raises(InvalidArgumentError, match=r"Pool.map\(chunksize=0\)"):
        pool.map(square, [1], chunksize=0)
    with pytest.raises(InvalidTypeError, match=r"func=5"):
        pool.map(5, [1])
    pending = pool.apply_async(sleep_for, (0.3,))
    pool.close()  # the work already sent finishes
    for use in (lambda: pool.map(square, [1]), lambda: pool.apply_async(square, (1,)),
                lambda: pool.imap(square, [1]), pool.__enter__):
        with pytest.raises(InvalidArgumentError, match="not running"):
            use()
    pool.join()
    assert pending.get(TIMEOUT) == 0.3


def test_processes_initializer_maxtasksperchild_and_context(caplog):
    from muster.util.multiprocessing import Pool

    caplog.set_level(logging.WARNING, logger="muster")
    with Pool(initializer=set_env, initargs=("42",), context="spawn") as pool:  # processes: every CPU
        calls = [pool.apply_async(env_and_pid, (i,)) for i in range(int(muster.cluster_resources()["CPU"]))]
        seen = [c.get(TIMEOUT) for c in calls]
    assert {value for value, _ in seen} == {"42"}
    assert len({pid for _, pid in seen}) == len(seen)  # round-robin over one process per CPU
    assert any("context='spawn'" in r.getMessage() and "ignored" in r.getMessage() for r in caplog.records)
    with Pool(1, maxtasksperchild=1) as pool:  # a fresh process for every batch
        seen = pool.map(env_and_pid, range(3), chunksize=1)
    assert len({pid for _, pid in seen}) == 3


def fail_to_start():
    raise KeyError("no start")


@muster.remote
def pool_in_a_task():
    from muster.util.multiprocessing import Pool

    with Pool(2) as pool:  # the driver's engine (none is started in the worker)
        return pool.map(square, range(5)), sorted(pool.imap_unordered(square, range(3)))


def test_a_pool_in_a_task_and_an_initializer_that_raises():
    from muster.util.multiprocessing import Pool

    assert muster.get(pool_in_a_task.remote(), timeout=TIMEOUT) == ([0, 1, 4, 9, 16], [0, 1, 4])
    with pytest.raises(muster.exceptions.ActorDiedError, match="no start"):  # its processes are ended
        Pool(2, initializer=fail_to_start)
