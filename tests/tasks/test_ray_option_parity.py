"""Every option Ray 2.60's ``@ray.remote`` / ``.options(...)`` takes is honoured by muster, or refused or warned
about with a message naming it: none is dropped without a word.

The lists are Ray 2.60's (``ray/_common/ray_option_utils.py``: ``_common_options``, ``_task_only_options``,
``_actor_only_options``; ``ray/actor.py``: ``method``'s ``valid_kwargs`` and ``ActorMethod._remote``'s keywords,
which ``actor.method.options(...)`` takes), written out here so the test runs without Ray.
"""

from __future__ import annotations

import warnings

import pytest

import muster

RAY_COMMON = ["label_selector", "fallback_strategy", "accelerator_type", "memory", "name", "num_cpus", "num_gpus",
              "object_store_memory", "placement_group", "placement_group_bundle_index",
              "placement_group_capture_child_tasks", "resources", "runtime_env", "scheduling_strategy",
              "enable_task_events", "_labels"]
RAY_TASK_ONLY = ["max_calls", "max_retries", "num_returns", "retry_exceptions", "_generator_backpressure_num_objects",
                 "_num_objects_per_yield"]
RAY_ACTOR_ONLY = ["concurrency_groups", "enable_tensor_transport", "lifetime", "max_concurrency", "max_restarts",
                  "max_task_retries", "max_pending_calls", "namespace", "get_if_exists", "allow_out_of_order_execution",
                  "_actor_generator_backpressure_num_objects"]
RAY_METHOD = ["num_returns", "concurrency_group", "max_task_retries", "retry_exceptions",
              "_generator_backpressure_num_objects", "_num_objects_per_yield", "enable_task_events", "tensor_transport"]
RAY_METHOD_CALL = ["name", "num_returns", "max_task_retries", "retry_exceptions", "concurrency_group",
                   "_generator_backpressure_num_objects", "_num_objects_per_yield", "enable_task_events",
                   "tensor_transport", "_labels"]

# Options whose value here makes muster do something a test elsewhere checks (tests/tasks/test_remote*.py,
# test_placement_groups.py): the value is honoured.
HONOURED = {"memory": None, "name": "n", "num_cpus": 1, "num_gpus": 0, "resources": {}, "runtime_env": {},
            "scheduling_strategy": "DEFAULT", "placement_group": "default", "placement_group_bundle_index": -1,
            "placement_group_capture_child_tasks": False, "max_calls": 0, "max_retries": 0, "num_returns": 1,
            "retry_exceptions": False, "concurrency_groups": {"io": 1}, "lifetime": None, "max_concurrency": 1,
            "max_restarts": 0, "max_task_retries": 0, "max_pending_calls": -1, "namespace": "ns",
            "get_if_exists": False, "allow_out_of_order_execution": False,
            # unused, as in Ray: no label_selector, so the first choice (any node) holds
            "fallback_strategy": [{"label_selector": {"ray.io/accelerator-type": "H100"}}],
            # actor methods' (tests/tasks/test_actor_method_options.py, test_concurrency_groups.py)
            "concurrency_group": "io"}
# Options muster takes and ignores: a value other than Ray's default warns, naming the option.
IGNORED = {"accelerator_type": "A100", "object_store_memory": 1 << 20, "enable_task_events": False,
           "_labels": {"team": "a"}, "_generator_backpressure_num_objects": 4, "_num_objects_per_yield": 2,
           "enable_tensor_transport": True, "_actor_generator_backpressure_num_objects": 4, "tensor_transport": "nccl"}


def _f():
    return 1


class _A:
    pass


def _declare(option: str, value, actor: bool):
    target = _A if actor else _f
    return muster.remote(**{option: value})(target)


@pytest.mark.parametrize("option,actor", [(o, False) for o in RAY_COMMON + RAY_TASK_ONLY]
                         + [(o, True) for o in RAY_COMMON + RAY_ACTOR_ONLY])
def test_no_ray_option_is_dropped_silently(option, actor):
    if option in HONOURED:
        _declare(option, HONOURED[option], actor)
    elif option in IGNORED:
        with pytest.warns(UserWarning, match=option):
            _declare(option, IGNORED[option], actor)
    elif option == "label_selector":  # the node has no such label: refused, named
        with pytest.raises(ValueError, match="label_selector"):
            _declare(option, {"ray.io/accelerator-type": "H100"}, actor)
    else:
        pytest.fail(f"Ray 2.60's option {option} is in no list of this test: say what muster does with it")


