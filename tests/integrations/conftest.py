"""Fixtures for the integration tests (Lightning, Transformers, FSDP, AMP).

Training loops defined in these modules travel to the workers by value
(cloudpickle), so a worker never imports a test module.
"""

from __future__ import annotations

import cloudpickle
import pytest


@pytest.fixture(autouse=True)
def _loops_by_value(request):
    cloudpickle.register_pickle_by_value(request.module)
    yield
    cloudpickle.unregister_pickle_by_value(request.module)


@pytest.fixture
def trainer(storage):
    """``trainer(loop, config, workers=2, name='run', max_failures=0)``: a TorchTrainer writing into this
    test's storage."""
    from muster.train import FailureConfig, RunConfig, ScalingConfig
    from muster.train.torch import TorchTrainer

    def make(loop, config, workers=2, name="run", max_failures=0):
        return TorchTrainer(
            loop,
            train_loop_config=config,
            scaling_config=ScalingConfig(num_workers=workers),
            run_config=RunConfig(
                name=name, storage_path=storage, verbose=0, failure_config=FailureConfig(max_failures=max_failures)
            ),
        )

    return make
