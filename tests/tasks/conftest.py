"""Fixtures for the Ray Core API tests (``muster.remote``, ``get``, ``wait``, ``put``, ``kill``).

Everything runs on the session engine (``muster.init(num_cpus=4, num_gpus=0)``)
in real worker processes; the session-wide leak check retires idle pooled
task workers, so a test only has to kill the actors it starts.  Functions and
classes defined in these test modules travel by value (cloudpickle), so a
worker never imports a test module.
"""

from __future__ import annotations

import cloudpickle
import pytest


@pytest.fixture(autouse=True)
def _by_value(request):
    cloudpickle.register_pickle_by_value(request.module)
    yield
    cloudpickle.unregister_pickle_by_value(request.module)
