"""Loops defined in these test modules go to workers by value (cloudpickle)."""

from __future__ import annotations

import cloudpickle
import pytest


@pytest.fixture(autouse=True)
def _loops_by_value(request):
    cloudpickle.register_pickle_by_value(request.module)
    yield
    cloudpickle.unregister_pickle_by_value(request.module)


@pytest.fixture
def threads_only():
    """Run pipelines on this process's threads only (so user functions can record into test state)."""
    from muster.data import DataContext

    ctx = DataContext.get_current()
    saved, ctx.use_workers = ctx.use_workers, False
    yield
    ctx.use_workers = saved