class _M:
    def m(self):
        return 1


def _declare_method(option: str, value):
    def m(self):
        return 1

    return muster.method(**{option: value})(m)


def _check_method_option(declare, option: str, per_call: bool):
    if option in HONOURED:
        declare(option, HONOURED[option])
    elif option == "_num_objects_per_yield" and per_call:  # the decorator's only: refused per call, as in Ray
        with pytest.raises(ValueError, match=r"_num_objects_per_yield=2 cannot be set per call.*@muster.method"):
            declare(option, IGNORED[option])
    elif option in IGNORED:
        with pytest.warns(UserWarning, match=option):
            declare(option, IGNORED[option])
    else:
        pytest.fail(f"Ray 2.60's method option {option} is in no list of this test: say what muster does with it")


@pytest.mark.parametrize("option", RAY_METHOD)
def test_no_ray_method_option_is_dropped_silently(option):
    _check_method_option(_declare_method, option, per_call=False)
    with pytest.raises(TypeError, match=r"unknown option\(s\) bogus\. Supported: .*max_task_retries"):
        _declare_method("bogus", 1)


def test_no_ray_method_call_option_is_dropped_silently():
    handle = muster.remote(_M).remote()  # .options() needs no answer from it: one actor serves every option
    try:
        for option in RAY_METHOD_CALL:
            _check_method_option(lambda o, v: handle.m.options(**{o: v}), option, per_call=True)
        with pytest.raises(TypeError, match=r"unknown option\(s\) bogus\. Supported: .*max_task_retries"):
            handle.m.options(bogus=1)
    finally:
        muster.kill(handle)


def test_a_label_selector_the_node_satisfies_runs_the_work():
    node = muster.get_runtime_context().get_node_id()
    ok = muster.remote(label_selector={"ray.io/node-id": node})(_f)
    assert muster.get(ok.remote(), timeout=60) == 1
    other = {"ray.io/node-id": "!in(a, b)"}  # Ray's negated set: the node is neither
    fallback = muster.remote(label_selector={"ray.io/node-id": "elsewhere"}, fallback_strategy=[
        {"label_selector": other}])(_f)  # the first choice matches no node; the fallback does
    assert muster.get(fallback.remote(), timeout=60) == 1
    with pytest.raises(ValueError, match="fallback_strategy"):
        muster.remote(fallback_strategy=[{"num_cpus": 1}])(_f)


def test_ray_defaults_of_ignored_options_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        muster.remote(enable_task_events=True, accelerator_type=None, _labels=None)(_f)


def test_placement_group_takes_ray_2_60s_keywords():
    from muster.util.placement_group import placement_group, remove_placement_group

    node = muster.get_runtime_context().get_node_id()
    pg = placement_group([{"CPU": 1}], bundle_label_selector=[{"ray.io/node-id": node}],
                         topology_strategy={"ray.io/node-id": "STRICT_PACK"}, _soft_target_node_id=node)
    assert pg.wait(60) and pg.strategy == "STRICT_PACK"
    remove_placement_group(pg)
    bad = [({"bundle_label_selector": [{"ray.io/accelerator-type": "H100"}]}, "bundle_label_selector"),
           ({"bundle_label_selector": [{}, {}]}, "per bundle"),
           ({"topology_strategy": {"ray.io/gpu-domain": "STRICT_PACK"}}, "topology"),
           ({"topology_strategy": {"ray.io/node-id": "PACK"}, "strategy": "PACK"}, "one of them"),
           ({"_soft_target_node_id": node}, "STRICT_PACK"),
           ({"bogus": 1}, "bogus")]  # no keyword is taken and dropped
    for keywords, named in bad:
        with pytest.raises((ValueError, TypeError), match=named):
            placement_group([{"CPU": 1}], **keywords)


def test_an_empty_actor_name_is_refused_as_ray_refuses_it():
    """Ray: "Actor name cannot be an empty string"; muster made an actor no one could look up."""

    @muster.remote
    class Named:
        pass

    for bad in ("", 7):
        with pytest.raises(muster.exceptions.InvalidArgumentError, match=f"Named.options\\(name={bad!r}\\)"):
            Named.options(name=bad)
