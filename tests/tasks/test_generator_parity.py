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
