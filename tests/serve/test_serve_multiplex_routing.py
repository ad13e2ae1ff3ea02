"""Model multiplexing routes a request to the replica that holds its model (Ray Serve's behaviour)."""

from __future__ import annotations

import time

import pytest
from serve_helpers import Counted, check_http_requests_go_to_the_replica_holding_their_model, check_models_routed

from muster import serve
from muster.core import settings
from muster.exceptions import InvalidArgumentError

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


def test_a_busy_holder_falls_back_after_rays_matching_timeout(client, monkeypatch):
    """The holder at max_ongoing_requests: the request waits T..2T (Ray's environment variable, read where the
    request is routed: here the driver), then loads the model elsewhere. It waited a fixed 1 s before."""
    monkeypatch.setenv("RAY_SERVE_MULTIPLEXED_MODEL_ID_MATCHING_TIMEOUT_S", "0.2")
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
    assert 0.15 < waited < 0.85, waited  # waited 0.2-0.4 s for the holder, not 1 s, nor its 2.5 s request
    serve.delete("mux_busy")


def test_the_matching_timeout_is_read_as_ray_reads_it(monkeypatch):
    name = "RAY_SERVE_MULTIPLEXED_MODEL_ID_MATCHING_TIMEOUT_S"
    monkeypatch.delenv(name, raising=False)
    assert settings.serve_model_matching_timeout_s() == 1.0  # Ray's default
    monkeypatch.setenv(name, "0")
    assert settings.serve_model_matching_timeout_s() == 0.0
    for bad in ("-1", "soon", "nan"):
        monkeypatch.setenv(name, bad)
        with pytest.raises(InvalidArgumentError, match=f"{name}='{bad}'"):
            settings.serve_model_matching_timeout_s()
