"""Ray Core docs' "Runtime environments" and "Using Namespaces" samples, where muster differed from Ray 2.60.

Real worker processes on the session engine; each test states what Ray does.
"""

from __future__ import annotations

import os

import pytest

import muster
from muster.exceptions import InvalidTypeError


@muster.remote
def _env(name):
    return os.environ.get(name)


@muster.remote
class _Env:
    def get(self, name):
        return os.environ.get(name)


@pytest.mark.parametrize("env_vars, bad", [({"FOO": 1}, "{'FOO': 1}"), (["FOO"], "['FOO']")])
def test_env_vars_that_are_not_str_to_str_fail_at_options_naming_them(env_vars, bad):
    # Ray 2.60: TypeError "runtime_env['env_vars'] must be of type Dict[str, str]" at .options(); muster ran the
    # task and failed it inside the worker with os.environ's bare "str expected, not int" (or a ValueError).
    with pytest.raises(InvalidTypeError, match=r"runtime_env\['env_vars'\].*" + bad.replace("[", r"\[")):
        _env.options(runtime_env={"env_vars": env_vars}).remote("FOO")
    with pytest.raises(InvalidTypeError, match=r"runtime_env\['env_vars'\]"):
        _Env.options(runtime_env={"env_vars": env_vars}).remote()
    # the fix the message gives works
    assert muster.get(_env.options(runtime_env={"env_vars": {"FOO": "1"}}).remote("FOO")) == "1"


@muster.remote
class _Where:
    def namespace(self):
        return muster.get_runtime_context().namespace


def test_runtime_context_namespace_in_an_actor_named_into_another_namespace_is_the_jobs():
    # Ray 2.60: get_runtime_context().namespace is the job's namespace in every task and actor, also one made
    # with .options(namespace="fruits"); muster gave "fruits" there.
    job = muster.get_runtime_context().namespace
    actor = _Where.options(name="fault_env_watermelon", namespace="fault_env_fruits").remote()
    try:
        assert muster.get(actor.namespace.remote()) == job != "fault_env_fruits"
        assert muster.get(muster.get_actor("fault_env_watermelon", namespace="fault_env_fruits")
                          .namespace.remote()) == job
    finally:
        muster.kill(actor)
