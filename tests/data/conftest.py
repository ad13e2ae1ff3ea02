"""Loops defined in these test modules go to workers by value (cloudpickle)."""

from __future__ import annotations

import cloudpickle
import pytest


@pytest.fixture(autouse=True)
def _loops_by_value(request):
    cloudpickle.register_pickle_by_value(request.module)
    yield
    cloudpickle.unregister_pickle_by_value(request.module)
