"""Samples of Ray Core's user guide (tasks, actors, objects), ported by their import line, where muster
behaved differently from Ray 2.60; the samples that already behaved the same have no test here.
Real worker processes."""

from __future__ import annotations

import warnings

import pytest
from _task_helpers import TIMEOUT
from test_objects import when_released  # (a remote function: workers import it from there too)

import muster
from muster.exceptions import InvalidArgumentError
from muster.util import list_named_actors


@muster.remote
class Greeter:
    def __init__(self, value):
        self.value = value

    def say_hello(self):
        return self.value


def test_actor_options_ray_refuses_are_refused_before_an_actor_starts():
    # Ray 2.60 raises ValueError for each: get_if_exists needs the name it looks up (also when the name comes
    # from neither the decorator nor a chained options()), a namespace is None or a non-empty string, and
    # concurrency groups are the class's (@ray.remote), not an options() of one actor
    with pytest.raises(InvalidArgumentError, match=r"get_if_exists=True\) needs the actor's name"):
        Greeter.options(get_if_exists=True).remote("x")
    with pytest.raises(InvalidArgumentError, match="get_if_exists"):
        Greeter.options(get_if_exists=True).options(lifetime="detached")
    with pytest.raises(InvalidArgumentError, match="get_if_exists"):
        muster.remote(get_if_exists=True)(type("Plain", (), {}))
    with pytest.raises(InvalidArgumentError, match=r"namespace=''\): a namespace is a non-empty string"):
        Greeter.options(name="g", namespace="").remote("x")
    with pytest.raises(InvalidArgumentError, match=r"get_actor\('g', namespace=''\): a namespace is a non-empty"):
        muster.get_actor("g", namespace="")  # muster looked in the current namespace
    with pytest.raises(InvalidArgumentError, match=r"concurrency_groups=\{'io': 2\}\).*@muster.remote"):
        Greeter.options(concurrency_groups={"io": 2})
    assert "g" not in [a["name"] for a in list_named_actors(all_namespaces=True)]  # it never started
    # the user guide's get_if_exists sample still works: the second options() gets the first actor
    first = Greeter.options(name="g1", get_if_exists=True).remote("Old Greeting")
    second = Greeter.options(name="g1", get_if_exists=True).remote("New Greeting")
    try:
        assert muster.get(second.say_hello.remote(), timeout=TIMEOUT) == "Old Greeting"
    finally:
        muster.kill(first)


def context_of_task():
    return muster.get_runtime_context().get()


@muster.remote
class ContextActor:
    def context(self):
        return muster.get_runtime_context().get()


def test_runtime_context_get_has_rays_keys_in_the_driver_a_task_and_an_actor():
    # Ray's get(): job_id, node_id and namespace everywhere; task_id in a task; task_id and actor_id in an
    # actor (muster gave no namespace, and task_id/actor_id None in the driver)
    driver = muster.get_runtime_context().get()
    assert sorted(driver) == ["job_id", "namespace", "node_id"]
    assert driver["namespace"] == muster.get_runtime_context().namespace
    assert driver["job_id"].hex() == muster.get_runtime_context().get_job_id()
    task = muster.get(muster.remote(context_of_task).remote(), timeout=TIMEOUT)
    assert sorted(task) == ["job_id", "namespace", "node_id", "task_id"]
    actor = ContextActor.remote()
    try:
        in_actor = muster.get(actor.context.remote(), timeout=TIMEOUT)
    finally:
        muster.kill(actor)
    assert sorted(in_actor) == ["actor_id", "job_id", "namespace", "node_id", "task_id"]
    assert in_actor["job_id"] == task["job_id"] == driver["job_id"]
    assert in_actor["task_id"] != task["task_id"]


@muster.remote
class Streams:
    def one(self):
        return 1

    def count(self, n):
        yield from range(n)


def test_a_stream_of_a_method_that_returns_is_refused_as_ray_refuses_it():
    # Ray 2.60: num_returns="streaming"/"dynamic" on a method that is no generator is a ValueError, in
    # @ray.method and in .options(); muster accepted both, and the caller got one value as a stream
    with pytest.raises(InvalidArgumentError, match=r"Streams\.one\.options\(\): num_returns='streaming' is for gen"):
        actor = Streams.remote()
        try:
            actor.one.options(num_returns="streaming")
        finally:
            muster.kill(actor)
    with pytest.raises(InvalidArgumentError, match=r"@muster.method on .*Bad.m: num_returns='streaming' is for gen"):
        class Bad:
            @muster.method(num_returns="streaming")
            def m(self):
                return 1
    actor = Streams.remote()  # a generator method streams as before
    try:
        assert [muster.get(r, timeout=TIMEOUT) for r in actor.count.options(num_returns="streaming").remote(3)] \
            == [0, 1, 2]
    finally:
        muster.kill(actor)


