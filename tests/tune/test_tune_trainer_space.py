"""A trainer's param_space: top-level keys that name trainer arguments override them per trial, as in Ray."""

from __future__ import annotations

import os

import pytest

import muster.data as md
from muster import train, tune
from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.train import Checkpoint, ScalingConfig
from muster.train.torch import TorchTrainer


def _sum_shard(config):
    rows = [r["v"] for r in train.get_dataset_shard("train").iter_rows()]
    extra = train.get_dataset_shard("extra")
    train.report({
        "total": sum(rows), "n": len(rows), "k": config["k"],
        "extra": sum(r["v"] for r in extra.iter_rows()),
        "workers": train.get_context().get_world_size(),
    })


def test_trainer_datasets_and_scaling_come_from_param_space(storage):
    own = md.from_items([{"v": 1000}] * 2)
    first, second = md.from_items([{"v": 1}] * 4), md.from_items([{"v": 10}] * 4)
    trainer = TorchTrainer(
        _sum_shard, train_loop_config={"k": 7},
        scaling_config=ScalingConfig(num_workers=2),
        datasets={"train": own, "extra": md.from_items([{"v": 5}])},
    )
    grid = tune.Tuner(
        trainer,
        param_space={"datasets": {"train": tune.grid_search([first, second])},
                     "scaling_config": {"num_workers": 1}},
        run_config=tune.RunConfig(name="ds", storage_path=storage),
    ).fit()
    assert grid.num_errors == 0, grid.errors
    # one worker reads the whole of its trial's dataset; the trainer's own "train" is replaced,
    # its other datasets are kept, and train_loop_config is the trainer's
    got = sorted((r.metrics["total"], r.metrics["n"]) for r in grid)
    assert got == [(4, 4), (40, 4)]
    assert all(r.metrics["extra"] == 5 and r.metrics["k"] == 7 and r.metrics["workers"] == 1 for r in grid)


def _read_start(config):
    ckpt = train.get_checkpoint()
    start = None
    if ckpt:
        with ckpt.as_directory() as d:
            start = open(os.path.join(d, "start")).read()
    train.report({"start": start, "opt": config["opt"], "lr": config["lr"]})


def test_trainer_checkpoint_and_nested_loop_config(storage, tmp_path):
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "start").write_text("from-trainer")
    trainer = TorchTrainer(
        _read_start, train_loop_config={"opt": {"name": "sgd", "momentum": 0.9}, "lr": 0.1},
        scaling_config=ScalingConfig(num_workers=1),
        resume_from_checkpoint=Checkpoint.from_directory(str(tmp_path / "ck")),
    )
    grid = tune.Tuner(
        trainer,
        param_space={"train_loop_config": {"opt": {"momentum": tune.grid_search([0.5, 0.7])}}},
        run_config=tune.RunConfig(name="ck", storage_path=storage),
    ).fit()
    assert grid.num_errors == 0, grid.errors
    # each trial starts from the trainer's resume_from_checkpoint; nested dicts merge key by key (Ray's deep_update)
    assert sorted(r.metrics["opt"]["momentum"] for r in grid) == [0.5, 0.7]
    assert all(r.metrics["opt"]["name"] == "sgd" and r.metrics["lr"] == 0.1 for r in grid)
    assert [r.metrics["start"] for r in grid] == ["from-trainer"] * 2


def test_with_args_checks_and_backend_follows_scaling():
    trainer = TorchTrainer(_read_start, scaling_config=ScalingConfig(num_workers=1))
    gpu = trainer.with_args({"scaling_config": {"num_workers": 1, "use_gpu": True}})
    assert gpu.backend_config.use_gpu and gpu.backend_config.backend == "nccl"
    assert not trainer.backend_config.use_gpu  # the trainer itself is unchanged
    with pytest.raises(InvalidArgumentError, match="'workers'.*not a ScalingConfig field"):
        trainer.with_args({"scaling_config": {"workers": 2}})
    with pytest.raises(InvalidArgumentError, match="no argument 'run_config'"):
        trainer.with_args({"run_config": tune.RunConfig()})
    with pytest.raises(InvalidTypeError, match="datasets"):
        trainer.with_args({"datasets": {"train": [1, 2]}})
