"""``muster.init(address=<a Ray cluster>, runtime_env={"worker_process_setup_hook": f})``: the hook reaches
Ray's own ``ray.init``, so every Ray worker runs it as it starts, as Ray's workers do."""

from __future__ import annotations

import os

import muster


@muster.remote
def hooked():
    return os.environ.get("MUSTER_T_HOOKED")


def test_the_worker_setup_hook_runs_in_the_workers_of_a_ray_cluster(ray_cluster):
    def setup():  # defined here: pickled by value, as Ray's workers cannot import this test module
        os.environ["MUSTER_T_HOOKED"] = "on a Ray worker"

    muster.shutdown()
    try:
        muster.init(address=ray_cluster.address, runtime_env={"worker_process_setup_hook": setup})
        assert muster.get(hooked.remote(), timeout=120) == "on a Ray worker"
        assert "MUSTER_T_HOOKED" not in os.environ  # the driver does not run it, as in Ray
    finally:
        muster.shutdown()
        muster.init(num_cpus=4, num_gpus=0)  # the session's embedded engine, as tests/conftest.py starts it