def countdown(n):
    yield from range(n, 0, -1)


def test_num_returns_dynamic_warns_it_is_deprecated_as_ray_does():
    # Ray 2.60 warns (RayDeprecationWarning, a DeprecationWarning) in @ray.remote, .options() and @ray.method,
    # naming num_returns='streaming' and the caller's line; the task still runs as before
    with pytest.warns(DeprecationWarning, match="num_returns='dynamic' is deprecated.*'streaming'") as caught:
        ref = muster.remote(num_returns="dynamic")(countdown).remote(3)
    assert caught[0].filename == __file__
    assert [muster.get(r, timeout=TIMEOUT) for r in muster.get(ref, timeout=TIMEOUT)] == [3, 2, 1]
    with pytest.warns(DeprecationWarning, match="num_returns='dynamic' is deprecated"):
        muster.remote(countdown).options(num_returns="dynamic")
    with pytest.warns(DeprecationWarning, match="num_returns='dynamic' is deprecated"):
        muster.method(num_returns="dynamic")(countdown)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        muster.remote(num_returns="streaming")(countdown)  # the current spelling does not warn


@muster.remote
class Counter:
    def __init__(self):
        self.value = 0

    def add(self, addition):
        self.value += addition
        return self.value


@muster.remote
def add_and_wait(counter, value):
    return muster.get(counter.add.remote(value))


def test_a_call_waiting_for_its_argument_holds_back_only_its_submitters_later_calls(tmp_path):
    # "Actor Task Execution Order": calls of one submitter run in the order it made them; a call whose argument
    # is not ready does not hold back another submitter's calls. muster held every later call, so a call whose
    # argument is a task that calls the actor and waits for it never ran (Ray 2.60 returns 4 here)
    counter = Counter.remote()
    try:
        assert muster.get(counter.add.remote(add_and_wait.remote(counter, 2)), timeout=TIMEOUT) == 4
    finally:
        muster.kill(counter)
    counter = Counter.remote()
    gate = tmp_path / "go"
    try:
        first = counter.add.remote(when_released.remote(str(gate), 1))  # waits for its argument
        later = counter.add.remote(10)  # the same submitter's: after it
        assert muster.get(add_and_wait.remote(counter, 2), timeout=TIMEOUT) == 2  # another submitter goes ahead
        assert muster.wait([later], timeout=0.5)[0] == []
        gate.touch()
        assert muster.get([first, later], timeout=TIMEOUT) == [3, 13]
    finally:
        muster.kill(counter)


@muster.remote
class AsyncCounter:
    def __init__(self):
        self.value = 0

    async def add(self, addition):
        self.value += addition
        return self.value


@pytest.mark.parametrize("make", [lambda: AsyncCounter.remote(), lambda: Counter.options(max_concurrency=2).remote(),
                                  lambda: Counter.options(allow_out_of_order_execution=True).remote()],
                         ids=["async", "threaded", "allow_out_of_order_execution"])
def test_an_actor_that_runs_calls_out_of_order_does_not_hold_a_call_behind_an_earlier_ones_argument(tmp_path, make):
    # Ray 2.60: allow_out_of_order_execution (the default of async and threaded actors) lets a later call of the
    # same submitter run before an earlier one that waits for its argument; muster ignored the option
    counter, gate = make(), tmp_path / "go"
    try:
        first = counter.add.remote(when_released.remote(str(gate), 1))
        assert muster.get(counter.add.remote(2), timeout=TIMEOUT) == 2
        gate.touch()
        assert muster.get(first, timeout=TIMEOUT) == 3
    finally:
        muster.kill(counter)


def test_allow_out_of_order_execution_false_is_refused_where_ray_refuses_it():
    with pytest.raises(InvalidArgumentError, match=r"allow_out_of_order_execution=False\): an async or threaded"):
        AsyncCounter.options(allow_out_of_order_execution=False)
    with pytest.raises(InvalidArgumentError, match=r"allow_out_of_order_execution=False\): an async or threaded"):
        Counter.options(max_concurrency=4, allow_out_of_order_execution=False)
    with pytest.raises(InvalidArgumentError, match=r"allow_out_of_order_execution='yes'\): use True or False"):
        Counter.options(allow_out_of_order_execution="yes")
