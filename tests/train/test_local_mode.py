"""Ray Train V2's local mode, ``ScalingConfig(num_workers=0)``: ``fit()`` runs the training function in the
calling process. Checked against Ray 2.60 (``RAY_TRAIN_V2_ENABLED=1``, ``ray.init(address="local")``) with the same
loop: the function ran in the driver's process and thread; ``get_context()`` gave world size 1 and ranks 0;
``torch.distributed`` was not initialized; ``prepare_model`` returned the model unwrapped; ``prepare_data_loader``
yielded every sample; ``get_dataset_shard`` gave all rows; ``barrier()`` returned None and
``broadcast_from_rank_zero(x)`` x; ``Result.metrics`` was the last report and ``return_value`` the function's; an
exception came out of ``fit()`` as itself (a ``KeyError``), once, whatever ``FailureConfig`` said. Ray keeps no run
folder (``Result.path`` None); muster records the run as a worker's, so these tests check the folder too."""

from __future__ import annotations

import json
import os
import tempfile
import threading

import pytest
import torch
import torch.distributed as dist

import muster
import muster.train as train
from muster.exceptions import InvalidArgumentError
from muster.train import Checkpoint, FailureConfig, Result, RunConfig, ScalingConfig
from muster.train import collective
from muster.train.torch import TorchTrainer, get_device, prepare_data_loader, prepare_model

SEEN: dict = {}  # what the loop saw: only visible here because it runs in this process


def _local(loop, storage, name="local", config=None, **run_kwargs):
    return TorchTrainer(loop, train_loop_config=config, scaling_config=ScalingConfig(num_workers=0),
                        run_config=RunConfig(name=name, storage_path=storage, verbose=0, **run_kwargs))


def _loop(config):
    ctx = train.get_context()
    SEEN.update(pid=os.getpid(), thread=threading.current_thread(), dist=dist.is_initialized(),
                ranks=(ctx.get_world_size(), ctx.get_world_rank(), ctx.get_local_rank(),
                       ctx.get_local_world_size(), ctx.get_node_rank()),
                name=ctx.get_experiment_name(), run_dir=ctx.get_run_dir(), start=train.get_checkpoint(),
                barrier=collective.barrier(), broadcast=collective.broadcast_from_rank_zero({"a": 1}))
    for step in range(2):
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "step.txt"), "w") as f:
                f.write(str(step))
            train.report({"loss": 1.0 / (step + 1), "step": step}, checkpoint=Checkpoint.from_directory(folder))
    SEEN["reported"] = train.get_all_reported_checkpoints(timeout_s=10)
    return {"returned": config["x"]}


def test_the_function_runs_in_the_calling_thread_and_the_run_is_recorded(storage):
    SEEN.clear()
    result = _local(_loop, storage, config={"x": 7}).fit()
    assert SEEN["pid"] == os.getpid() and SEEN["thread"] is threading.current_thread()
    assert SEEN["ranks"] == (1, 0, 0, 1, 0) and SEEN["name"] == "local"
    assert SEEN["dist"] is False and not dist.is_initialized()
    assert SEEN["start"] is None and SEEN["barrier"] is None and SEEN["broadcast"] == {"a": 1}
    run_dir = os.path.join(storage, "local")
    assert SEEN["run_dir"] == run_dir == result.path
    assert [r.metrics["step"] for r in SEEN["reported"]] == [0, 1]  # committed as each report returned
    assert result.metrics == {"loss": 0.5, "step": 1} and result.return_value == {"returned": 7}
    assert result.error is None
    with result.checkpoint.as_directory() as folder:
        assert open(os.path.join(folder, "step.txt")).read() == "1"
    assert result.checkpoint.path.startswith(run_dir + os.sep)
    assert Result.from_path(run_dir).metrics == result.metrics  # result.json, as for a run with workers
    with open(os.path.join(run_dir, ".muster_run.json")) as f:
        assert json.load(f)["status"] == "FINISHED"


