"""``ObjectRefGenerator`` has Ray 2.60's public methods (``ray/_private/object_ref_generator.py``): iteration
(sync and async), ``completed``, ``next_ready``, ``is_finished``, and ``send``/``throw``/``close`` with their
async forms, which Ray refuses with ``NotImplementedError`` and so does muster."""

from __future__ import annotations

import asyncio

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
