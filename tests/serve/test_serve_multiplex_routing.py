"""Model multiplexing routes a request to the replica that holds its model (Ray Serve's behaviour)."""

from __future__ import annotations

import time

import pytest
from serve_helpers import Counted, check_http_requests_go_to_the_replica_holding_their_model, check_models_routed

from muster import serve

pytestmark = pytest.mark.allow_leftover_workers  # Serve lives across the module (the client fixture checks its end)


def test_handle_requests_go_to_the_replica_holding_their_model(client):
    handle = serve.run(Counted.bind(), name="mux_handles", route_prefix="/mux_handles")

    def call(model_id: str) -> tuple:
        return handle.options(multiplexed_model_id=model_id).remote().result(timeout_s=30)

    answers = [call(m) for m in ["a"] * 6 + ["b"] * 6 + ["a"] * 4]
    together = [handle.options(multiplexed_model_id="c").remote() for _ in range(6)]  # a new model, at once
    answers += [r.result(timeout_s=30) for r in together]
    check_models_routed(answers, ["a", "b", "c"])
    assert len({pid for pid, _, _ in answers}) == 3  # each model on its own replica (one model per replica)
    serve.delete("mux_handles")


def test_http_requests_go_to_the_replica_holding_their_model(client):
    check_http_requests_go_to_the_replica_holding_their_model(client)


def test_a_busy_holder_falls_back_to_another_replica(client):
    """The holder at max_ongoing_requests: after a short wait (Ray's 1 s) the request loads it elsewhere."""
    handle = serve.run(Counted.options(num_replicas=2, max_ongoing_requests=1).bind(), name="mux_busy",
                       route_prefix="/mux_busy")
    a = handle.options(multiplexed_model_id="a")
    busy = a.slow.remote()
    time.sleep(0.5)  # it holds its replica's only slot for 2.5 s
    t0 = time.monotonic()
    pid, model, loads = a.remote().result(timeout_s=30)
    waited = time.monotonic() - t0
    slow_pid = busy.result(timeout_s=30)[0]
    assert pid != slow_pid and model == "a" and loads == ["a"]
    assert 0.8 < waited < 1.9, waited  # waited for the holder about 1 s, not for its 2.5 s request
    serve.delete("mux_busy")
