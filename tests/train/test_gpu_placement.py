"""Where ranks land on GPUs, checked before any loop runs (an engine that declares 2 GPUs; no CUDA)."""

from __future__ import annotations

import os

import pytest
import torch

from muster.exceptions import InvalidArgumentError, TrainingFailedError
from muster.train import FailureConfig, ScalingConfig
from muster.train.torch import TorchConfig, TorchTrainer

pytestmark = pytest.mark.usefixtures("gpu_engine")


def mark_started(config):
    from muster import train

    rank = train.get_context().get_world_rank()
    open(os.path.join(config["dir"], f"rank{rank}-{os.environ.get('CUDA_VISIBLE_DEVICES')}"), "w").close()
    train.report({"rank": rank})


def _fit(tmp_path, workers, share, torch_config=None, failure_config=None):
    from muster.train import RunConfig

    trainer = TorchTrainer(
        mark_started,
        train_loop_config={"dir": str(tmp_path)},
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=True,
                                     resources_per_worker={"CPU": 1, "GPU": share}),
        torch_config=torch_config,
        run_config=RunConfig(name="placement", storage_path=str(tmp_path / "runs"), verbose=0,
                             failure_config=failure_config or FailureConfig()),
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


@pytest.mark.skipif(torch.version.cuda is not None or torch.cuda.is_available(), reason="this torch has CUDA")
@pytest.mark.parametrize("share, backend", [(0.5, "gloo"), (1, None)], ids=["sharing-under-gloo", "whole-gpus-nccl"])
def test_placements_nccl_can_use_pass_and_a_torch_without_cuda_then_fails_once_saying_so(tmp_path, share, backend):
    # This CPU build of torch is what a GPU machine with the wrong wheel installed would have: the gang passes
    # the placement check, then each worker says what is wrong (before: NCCL's "not built in", or a silent
    # fall-back to the CPU under gloo). Both placements trained on a real GPU (benchmarks/gpu_check.py).
    with pytest.raises(TrainingFailedError) as info:
        _fit(tmp_path, workers=2, share=share, failure_config=FailureConfig(max_failures=2),
             torch_config=TorchConfig(backend=backend) if backend else None)
    message = str(info.value)
    assert "built without CUDA" in message and "use_gpu=False" in message, message
    assert "share GPU" not in message and "NCCL" not in message, message
    assert len(info.value.attempts) == 1, "no restart can give torch CUDA: it must not be retried"
    assert not [f for f in os.listdir(tmp_path) if f.startswith("rank")], "no loop may start"


@pytest.mark.skipif(torch.version.cuda is not None or torch.cuda.is_available(), reason="this torch has CUDA")
def test_default_gpu_workers_hold_a_gpu_and_no_cpu_as_rays_do(tmp_path):
    # Ray's ScalingConfig(use_gpu=True) asks {"GPU": 1} per worker and no CPU ("nodes have many more CPUs than
    # GPUs"); muster asked {"CPU": 1, "GPU": 1}, so with the engine's 2 CPUs held by an actor the gang could not
    # start. Here it starts (each worker then stops at this CPU-only torch, before the loop).
    import muster
    from muster.train import RunConfig

    @muster.remote(num_cpus=2)
    class HoldsTheCpus:
        def ready(self):
            return True

    holder = HoldsTheCpus.remote()
    try:
        assert muster.get(holder.ready.remote())
        scaling = ScalingConfig(num_workers=2, use_gpu=True)
        assert scaling.worker_resources == {"GPU": 1.0} and scaling.num_cpus_per_worker == 0
        assert scaling.total_resources == {"GPU": 2.0}  # Ray 2.60's, for the same ScalingConfig
        # (before, this fit waited for a CPU forever)
        trainer = TorchTrainer(mark_started, train_loop_config={"dir": str(tmp_path)}, scaling_config=scaling,
                               run_config=RunConfig(name="gpu_only", storage_path=str(tmp_path / "runs"), verbose=0))
        with pytest.raises(TrainingFailedError, match="built without CUDA"):
            trainer.fit()
    finally:
        muster.kill(holder)
