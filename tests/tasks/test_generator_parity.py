"""``ObjectRefGenerator`` has Ray 2.60's public methods (``ray/_private/object_ref_generator.py``): iteration
(sync and async), ``completed``, ``next_ready``, ``is_finished``, and ``send``/``throw``/``close`` with their
async forms, which Ray refuses with ``NotImplementedError`` and so does muster. Generator tasks return and
retry as Ray 2.60's do (each case run side by side with Ray): ``num_returns=n`` takes the first n items, and
``retry_exceptions``/``max_retries`` re-run streaming and dynamic generators."""

from __future__ import annotations

import asyncio
import os

import pytest

import muster

RAY_PUBLIC = ["__iter__", "__next__", "send", "throw", "close", "__aiter__", "__anext__", "asend", "athrow",
              "aclose", "completed", "next_ready", "is_finished"]


@muster.remote(num_returns="streaming")
def count(n):
    yield from range(n)


@muster.remote(num_returns="dynamic")
def listed(n):
    yield from range(n)


def test_every_public_method_of_rays_generator_is_here_and_the_unsupported_ones_say_so():
    gen = count.remote(2)
    assert all(callable(getattr(gen, name, None)) for name in RAY_PUBLIC)
    for name in ("send", "throw"):
        with pytest.raises(NotImplementedError, match=f"{name}.*muster.cancel"):
            getattr(gen, name)(None)
    with pytest.raises(NotImplementedError, match="close"):
        gen.close()
    for name, args in (("asend", (None,)), ("athrow", (None,)), ("aclose", ())):
        with pytest.raises(NotImplementedError, match=name):
            asyncio.run(getattr(gen, name)(*args))
    assert [muster.get(ref, timeout=60) for ref in gen] == [0, 1]
    assert gen.is_finished() and not gen.next_ready()


def test_completed_is_a_ref_for_every_generator():
    inner = muster.get(listed.remote(3), timeout=60)  # made from the refs its task returned
    done = inner.completed()
    assert isinstance(done, muster.ObjectRef)
    assert muster.wait([done], timeout=10)[0] == [done]
    assert [muster.get(ref, timeout=60) for ref in inner] == [0, 1, 2]


def _returns_a_list():
    return [1, 2]


@pytest.mark.parametrize("mode", ["streaming", "dynamic"])
def test_a_stream_of_a_function_that_returns_is_refused_where_it_is_declared(mode):
    """As Ray's option check: a function that returns (not yields) gave one list where its caller waited for a
    stream of items, and the caller hung forever."""
    with pytest.raises(muster.exceptions.InvalidArgumentError, match=f"_returns_a_list: num_returns='{mode}'"):
        muster.remote(num_returns=mode)(_returns_a_list)
    with pytest.raises(muster.exceptions.InvalidArgumentError, match="not one. Yield each value"):
        muster.remote(_returns_a_list).options(num_returns=mode)


def test_a_stream_whose_task_returned_a_value_ends_with_an_error_not_a_wait():
    from concurrent.futures import Future

    from muster.tasks.generators import Stream

    source: Future = Future()
    Stream("not-a-task", source).end(result=[1, 2])
    with pytest.raises(muster.exceptions.InvalidTypeError, match="returned list instead of yielding"):
        source.result(timeout=5)


# -- num_returns=n and a generator: Ray 2.60 keeps its first n items --------------------------------------------
@muster.remote
def upto(n):
    yield from range(n)


@muster.remote
class Yielder:
    def upto(self, n):
        yield from range(n)


def _outcomes(refs):
    out = []
    for ref in refs:
        try:
            out.append(muster.get(ref, timeout=60))
        except muster.exceptions.TaskError as exc:
            out.append(f"raised {exc.cause_type.rsplit('.', 1)[-1]}")
    return out


def test_a_generator_with_num_returns_n_gives_its_first_n_items_and_raises_only_for_the_missing():
    """As Ray 2.60 (run side by side): a surplus item is not taken (the n results stand, the worker prints why);
    with fewer items those yielded stand and only the refs past them raise; exactly n is n."""
    assert _outcomes(upto.options(num_returns=3).remote(4)) == [0, 1, 2]  # muster raised on all three
    assert _outcomes(upto.options(num_returns=2).remote(3)) == [0, 1]
    assert muster.get(upto.options(num_returns=1).remote(2), timeout=60) == 0  # was: a generator cannot be pickled
    assert _outcomes(upto.options(num_returns=3).remote(3)) == [0, 1, 2]
    short = upto.options(num_returns=3).remote(2)
    assert _outcomes(short[:2]) == [0, 1]  # muster failed these too
    with pytest.raises(ValueError, match=r"num_returns=3 but yielded 2 values; yield 3 values"):
        muster.get(short[2], timeout=60)
    assert _outcomes(upto.options(num_returns=2).remote(0)) == ["raised InvalidArgumentError"] * 2
    actor = Yielder.remote()
    try:
        assert _outcomes(actor.upto.options(num_returns=2).remote(3)) == [0, 1]
        assert _outcomes(actor.upto.options(num_returns=2).remote(1)) == [0, "raised InvalidArgumentError"]
    finally:
        muster.kill(actor)


# -- retry_exceptions and max_retries of generator tasks, as Ray 2.60's -----------------------------------------
def _attempt(path):
    with open(path, "a") as f:
        f.write("x")
    with open(path) as f:
        return len(f.read())


def _runs(path):
    with open(path) as f:
        return len(f.read())


