"""Per-method options of actors, as Ray 2.60's: ``@muster.method(max_task_retries=, retry_exceptions=)`` and
``handle.m.options(...)`` (which override the method's, which override the actor's ``max_task_retries``).

Real actors in real processes; a counter in the actor proves how often a call ran, and a real process exit
(``os._exit``) is the actor death a retry survives.
"""

from __future__ import annotations

import os

import pytest
from _task_helpers import TIMEOUT

import muster
from muster.exceptions import ActorUnavailableError, TaskError


class Flaky:
    """Each key's calls raise ``error`` until they have run ``fails`` times; ``runs`` counts them."""

    def __init__(self):
        self.runs: dict[str, int] = {}

    def count(self, key):
        return self.runs.get(key, 0)

    def _fail_first(self, key, fails, error):
        self.runs[key] = self.runs.get(key, 0) + 1
        if self.runs[key] <= fails:
            raise error(f"attempt {self.runs[key]}")
        return "ok"

    @muster.method(retry_exceptions=[ValueError], max_task_retries=3)
    def listed(self, key, fails, error=ValueError):
        return self._fail_first(key, fails, error)

    @muster.method(retry_exceptions=True)  # the actor's max_task_retries
    def any_error(self, key, fails):
        return self._fail_first(key, fails, KeyError)

    @muster.method(max_task_retries=5)  # without retry_exceptions an exception is never retried
    def not_listed(self, key, fails):
        return self._fail_first(key, fails, ValueError)

    def plain(self, key, fails):
        return self._fail_first(key, fails, ValueError)


class AsyncFlaky(Flaky):
    @muster.method(retry_exceptions=[ValueError], max_task_retries=3)
    async def listed(self, key, fails, error=ValueError):
        return self._fail_first(key, fails, error)


@muster.remote
def call_from_a_task(handle):
    """The handle inside a worker: its call's options travel to the driver, which retries it."""
    ref = handle.plain.options(retry_exceptions=[ValueError], max_task_retries=1).remote("task", 1)
    return muster.get(ref), muster.get(handle.count.remote("task"))


def _attempts(actor, method, key, *args):
    """(the error the call raised, or None; how often it ran)."""
    try:
        muster.get(method.remote(key, *args), timeout=TIMEOUT)
        error = None
    except TaskError as exc:
        error = exc.cause_type
    return error, muster.get(actor.count.remote(key), timeout=TIMEOUT)


@pytest.mark.parametrize("cls,concurrency", [(Flaky, 1), (AsyncFlaky, 1), (Flaky, 2)],
                         ids=["plain", "async", "threaded"])
def test_a_method_retries_the_exceptions_its_retry_exceptions_name(cls, concurrency):
    actor = muster.remote(max_task_retries=2, max_concurrency=concurrency)(cls).remote()
    try:
        assert muster.get(actor.listed.remote("two", 2), timeout=TIMEOUT) == "ok"
        assert muster.get(actor.count.remote("two"), timeout=TIMEOUT) == 3
        assert _attempts(actor, actor.listed, "other", 1, KeyError) == ("KeyError", 1)  # not in the list
        assert _attempts(actor, actor.listed, "always", 9) == ("ValueError", 4)  # its own 3 retries, then raised
        assert _attempts(actor, actor.any_error, "actor's", 9) == ("KeyError", 3)  # the actor's 2 retries
        assert _attempts(actor, actor.not_listed, "none", 1) == ("ValueError", 1)
        # a call's options override its method's
        assert _attempts(actor, actor.plain.options(retry_exceptions=True, max_task_retries=1), "opt", 1) == (None, 2)
        assert _attempts(actor, actor.listed.options(max_task_retries=0), "zero", 1) == ("ValueError", 1)
        assert _attempts(actor, actor.listed.options(retry_exceptions=False), "off", 1) == ("ValueError", 1)
        if cls is Flaky and concurrency == 1:
            assert muster.get(call_from_a_task.remote(actor), timeout=TIMEOUT) == ("ok", 2)
            from muster.util.state import list_tasks

            muster.get(actor.count.options(name="named call").remote("x"), timeout=TIMEOUT)  # Ray's task name
            assert [t.func_or_class_name for t in list_tasks(filters=[("name", "=", "named call")])] == ["Flaky.count"]
    finally:
        muster.kill(actor)


class Dies:
    """Its process exits the first time ``work`` runs (a file marks it: the restarted actor has no memory)."""

    def __init__(self, folder):
        self.folder = folder

    @muster.method(max_task_retries=1)
    def work(self, name):
        marker = os.path.join(self.folder, name)
        if not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)
        return name


def test_a_methods_max_task_retries_overrides_its_actors_when_the_actor_dies(tmp_path):
    actor = muster.remote(max_restarts=2)(Dies).remote(str(tmp_path))  # the actor's own max_task_retries: 0
    try:
        assert muster.get(actor.work.remote("first"), timeout=TIMEOUT) == "first"  # sent again to the new process
        with pytest.raises(ActorUnavailableError):  # not sent again; as Ray's, it restarts (one restart left)
            muster.get(actor.work.options(max_task_retries=0).remote("second"), timeout=TIMEOUT)
    finally:
        muster.kill(actor)


def test_method_options_are_checked_naming_the_value_and_the_fix():
    with pytest.raises(TypeError, match=r"bogus.*Supported: .*max_task_retries"):
        muster.method(bogus=1)
    with pytest.raises(ValueError, match=r"retry_exceptions='yes'.*list of exception classes"):
        muster.method(retry_exceptions="yes")(lambda self: None)
    with pytest.raises(ValueError, match=r"max_task_retries=-2.*-1 for unlimited"):
        muster.method(max_task_retries=-2)(lambda self: None)
