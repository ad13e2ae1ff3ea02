"""Config objects: defaults, and a ValueError naming the field and the bad value."""

from __future__ import annotations

import pytest

from muster.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from muster.train.torch import TorchConfig


@pytest.mark.parametrize(
    "make, field, shown",
    [
        (lambda: ScalingConfig(num_workers=-3), "num_workers", "-3"),
        (lambda: ScalingConfig(num_workers=2.5), "num_workers", "2.5"),
        (lambda: ScalingConfig(num_workers=True), "num_workers", "True"),
        (lambda: ScalingConfig(use_gpu="yes"), "use_gpu", "'yes'"),
        (lambda: ScalingConfig(placement_strategy="X"), "placement_strategy", "'X'"),
        (lambda: ScalingConfig(resources_per_worker=[1]), "resources_per_worker", "[1]"),
        (lambda: ScalingConfig(resources_per_worker={"CPU": -1}), "resources_per_worker", "-1"),
        (lambda: ScalingConfig(use_gpu=True, resources_per_worker={"GPU": 0}), "use_gpu", "GPU"),
        # the cluster tutorial's `use_gpu=True,  # False if CPU-only` with its {"GPU": 1} left in
        (lambda: ScalingConfig(use_gpu=False, resources_per_worker={"GPU": 1}), "use_gpu=True", "{'GPU': 1}"),
        (lambda: CheckpointConfig(num_to_keep=0), "num_to_keep", "0"),
        (lambda: CheckpointConfig(num_to_keep=-1), "num_to_keep", "-1"),
        (lambda: CheckpointConfig(num_to_keep=1.5), "num_to_keep", "1.5"),
        (lambda: CheckpointConfig(checkpoint_score_order="up"), "checkpoint_score_order", "'up'"),
        (lambda: FailureConfig(max_failures=-2), "max_failures", "-2"),
        (lambda: FailureConfig(max_failures=1.0), "max_failures", "1.0"),
        (lambda: RunConfig(name="a/b"), "name", "'a/b'"),
        (lambda: RunConfig(name=""), "name", "''"),
        (lambda: RunConfig(name=".hidden"), "name", "'.hidden'"),
        (lambda: RunConfig(storage_path=""), "storage_path", "''"),
        (lambda: RunConfig(verbose=5), "verbose", "5"),
        (lambda: RunConfig(worker_timeout_s=0), "worker_timeout_s", "0"),
        (lambda: RunConfig(worker_timeout_s=-1.5), "worker_timeout_s", "-1.5"),
        (lambda: RunConfig(upload_drain_s=-1), "upload_drain_s", "-1"),
        (lambda: RunConfig(upload_drain_s="60"), "upload_drain_s", "'60'"),
        (lambda: TorchConfig(backend="tcp"), "backend", "'tcp'"),
        (lambda: TorchConfig(init_method="file"), "init_method", "'file'"),
        (lambda: TorchConfig(timeout_s=0), "timeout_s", "0"),
    ],
)
def test_bad_value_names_field_and_value(make, field, shown):
    with pytest.raises(ValueError) as info:
        make()
    message = str(info.value)
    assert field in message
    assert shown in message


def test_configs_are_keyword_only():
    with pytest.raises(TypeError):
        ScalingConfig(2)  # type: ignore[misc]
    with pytest.raises(TypeError):
        RunConfig("name")  # type: ignore[misc]


@pytest.mark.parametrize("strategy", ["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"])
def test_every_placement_strategy_is_accepted(strategy):
    assert ScalingConfig(num_workers=2, placement_strategy=strategy).placement_strategy == strategy


def test_scaling_defaults_and_worker_resources():
    cfg = ScalingConfig()
    assert cfg.num_workers == 1 and cfg.use_gpu is False
    assert cfg.worker_resources == {"CPU": 1.0}
    gpu = ScalingConfig(num_workers=3, use_gpu=True)
    assert gpu.worker_resources == {"GPU": 1.0}  # as Ray's: a GPU worker holds no CPU unless asked
    assert gpu.total_resources == {"GPU": 3.0}
    assert ScalingConfig(use_gpu=True, resources_per_worker={"CPU": 4}).worker_resources == {"CPU": 4.0, "GPU": 1.0}
    custom = ScalingConfig(num_workers=2, resources_per_worker={"CPU": 2, "accel": 0.5})
    assert custom.worker_resources == {"CPU": 2.0, "accel": 0.5}
    assert custom.total_resources == {"CPU": 4.0, "accel": 1.0}


def test_per_worker_amounts_read_as_given():
    """Ray's properties return the amounts as given (2, not 2.0), and Ray has additional_resources_per_worker."""
    custom = ScalingConfig(num_workers=2, resources_per_worker={"CPU": 2, "accel": 0.5, "unused": 0})
    assert repr(custom.num_cpus_per_worker) == "2" and repr(custom.num_gpus_per_worker) == "0"
    assert custom.additional_resources_per_worker == {"accel": 0.5}
    assert repr(ScalingConfig().num_cpus_per_worker) == "1" and ScalingConfig().additional_resources_per_worker == {}
    assert repr(ScalingConfig(resources_per_worker={"CPU": 1.5}).num_cpus_per_worker) == "1.5"
    gpu = ScalingConfig(use_gpu=True)
    assert (repr(gpu.num_cpus_per_worker), repr(gpu.num_gpus_per_worker)) == ("0", "1")


