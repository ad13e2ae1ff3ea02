"""Where ranks land on GPUs, checked before any loop runs (an engine that declares 2 GPUs; no CUDA)."""

from __future__ import annotations

import os

import pytest
import torch.distributed

from muster.exceptions import InvalidArgumentError, TrainingFailedError
from muster.train import ScalingConfig
from muster.train.torch import TorchConfig, TorchTrainer

pytestmark = pytest.mark.usefixtures("gpu_engine")


def mark_started(config):
    from muster import train

    rank = train.get_context().get_world_rank()
    open(os.path.join(config["dir"], f"rank{rank}-{os.environ.get('CUDA_VISIBLE_DEVICES')}"), "w").close()
    train.report({"rank": rank})


def _fit(tmp_path, workers, share, torch_config=None):
    from muster.train import RunConfig

    trainer = TorchTrainer(
        mark_started,
        train_loop_config={"dir": str(tmp_path)},
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=True,
                                     resources_per_worker={"CPU": 1, "GPU": share}),
        torch_config=torch_config,
        run_config=RunConfig(name="placement", storage_path=str(tmp_path / "runs"), verbose=0),
    )
    return trainer.fit()


def test_two_ranks_on_one_gpu_under_nccl_fail_at_once_naming_the_ranks_and_both_fixes(tmp_path):
    # NCCL itself refuses it only at the first collective, inside the loop (seen on an H200, NCCL 2.28).
    with pytest.raises(InvalidArgumentError) as info:
        _fit(tmp_path, workers=2, share=0.5)
    message = str(info.value)
    assert "ranks 0 and 1 share GPU 0" in message, message
    assert "{'GPU': 1}" in message and "TorchConfig(backend='gloo')" in message, message
    assert not [f for f in os.listdir(tmp_path) if f.startswith("rank")], "no loop may start"


def test_ranks_sharing_a_gpu_under_gloo_start(tmp_path):
    _fit(tmp_path, workers=2, share=0.5, torch_config=TorchConfig(backend="gloo"))
    assert sorted(f for f in os.listdir(tmp_path) if f.startswith("rank")) == ["rank0-0", "rank1-0"]


@pytest.mark.skipif(torch.distributed.is_nccl_available(), reason="this torch has NCCL: the run would need real GPUs")
def test_ranks_on_gpus_of_their_own_pass_the_check_under_nccl(tmp_path):
    # This CPU build of torch has no NCCL, so the run fails, but in the workers, past the placement check.
    with pytest.raises(TrainingFailedError) as info:
        _fit(tmp_path, workers=2, share=1)
    assert "NCCL built in" in str(info.value) and "share GPU" not in str(info.value), str(info.value)
