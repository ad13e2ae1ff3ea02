"""Fixtures for the Ray Core API tests (``muster.remote``, ``get``, ``wait``, ``put``, ``kill``).

Everything runs on the session engine (``muster.init(num_cpus=4, num_gpus=0)``)
in real worker processes; the session-wide leak check retires idle pooled
task workers, so a test only has to kill the actors it starts.  Functions and
classes defined in these test modules travel by value (cloudpickle), so a
worker never imports a test module.
"""

from __future__ import annotations

import logging

import _waiting_work
import cloudpickle
import pytest
from _task_helpers import TIMEOUT, wait_for

import muster

cloudpickle.register_pickle_by_value(_waiting_work)  # its remote work, shared by two test modules


@pytest.fixture(autouse=True)
def _by_value(request):
    cloudpickle.register_pickle_by_value(request.module)
    yield
    cloudpickle.unregister_pickle_by_value(request.module)


@pytest.fixture
def busy(caplog):
    """The warnings logged on muster's logger during the test about work waiting for resources other work holds
    (``slots.BusyWarning``: tasks, actors, placement groups); after it, every CPU is free again (a killed actor's
    CPUs come back once its process is gone), so the next test starts on an idle machine."""
    caplog.set_level(logging.WARNING, logger="muster")

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "muster" and " has waited " in r.getMessage()]

    yield warnings
    cpus = muster.cluster_resources()["CPU"]
    assert wait_for(lambda: muster.available_resources().get("CPU", 0.0) == cpus, TIMEOUT)