def test_run_config_fills_sub_configs():
    rc = RunConfig(name="mnist_ddp.v2=a+b-c")
    assert isinstance(rc.checkpoint_config, CheckpointConfig)
    assert isinstance(rc.failure_config, FailureConfig)
    assert rc.callbacks == []
    assert rc.checkpoint_config.num_to_keep is None
    assert rc.checkpoint_config.checkpoint_score_order == "max"
    assert rc.failure_config.max_failures == 0


def test_run_config_default_storage_path(monkeypatch, tmp_path):
    monkeypatch.setenv("MUSTER_STORAGE_PATH", str(tmp_path))
    assert RunConfig().resolved_storage_path() == str(tmp_path)
    assert RunConfig(storage_path="s3://b/p").resolved_storage_path() == "s3://b/p"
    monkeypatch.delenv("MUSTER_STORAGE_PATH")
    assert RunConfig().resolved_storage_path().endswith("muster_results")


def test_failure_config_fail_fast_and_forever():
    assert FailureConfig(max_failures=5, fail_fast=True).max_failures == 0
    assert FailureConfig(max_failures=-1).max_failures == -1
    assert FailureConfig(max_failures=3).max_failures == 3


def test_good_values_are_kept():
    assert CheckpointConfig(num_to_keep=1, checkpoint_score_order="min").num_to_keep == 1
    assert RunConfig(verbose=0).verbose == 0 and RunConfig(verbose=2).verbose == 2
    assert RunConfig(worker_timeout_s=0.5).worker_timeout_s == 0.5
    tc = TorchConfig(backend="gloo", init_method="tcp", timeout_s=5)
    assert (tc.backend, tc.init_method, tc.timeout_s) == ("gloo", "tcp", 5)


@pytest.mark.parametrize("field, value", [("checkpoint_frequency", 2), ("checkpoint_at_end", True)])
def test_class_trainable_checkpoint_settings_are_refused_naming_the_fix(field, value):
    """Ray Train V2 refuses these two (a training function checkpoints through report()); Ray's
    Train docs' tuner snippet passes checkpoint_frequency=2. Before, a bare TypeError named no fix."""
    with pytest.raises(ValueError, match=rf"{field}={value!r}.*report\(\).*muster\.tune\.CheckpointConfig\({field}"):
        CheckpointConfig(**{field: value})
    from muster import tune

    kept = tune.CheckpointConfig(**{field: value}, num_to_keep=2)  # a class trainable's: kept
    assert getattr(kept, field) == value and kept.num_to_keep == 2


@pytest.mark.parametrize("space", ["grid", "choice"])
def test_a_search_space_for_num_workers_names_the_function_trainable(space):
    """Ray's Train docs tune ScalingConfig(num_workers=tune.grid_search([1, 2])) in Tuner(trainer) (V1);
    before, the error said only that num_workers must be an integer."""
    from muster import tune

    value = tune.grid_search([1, 2]) if space == "grid" else tune.choice([1, 2])
    with pytest.raises(ValueError,
                       match=r"num_workers must be an integer.*function trainable.*config\['num_workers'\]"):
        ScalingConfig(num_workers=value)
    with pytest.raises(ValueError, match=r"num_workers must be an integer >= 1, 0 to run the training function in "
                                         r"this process \(local mode\), or \(min, max\) for an elastic run\.$"):
        ScalingConfig(num_workers=-1)


def test_num_workers_zero_is_rays_local_mode():
    """Ray Train V2 runs ScalingConfig(num_workers=0) in the driver (tests/train/test_local_mode.py); a
    negative count or a bool is still refused, above."""
    assert ScalingConfig(num_workers=0).num_workers == 0


def test_rays_tpu_label_and_elastic_monitor_fields():
    """Ray 2.60's ScalingConfig fields: their defaults are taken; TPU values muster cannot honour are refused."""
    from muster.exceptions import InvalidArgumentError, InvalidTypeError

    cfg = ScalingConfig(num_workers=2, use_tpu=False, topology=None, label_selector=None,
                        elastic_resize_monitor_interval_s=30.0)
    assert (cfg.use_tpu, cfg.topology, cfg.label_selector, cfg.elastic_resize_monitor_interval_s) == \
        (False, None, None, 30.0)
    assert ScalingConfig(num_workers=2, label_selector=[{"a": "1"}, {"a": "2"}]).label_selectors(2) == \
        [{"a": "1"}, {"a": "2"}]
    with pytest.raises(InvalidArgumentError, match=r"use_tpu=True.*not TPUs.*Drop use_tpu"):
        ScalingConfig(use_tpu=True)
    with pytest.raises(InvalidArgumentError, match=r"topology='2x2x2'.*Drop topology"):
        ScalingConfig(topology="2x2x2")
    with pytest.raises(InvalidArgumentError, match=r"label_selector=<list of 1>, num_workers=2.*needs 2"):
        ScalingConfig(num_workers=2, label_selector=[{"a": "b"}])
    with pytest.raises(InvalidTypeError, match=r"label_selector='gpu'"):
        ScalingConfig(label_selector="gpu")
    with pytest.raises(InvalidArgumentError, match=r"elastic_resize_monitor_interval_s=0"):
        ScalingConfig(elastic_resize_monitor_interval_s=0)
