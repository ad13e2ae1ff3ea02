"""``muster.train.examples``: Ray's download-free example training functions, run for real."""

from __future__ import annotations

import torch

from muster.train import RunConfig, ScalingConfig
from muster.train.examples.pytorch.torch_linear_example import LinearDataset, train_func, train_linear
from muster.train.torch import TorchTrainer


def test_linear_example_as_rays_docs_use_it(storage):
    data = LinearDataset(2, 5, size=4)
    assert [(float(x), float(y)) for x, y in data] == [(0.0, 5.0), (2.5, 10.0), (5.0, 15.0), (7.5, 20.0)]
    # Ray's tune docs: TorchTrainer(train_loop_per_worker=linear_train_func, train_loop_config={...})
    result = TorchTrainer(train_loop_per_worker=train_func,
                          train_loop_config={"lr": 1e-2, "batch_size": 4, "epochs": 3, "data_size": 200},
                          scaling_config=ScalingConfig(num_workers=2),
                          run_config=RunConfig(storage_path=storage, verbose=0)).fit()
    losses = list(result.metrics_dataframe["loss"])
    assert list(result.metrics) == ["loss"] and len(losses) == 3 and losses[-1] < losses[0]
    assert len(result.best_checkpoints) == 3
    with result.checkpoint.as_directory() as folder:
        state = torch.load(f"{folder}/model.pt")
    assert sorted(state) == ["module.bias", "module.weight"]  # the DDP model's state dict, as Ray's example saves
    # and the module's own driver function
    assert set(train_linear(num_workers=2, epochs=1, storage_path=storage)) == {"loss"}
