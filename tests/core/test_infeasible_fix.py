"""A request that can never fit fails at once, and its fix names the knob of the API that made it.

One shared message builder (``muster.core.resources.ensure_feasible``) serves Train, tasks, actors, placement
groups, Data and Serve; each caller says where its user asks for resources, so a Serve user is not told to
lower ``num_workers``.
"""

from __future__ import annotations

import warnings

import pytest

import muster
from muster.exceptions import ResourcesUnavailableError


def _task(**options):
    @muster.remote(**options)
    def f() -> int:
        return 1

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the submission warns with the same message; get() raises it
        ref = f.remote()
    muster.get(ref, timeout=10)


def _actor(**options):
    @muster.remote(**options)
    class A:
        pass

    A.remote()


def _placement_group(**options):
    from muster.util.placement_group import placement_group

    bundle = {"CPU": options.get("num_cpus", 1), "GPU": options.get("num_gpus", 0)}
    muster.get(placement_group([bundle]).ready(), timeout=10)


def _data(**options):
    import muster.data as data

    data.range(4).map_batches(lambda b: b, **options).take_all()


def _serve(**options):
    from muster import serve

    @serve.deployment(ray_actor_options=options)
    class D:
        def __call__(self, request) -> str:
            return "never"

    try:
        serve.run(D.bind(), name="infeasible", route_prefix="/infeasible")
    finally:
        serve.shutdown()


def _train(**options):
    from muster.train import RunConfig, ScalingConfig
    from muster.train.torch import TorchTrainer

    scaling = ScalingConfig(num_workers=2, use_gpu=bool(options.get("num_gpus")),
                            resources_per_worker={"CPU": options.get("num_cpus", 1)})
    TorchTrainer(lambda: None, scaling_config=scaling, run_config=RunConfig(name="too-big", verbose=0)).fit()


# each entry point, who the message names as asking, its own words for asking for less, and for asking for no GPU
CALLERS = {
    "task": (_task, "task f: ", "@muster.remote(...) or .options(...)", "drop num_gpus="),
    "actor": (_actor, "actor A: ", "@muster.remote(...) or .options(...)", "drop num_gpus="),
    "placement group": (_placement_group, "placement group bundle 0: ", "smaller bundles in placement_group(",
                        "drop 'GPU' from its bundles"),
    "data": (_data, "map_batches(<lambda>", "its num_cpus= / num_gpus=", "drop num_gpus="),
    "serve": (_serve, "serve deployment 'D' of app 'infeasible': ", "the deployment's ray_actor_options=",
              "ray_actor_options num_gpus"),
    # Train's named no one: "cannot ever schedule 2 x {CPU=64}" (which trainer? which run?)
    "train": (_train, "TorchTrainer run 'too-big' with ScalingConfig(num_workers=2, ",
              "ScalingConfig(num_workers=..., resources_per_worker=", "ScalingConfig(use_gpu=False)"),
}


@pytest.mark.parametrize("caller", list(CALLERS))
def test_too_many_cpus_fails_at_once_naming_the_callers_own_knob(caller):
    run, subject, knob, _ = CALLERS[caller]
    total = muster.cluster_resources()["CPU"]
    with pytest.raises(ResourcesUnavailableError) as info:
        run(num_cpus=64)
    message = str(info.value)
    assert message.startswith(subject), message
    assert "CPU=64" in message and f"CPU={total:g} in total" in message, message
    assert f"ask for at most {total:g} CPUs" in message and knob in message, message
    assert "muster.init(num_cpus=N)" in message, message
    if caller != "train":
        assert "num_workers" not in message and "ScalingConfig" not in message, message


@pytest.mark.parametrize("caller", list(CALLERS))
def test_a_gpu_on_a_machine_without_one_names_the_callers_way_to_ask_for_none(caller):
    run, subject, _, no_gpu = CALLERS[caller]
    assert not muster.cluster_resources().get("GPU")
    with pytest.raises(ResourcesUnavailableError) as info:
        run(num_gpus=1)
    message = str(info.value)
    assert message.startswith(subject), message
    assert "no GPU visible to muster" in message and no_gpu in message, message
    if caller != "train":
        assert "ScalingConfig" not in message, message


def test_the_train_fix_for_no_gpu_also_drops_the_gpu_from_resources_per_worker():
    """The seed tutorial's ``ScalingConfig(use_gpu=True, resources_per_worker={"GPU": 1})`` on a machine without a
    GPU: the fix said only "set ScalingConfig(use_gpu=False)", which with that resources_per_worker is refused
    next ("GPUs asked for a run that will not use them")."""
    from muster.exceptions import InvalidArgumentError
    from muster.train import RunConfig, ScalingConfig
    from muster.train.torch import TorchTrainer

    assert not muster.cluster_resources().get("GPU")
    scaling = ScalingConfig(num_workers=2, use_gpu=True, resources_per_worker={"GPU": 1})
    with pytest.raises(ResourcesUnavailableError) as info:
        TorchTrainer(lambda: None, scaling_config=scaling, run_config=RunConfig(verbose=0)).fit()
    message = str(info.value)
    assert "set ScalingConfig(use_gpu=False), with no 'GPU' in its resources_per_worker" in message, message
    with pytest.raises(InvalidArgumentError, match="drop 'GPU' from resources_per_worker"):
        ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"GPU": 1})  # half the fix is not enough
    ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={})  # the whole fix is


def test_the_fix_counts_in_the_singular_for_one():
    from muster.core import resources as res

    with pytest.raises(ResourcesUnavailableError) as info:
        res.ensure_feasible({"CPU": 1, "GPU": 2}, 1, {"CPU": 4, "GPU": 1}, what="serve deployment 'D'")
    assert "ask for at most 1 GPU with" in str(info.value), str(info.value)