@muster.remote
def flaky(path, fail_until, error="ValueError"):
    """Yields two items, then raises in its first ``fail_until`` attempts; else yields a last one."""
    a = _attempt(path)
    yield f"a{a}-0"
    yield f"a{a}-1"
    if a <= fail_until:
        raise {"ValueError": ValueError, "KeyError": KeyError}[error](f"attempt {a}")
    yield f"a{a}-last"


@pytest.mark.parametrize("mode", [None, "streaming"])
def test_a_streaming_generator_is_retried_for_an_error_retry_exceptions_names(tmp_path, mode):
    """Ray 2.60 (run side by side): the attempt fails and the task runs again; the items already streamed stay,
    the retry's items of those indices are dropped, its later ones follow; with its retries spent, the last
    attempt's error follows the items. muster handed the first error on after the items, never retrying."""
    task = flaky if mode is None else flaky.options(num_returns=mode)
    cases = [  # (options, fail_until, error, what the caller sees, attempts)
        (dict(retry_exceptions=True, max_retries=2), 1, "ValueError", ["a1-0", "a1-1", "a2-last"], 2),
        (dict(retry_exceptions=[ValueError], max_retries=3), 2, "ValueError", ["a1-0", "a1-1", "a3-last"], 3),
        (dict(retry_exceptions=True, max_retries=2), 99, "ValueError",
         ["a1-0", "a1-1", "raised ValueError"], 3),
        (dict(retry_exceptions=[ValueError], max_retries=3), 2, "KeyError",
         ["a1-0", "a1-1", "raised KeyError"], 1),  # not one it names: not retried
        (dict(max_retries=2), 99, "ValueError", ["a1-0", "a1-1", "raised ValueError"], 1),
    ]
    for i, (options, fail_until, error, seen, attempts) in enumerate(cases):
        path = str(tmp_path / f"attempts{i}")
        assert _outcomes(task.options(**options).remote(path, fail_until, error)) == seen, options
        assert _runs(path) == attempts, options
    path = str(tmp_path / "last")
    gen = task.options(retry_exceptions=True, max_retries=2).remote(path, 99)
    assert [muster.get(next(gen), timeout=60) for _ in range(2)] == ["a1-0", "a1-1"]
    with pytest.raises(ValueError, match="attempt 3"):  # the last attempt's error
        muster.get(next(gen), timeout=60)


def test_a_dynamic_generator_is_retried_for_an_error_retry_exceptions_names(tmp_path):
    """Ray 2.60: its items come from the attempt that ended; with its retries spent its ref itself raises."""
    dynamic = flaky.options(num_returns="dynamic")
    ok = muster.get(dynamic.options(retry_exceptions=True, max_retries=2).remote(str(tmp_path / "a"), 1), timeout=60)
    assert _outcomes(ok) == ["a2-0", "a2-1", "a2-last"] and _runs(str(tmp_path / "a")) == 2
    with pytest.raises(ValueError, match="attempt 3"):
        muster.get(dynamic.options(retry_exceptions=True, max_retries=2).remote(str(tmp_path / "b"), 99), timeout=60)
    assert _runs(str(tmp_path / "b")) == 3
    kept = muster.get(dynamic.options(max_retries=2).remote(str(tmp_path / "c"), 99), timeout=60)
    assert _outcomes(kept) == ["a1-0", "a1-1", "raised ValueError"] and _runs(str(tmp_path / "c")) == 1


@muster.remote
def flaky_first(path):
    _attempt(path)
    raise ValueError("before any item")
    yield  # a generator function


def test_a_generator_with_num_returns_n_is_not_retried_for_its_exceptions(tmp_path):
    """Ray 2.60 stores such a task's items as they come, and never re-runs it for ``retry_exceptions`` (even
    when it raised before its first item, which muster retried)."""
    path = str(tmp_path / "attempts")
    refs = flaky_first.options(num_returns=3, retry_exceptions=True, max_retries=2).remote(path)
    assert _outcomes(refs) == ["raised ValueError"] * 3 and _runs(path) == 1


@muster.remote
def dies_once(path, counts):
    """Yields ``counts[attempt - 1]`` items; the first attempt then ends its process."""
    a = _attempt(path)
    for i in range(counts[a - 1]):
        yield f"a{a}-{i}"
    if a == 1:
        os._exit(1)


def test_a_streaming_generator_whose_worker_died_gives_each_index_once(tmp_path):
    """Ray 2.60 (max_retries, default 3): the items that arrived stay; the retry's items past them follow."""
    for i, (counts, seen) in enumerate((([2, 3], ["a1-0", "a1-1", "a2-2"]), ([3, 1], ["a1-0", "a1-1", "a1-2"]))):
        path = str(tmp_path / f"attempts{i}")
        assert _outcomes(dies_once.remote(path, counts)) == seen
        assert _runs(path) == 2


def test_get_of_a_generator_hands_it_back_untouched_as_ray_does():
    """Ray 2.60's ``get(gen)`` returns the generator itself, so code written for ``num_returns="dynamic"``
    (``for ref in ray.get(task.remote()): ray.get(ref)``) runs on a streaming generator too; muster's took every
    item's value, so the loop's ``get`` of a value raised and the generator was spent."""
    gen = count.remote(3)
    assert muster.get(gen) is gen
    assert [muster.get(ref, timeout=60) for ref in muster.get(gen)] == [0, 1, 2]
    assert muster.get(_get_inside.remote(), timeout=60) == [0, 1, 2]  # in a worker too


@muster.remote
def _get_inside():
    return [muster.get(ref) for ref in muster.get(count.remote(3))]
