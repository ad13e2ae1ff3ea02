"""An actor's generator method that raises an exception its ``retry_exceptions`` names runs again while
``max_task_retries`` lasts, as Ray 2.60 runs it (each case run side by side with Ray on plain, threaded and
async actors): a streaming call (the default for a generator method) gives each index once, from the first
attempt that reached it, then the last attempt's error; a ``"dynamic"`` one gives the items of the attempt
that ended, or its ref raises once the retries are spent. Before, muster handed the first attempt's error on
after its items and never re-ran the method.

Where an attempt raises right after its last yields, Ray's outcome is racy (an item's report can lose the race
with the failure, and the retry's item of that index is shown instead); these cases expect what Ray gives when
none is lost, which muster always gives."""

from __future__ import annotations

import pytest

import muster


def _outcomes(refs):
    out = []
    for ref in refs:
        try:
            out.append(muster.get(ref, timeout=60))
        except muster.exceptions.TaskError as exc:
            message = exc.message.strip("'")  # a KeyError's is quoted
            out.append(f"raised {exc.cause_type.rsplit('.', 1)[-1]}: {message}")
    return out


class _Counted:
    def __init__(self):
        self.n = 0

    def attempts(self):
        return self.n

    def _attempt(self, counts, fail, error):
        """Attempt a yields ``counts[a - 1]`` items (all with a longer ``counts``), then raises when ``fail[a - 1]``:
        its items and its exception (None: it ends)."""
        self.n += 1
        a = self.n
        items = [f"a{a}-{i}" for i in range(counts[min(a, len(counts)) - 1])]
        failing = fail[min(a, len(fail)) - 1]
        return items, {"ValueError": ValueError, "KeyError": KeyError}[error](f"attempt {a}") if failing else None

    def gen(self, counts, fail, error="ValueError"):
        items, exc = self._attempt(counts, fail, error)
        yield from items
        if exc is not None:
            raise exc


@muster.remote(max_task_retries=2)
class Plain(_Counted):
    pass


@muster.remote(max_task_retries=2, max_concurrency=2)
class Threaded(_Counted):
    pass


@muster.remote(max_task_retries=2)
class Async(_Counted):
    async def gen(self, counts, fail, error="ValueError"):
        items, exc = self._attempt(counts, fail, error)
        for item in items:
            yield item
        if exc is not None:
            raise exc


STREAMING_CASES = [  # (call options, counts, fail, error, what the caller sees, attempts)
    (dict(retry_exceptions=[ValueError]), [2, 3], [1, 0], "ValueError", ["a1-0", "a1-1", "a2-2"], 2),
    (dict(retry_exceptions=True), [2], [1], "ValueError",
     ["a1-0", "a1-1", "raised ValueError: attempt 3"], 3),  # spent: the last attempt's error
    (dict(retry_exceptions=[ValueError]), [2], [1], "KeyError",
     ["a1-0", "a1-1", "raised KeyError: attempt 1"], 1),  # not one it names
    (dict(), [2], [1], "ValueError", ["a1-0", "a1-1", "raised ValueError: attempt 1"], 1),
    (dict(retry_exceptions=True, max_task_retries=0), [2], [1], "ValueError",
     ["a1-0", "a1-1", "raised ValueError: attempt 1"], 1),
    (dict(retry_exceptions=True, max_task_retries=1), [2, 1], [1, 1], "ValueError",
     ["a1-0", "a1-1", "raised ValueError: attempt 2"], 2),  # a shorter last attempt: its error follows the items
    (dict(retry_exceptions=True), [0, 2, 3], [1, 1, 0], "ValueError", ["a2-0", "a2-1", "a3-2"], 3),
]


@pytest.mark.parametrize("cls", [Plain, Threaded, Async], ids=["plain", "threaded", "async"])
def test_a_streaming_actor_generator_is_retried_for_an_error_retry_exceptions_names(cls):
    for options, counts, fail, error, seen, attempts in STREAMING_CASES:
        actor = cls.remote()
        try:
            assert _outcomes(actor.gen.options(**options).remote(counts, fail, error)) == seen, options
            assert muster.get(actor.attempts.remote(), timeout=60) == attempts, options
        finally:
            muster.kill(actor)


@pytest.mark.parametrize("cls", [Plain, Threaded], ids=["plain", "threaded"])  # Ray refuses async ones here
def test_a_dynamic_actor_generator_is_retried_and_fails_as_a_whole_once_its_retries_are_spent(cls):
    actor = cls.remote()
    try:
        dynamic = actor.gen.options(num_returns="dynamic", retry_exceptions=True)
        assert _outcomes(muster.get(dynamic.remote([2], [1, 0]), timeout=60)) == ["a2-0", "a2-1"]
        assert muster.get(actor.attempts.remote(), timeout=60) == 2
        with pytest.raises(ValueError, match="attempt 5"):  # attempts 3, 4 and 5
            muster.get(dynamic.remote([2], [1]), timeout=60)
        once = actor.gen.options(num_returns="dynamic", retry_exceptions=True, max_task_retries=0)
        with pytest.raises(ValueError, match="attempt 6"):  # named, no retries: the ref raises, as in Ray
            muster.get(once.remote([2], [1]), timeout=60)
        kept = muster.get(actor.gen.options(num_returns="dynamic").remote([2], [1]), timeout=60)
        assert _outcomes(kept) == ["a7-0", "a7-1", "raised ValueError: attempt 7"]  # not named: items, then it
    finally:
        muster.kill(actor)


@muster.remote
class Declared(_Counted):
    @muster.method(max_task_retries=1, retry_exceptions=[ValueError])
    def declared(self):
        yield from self.gen([2, 3, 2, 3], [1, 0, 1, 0])


@muster.remote
def calls_from_a_task(actor):
    return _outcomes(actor.declared.remote())


def test_a_methods_own_retries_apply_to_its_generator_also_through_a_handle_in_a_task():
    actor = Declared.remote()
    try:
        assert _outcomes(actor.declared.remote()) == ["a1-0", "a1-1", "a2-2"]
        assert muster.get(calls_from_a_task.remote(actor), timeout=60) == ["a3-0", "a3-1", "a4-2"]
    finally:
        muster.kill(actor)