def test_the_function_need_not_pickle(storage):
    """It never leaves this process (Ray's local mode never pickles it): a lock, a thread, an open file will do."""
    lock = threading.Lock()

    def holds_a_lock():
        with lock:
            train.report({"held": True})

    assert _local(holds_a_lock, storage, "unpicklable").fit().metrics == {"held": True}


def _prepares(config):
    model = prepare_model(torch.nn.Linear(2, 1))
    loader = prepare_data_loader(torch.utils.data.DataLoader(list(range(10)), batch_size=4, shuffle=True))
    SEEN.update(model=model, device=get_device(), samples=sorted(int(x) for batch in loader for x in batch),
                rows=sorted(row["id"] for row in train.get_dataset_shard("train").iter_rows()))


def test_prepare_helpers_and_dataset_shard_see_a_world_of_one(storage):
    SEEN.clear()
    TorchTrainer(_prepares, scaling_config=ScalingConfig(num_workers=0), datasets={"train": muster.data.range(10)},
                 run_config=RunConfig(name="prepared", storage_path=storage, verbose=0)).fit()
    assert type(SEEN["model"]) is torch.nn.Linear  # no DistributedDataParallel around it
    expected = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")  # as Ray's
    assert SEEN["device"] == expected and next(SEEN["model"].parameters()).device == expected
    assert SEEN["samples"] == list(range(10)) and SEEN["rows"] == list(range(10))


def _fails_after_a_checkpoint(config):
    SEEN["calls"] = SEEN.get("calls", 0) + 1
    SEEN["start"] = train.get_checkpoint()
    if config.get("fail"):
        train.report({"step": 0}, checkpoint=Checkpoint.from_dict({"step": 0}))
        raise KeyError("boom")
    train.report({"step": 1})


def test_an_exception_comes_out_as_it_is_and_a_rerun_resumes(storage):
    SEEN.clear()
    trainer = _local(_fails_after_a_checkpoint, storage, "fails", {"fail": True},
                     failure_config=FailureConfig(max_failures=2))
    with pytest.raises(KeyError, match="boom"):
        trainer.fit()
    assert SEEN["calls"] == 1  # no retry, as in Ray's local mode
    with open(os.path.join(storage, "fails", ".muster_run.json")) as f:
        assert json.load(f)["status"] == "ERRORED"
    result = _local(_fails_after_a_checkpoint, storage, "fails", {}).fit()
    assert SEEN["start"].to_dict() == {"step": 0}  # the failed run's committed checkpoint
    assert result.metrics == {"step": 1}


def test_torchrun_environment_is_refused(storage, monkeypatch):
    """Ray joins a process group over torchrun's processes here; muster's local mode runs one process."""
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(key, value)
    SEEN.clear()
    with pytest.raises(InvalidArgumentError, match=r"under torchrun \(RANK=0, WORLD_SIZE=2\).*num_workers="):
        _local(_loop, storage, "torchrun", {"x": 1}).fit()
    assert "pid" not in SEEN


def _fits_another_local_run(config):
    _local(_loop, config["storage"], "inner", {"x": 1}).fit()


def test_a_local_run_inside_a_local_run_is_refused(storage):
    with pytest.raises(InvalidArgumentError, match="already running in this process.*num_workers=1"):
        _local(_fits_another_local_run, storage, "outer", {"storage": storage}).fit()


@muster.remote
def _fit_in_a_task(storage):
    return _local(_loop, storage, "in_a_task", {"x": 1}).fit().metrics


def test_fit_in_a_worker_is_refused(storage):
    with pytest.raises(InvalidArgumentError, match=r"num_workers=0\)\)\.fit\(\) in a muster worker.*num_workers=1"):
        muster.get(_fit_in_a_task.remote(storage))


def test_a_tune_trial_in_local_mode_is_refused(storage):
    """Tune runs a Tuner(trainer)'s trials side by side in the driver: local mode would share its process."""
    from muster import tune

    trainer = _local(_loop, storage, "tuned", {"x": 1})
    grid = tune.Tuner(trainer, run_config=tune.RunConfig(name="tuned", storage_path=storage, verbose=0)).fit()
    assert grid.num_errors == 1 and "as a Tune trial" in str(grid.errors[0])
