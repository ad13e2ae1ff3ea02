"""Fixtures for the training-layer tests.

Training loops defined in these test modules are shipped to workers by value
(cloudpickle), so a worker never has to import a test module.
"""

from __future__ import annotations

import cloudpickle
import pytest


@pytest.fixture(autouse=True)
def _loops_by_value(request):
    module = request.module
    cloudpickle.register_pickle_by_value(module)
    yield
    cloudpickle.unregister_pickle_by_value(module)


@pytest.fixture
def fit(storage):
    """``fit(loop, workers=2, config=None, name='run', scaling=None, **run_config_kwargs)``:
    run ``loop`` under a TorchTrainer writing into this test's storage; return the Result."""
    from muster.train import RunConfig, ScalingConfig
    from muster.train.torch import TorchTrainer

    def run(loop, workers=2, config=None, name="run", scaling=None, **run_kwargs):
        run_kwargs.setdefault("verbose", 0)
        trainer = TorchTrainer(
            loop,
            train_loop_config=config,
            scaling_config=scaling or ScalingConfig(num_workers=workers),
            run_config=RunConfig(name=name, storage_path=storage, **run_kwargs),
        )
        return trainer.fit()

    return run
