"""Autoscaling to zero replicas (``min_replicas=0``), as Ray Serve does: an idle deployment stops its last replica
after the downscale delay, and the next request (HTTP or handle) waits at its router, is seen by the controller as
demand, and starts a replica at once (Ray's cold start: no upscale delay), then is served."""

from __future__ import annotations

import os
import threading
import time

import pytest

import muster
from serve_helpers import alive, wait_until

from muster import serve
from muster.serve._internal import autoscaling
from muster.serve.config import AutoscalingConfig

pytestmark = pytest.mark.allow_leftover_workers  # the module's Serve instance outlives each test

# upscale_delay_s is long: a start from zero must not wait for it (Ray's cold start skips it)
_AUTO = {"min_replicas": 0, "max_replicas": 2, "upscale_delay_s": 30, "downscale_delay_s": 0.5,
         "metrics_interval_s": 0.2, "look_back_period_s": 0.4}


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Pid:
    def __call__(self) -> int:
        return os.getpid()


@serve.deployment(ray_actor_options={"num_cpus": 0})
class SlowStart:
    def __init__(self, release: str):
        # starts only once the test has checked the state while it starts (the first request waits at the
        # ingress meanwhile): a fixed 2 s start raced those checks, which a loaded CI machine could make late
        # enough to find the replica RUNNING and the queue free again
        deadline = time.monotonic() + 60
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.02)

    def __call__(self) -> str:
        return "up"


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Caller:
    def __init__(self, back):
        self.back = back

    async def __call__(self) -> int:
        return await self.back.remote()  # waits in this replica while Back starts from zero


@muster.remote(num_cpus=0)
def call_from_a_task() -> int:
    return serve.get_deployment_handle("Pid", app_name="pair").remote().result(timeout_s=60)


def _dep(app: str, name: str):
    return serve.status().applications[app].deployments[name]


def _at_zero(app: str, name: str) -> bool:
    d = _dep(app, name)  # none left in any state: a replica still STOPPING (its drain) is not at zero yet
    return not d.replica_states and d.target_replicas == 0


def test_an_idle_deployment_scales_to_zero_and_a_request_starts_it_again(client):
    serve.run(Pid.options(autoscaling_config={**_AUTO, "initial_replicas": 1}).bind(), name="zero",
              route_prefix="/zero")
    first = client.get("/zero")
    assert first.status_code == 200
    wait_until(lambda: _at_zero("zero", "Pid"), 20, "the idle deployment at 0 replicas")
    d = _dep("zero", "Pid")
    assert d.status == "HEALTHY" and not d.replica_states  # as Ray: healthy at its target of 0
    wait_until(lambda: not alive(first.json()), 15, "the last replica's process to exit")

    t0 = time.monotonic()
    again = client.get("/zero", timeout=60)  # waits at the ingress while a replica starts
    assert again.status_code == 200 and again.json() != first.json()
    assert time.monotonic() - t0 < 20  # not the 30 s upscale delay

    wait_until(lambda: _at_zero("zero", "Pid"), 20, "0 replicas again")
    pid = serve.get_app_handle("zero").remote().result(timeout_s=60)  # a handle's call starts one too
    assert isinstance(pid, int) and alive(pid)
    serve.delete("zero")


def test_a_full_queue_at_zero_replicas_is_refused_with_503(client, tmp_path):
    cfg = {**_AUTO, "initial_replicas": 0, "downscale_delay_s": 30}
    release = tmp_path / "release"
    serve.run(SlowStart.options(autoscaling_config=cfg, max_queued_requests=1).bind(str(release)), name="cold",
              route_prefix="/cold")
    assert _at_zero("cold", "SlowStart")  # initial_replicas=0: nothing started
    got: list = []
    waiting = threading.Thread(target=lambda: got.append(client.get("/cold", timeout=60)))
    waiting.start()
    try:
        wait_until(lambda: _dep("cold", "SlowStart").target_replicas == 1, 20, "the queued request to start one")
        d = _dep("cold", "SlowStart")
        assert d.status == "UPSCALING" and d.replica_states.get("RUNNING", 0) == 0, d
        full = client.get("/cold")  # the one queued place is taken while the replica starts
        assert full.status_code == 503 and "max_queued_requests=1" in full.text
    finally:
        release.touch()  # the replica now starts and serves the queued request
        waiting.join(60)
    assert got and got[0].status_code == 200 and got[0].text == "up"
    serve.delete("cold")


def test_calls_from_a_replica_and_a_task_start_a_deployment_at_zero(client):
    auto = {**_AUTO, "initial_replicas": 0}
    serve.run(Caller.bind(Pid.options(autoscaling_config=auto).bind()), name="pair", route_prefix="/pair")
    assert _at_zero("pair", "Pid")
    got = client.get("/pair", timeout=60)  # Caller's replica holds the call: its stats tell the controller
    assert got.status_code == 200 and alive(got.json())
    wait_until(lambda: _at_zero("pair", "Pid"), 20, "Pid idle at 0 replicas again")
    pid = muster.get(call_from_a_task.remote(), timeout=90)  # a task's handle pulls the table: its pulls say so
    assert isinstance(pid, int) and pid != got.json()
    serve.delete("pair")


def test_the_policy_starts_from_zero_at_once_and_stops_the_last_replica_after_its_delay():
    cfg = AutoscalingConfig(min_replicas=0, max_replicas=4, upscale_delay_s=30, downscale_delay_s=5,
                            downscale_to_zero_delay_s=50, look_back_period_s=1)
    state = autoscaling.ScaleState()
    assert autoscaling.decide(cfg, 0, 0.0, 0.0, state) == 0  # no request: stays at zero
    assert autoscaling.decide(cfg, 0, 3.0, 10.0, state) == 1  # a request: one at once, no upscale delay
    state = autoscaling.ScaleState()
    assert autoscaling.decide(cfg, 3, 0.0, 100.0, state) == 3
    assert autoscaling.decide(cfg, 3, 0.0, 105.0, state) == 1  # never straight to zero from 3
    state = autoscaling.ScaleState()
    assert autoscaling.decide(cfg, 1, 0.0, 200.0, state) == 1
    assert autoscaling.decide(cfg, 1, 0.0, 206.0, state) == 1  # the 1 -> 0 step waits downscale_to_zero_delay_s
    assert autoscaling.decide(cfg, 1, 0.0, 251.0, state) == 0
    assert AutoscalingConfig(min_replicas=0, max_replicas=2).start_replicas == 0  # Ray starts at min_replicas
