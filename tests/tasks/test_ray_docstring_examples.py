"""The examples in Ray 2.60's docstrings (Ray Core's util, runtime context, actors; Tune's searchers,
schedulers, stoppers, trainables) run unchanged but for the imports (``import muster as ray``).

The examples are read from the installed Ray at test time (skipped without Ray) and run in one
subprocess, each on a fresh engine (tests/tasks/_ray_docstrings.py)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

import muster
from _ray_docstrings import ray_root

EXAMPLES = [
    # Ray Core
    "ray/util/actor_pool.py::ActorPool",
    "ray/util/actor_pool.py::ActorPool.map",
    "ray/util/actor_pool.py::ActorPool.map_unordered",
    "ray/util/actor_pool.py::ActorPool.submit",
    "ray/util/actor_pool.py::ActorPool.has_next",
    "ray/util/actor_pool.py::ActorPool.get_next",
    "ray/util/actor_pool.py::ActorPool.get_next_unordered",
    "ray/util/actor_pool.py::ActorPool.has_free",
    "ray/util/actor_pool.py::ActorPool.pop_idle",
    "ray/util/actor_pool.py::ActorPool.push",
    "ray/util/queue.py::Queue",
    "ray/util/placement_group.py::PlacementGroup.ready",
    "ray/util/placement_group.py::get_current_placement_group",
    "ray/util/metrics.py::Metric.info",
    "ray/util/metrics.py::Metric.set_default_tags",
    "ray/runtime_context.py::RuntimeContext.get_task_id",
    "ray/runtime_context.py::RuntimeContext.get_task_name",  # a task's .options(name=...) is its task name
    "ray/runtime_context.py::RuntimeContext.get_task_function_name",
    "ray/runtime_context.py::RuntimeContext.get_session_name",  # was an AttributeError
    "ray/runtime_context.py::get_runtime_context",
    "ray/actor.py::ActorClass.options",
    "ray/remote_function.py::RemoteFunction.options",
    "ray/job_config.py::JobConfig.set_metadata",  # muster.job_config did not exist
    "ray/job_config.py::JobConfig.from_json",
    # Tune
    "ray/tune/search/sample.py::sample_from",
    "ray/tune/search/variant_generator.py::grid_search",
    "ray/tune/search/basic_variant.py::BasicVariantGenerator",
    "ray/tune/stopper/stopper.py::Stopper",
    "ray/tune/stopper/stopper.py::CombinedStopper",
    "ray/tune/trainable/trainable.py::Trainable.save_checkpoint",
    "ray/tune/trainable/trainable.py::Trainable.load_checkpoint",
    "ray/tune/trainable/trainable.py::Trainable.trial_name",
    "ray/tune/callback.py::Callback.get_state",
]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, dict]:
    if ray_root() is None:
        pytest.skip("Ray is not installed: the examples are read from its source")
    cwd = tmp_path_factory.mktemp("ray-docstrings")
    env = {**os.environ, "MUSTER_STORAGE_PATH": str(cwd / "results"), "MUSTER_RUN_STORE": "0",
           "PYTHONPATH": os.pathsep.join([str(pathlib.Path(muster.__file__).parents[1]),
                                          os.environ.get("PYTHONPATH", "")])}
    env.pop("MUSTER_ADDRESS", None)
    env.pop("RAY_ADDRESS", None)
    script = pathlib.Path(__file__).with_name("_ray_docstrings.py")
    out = subprocess.run([sys.executable, str(script), *EXAMPLES], capture_output=True, text=True, timeout=280,
                         env=env, cwd=cwd)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert rows, out.stdout[-2000:] + out.stderr[-3000:]
    return {row["id"]: row for row in rows}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("example", EXAMPLES)
def test_rays_docstring_example_runs_under_muster(outcomes, example):
    assert example in outcomes, f"{example} never ran (the runner stopped before it)"
    assert outcomes[example]["ok"], outcomes[example]["error"]


@muster.remote
def _names():
    ctx = muster.get_runtime_context()
    return ctx.get_session_name(), ctx.get_task_name(), ctx.get_task_function_name()


@muster.remote
class _Reporter:
    def session(self):
        return muster.get_runtime_context().get_session_name()


def test_session_name_is_one_per_init_in_the_driver_tasks_and_actors():
    """Ray's get_session_name(): session_<date>_<time>_<microseconds>_<pid>, the same in every process of
    one session (it was an AttributeError)."""
    name = muster.get_runtime_context().get_session_name()
    assert re.fullmatch(r"session_\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d_\d{6}_\d+", name), name
    reporter = _Reporter.remote()
    try:
        assert muster.get([_names.remote(), reporter.session.remote()])[0][0] == name
        assert muster.get(reporter.session.remote()) == name
    finally:
        muster.kill(reporter)


def test_a_tasks_name_option_is_its_task_name():
    """f.options(name="x"): get_task_name() is "x" in the task (it stayed the function's name), the
    function name is unchanged."""
    _, default, function = muster.get(_names.remote())
    assert default == "_names" and function.endswith("._names")
    assert muster.get(_names.options(name="task_name").remote())[1:] == ("task_name", function)
