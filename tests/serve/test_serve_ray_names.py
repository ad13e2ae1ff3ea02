"""Ray 2.60 Serve names that ported code uses beside the main API: the autoscaling config's enum and getters, the
default policy as a function (to wrap in a custom one), ``ReplicaUnavailableError``, ``ProxyLocation``, the custom
autoscaling metrics' aggregation. Pure: no Serve instance."""

from __future__ import annotations

import pytest

from muster import serve
from muster.serve._internal import autoscaling
from muster.serve.autoscaling_policy import (
    AutoscalingContext,
    AutoscalingPolicy,
    default_autoscaling_policy,
    replica_queue_length_autoscaling_policy,
)
from muster.serve.config import AggregationFunction, AutoscalingConfig, ProxyLocation
from muster.serve.context import DeploymentID, ReplicaID
from muster.serve.exceptions import RayServeException, ReplicaDiedError, ReplicaUnavailableError


def _ctx(cfg: AutoscalingConfig, current: int, requests: float, target: int = 1) -> AutoscalingContext:
    return AutoscalingContext(
        deployment_id=DeploymentID("D", "app"), current_num_replicas=current, target_num_replicas=target,
        running_replicas=[], total_num_requests=requests, capacity_adjusted_min_replicas=cfg.min_replicas,
        capacity_adjusted_max_replicas=cfg.max_replicas, policy_state={"kept": 1}, last_scale_up_time=None,
        last_scale_down_time=None, current_time=0.0, config=cfg)


def test_the_autoscaling_configs_enum_and_getters_are_rays():
    cfg = AutoscalingConfig(max_replicas=8, target_ongoing_requests=4, aggregation_function=AggregationFunction.MAX,
                            smoothing_factor=0.5, downscaling_factor=0.25)
    assert cfg.aggregation_function == "max" == AggregationFunction.MAX
    assert AggregationFunction("min") is AggregationFunction.MIN
    assert cfg.get_target_ongoing_requests() == 4
    assert (cfg.get_upscaling_factor(), cfg.get_downscaling_factor()) == (0.5, 0.25)


def test_the_default_policy_is_a_function_a_custom_policy_can_call():
    """Ray's custom policies may start from ``replica_queue_length_autoscaling_policy(ctx)``; it was missing."""
    assert default_autoscaling_policy is replica_queue_length_autoscaling_policy
    cfg = AutoscalingConfig(max_replicas=10, target_ongoing_requests=2, upscaling_factor=3)
    assert replica_queue_length_autoscaling_policy(_ctx(cfg, current=2, requests=10)) == (5.0, {})
    assert replica_queue_length_autoscaling_policy(_ctx(cfg, current=0, requests=0, target=2)) == (2, {})
    assert replica_queue_length_autoscaling_policy(_ctx(cfg, current=0, requests=1)) == (3, {"kept": 1})  # cold

    def doubled(ctx):  # a custom policy built on the default one
        n, state = replica_queue_length_autoscaling_policy(ctx)
        return n * 2, state

    wrapped = AutoscalingConfig(max_replicas=10, target_ongoing_requests=2, upscale_delay_s=0,
                                policy=AutoscalingPolicy(policy_function=doubled))
    facts = autoscaling.Facts("app", "D", 1, ["app#D#1"])
    assert autoscaling.decide(wrapped, 1, 4, now=0.0, state=autoscaling.ScaleState(), facts=facts) == 4  # 4/2*2


def test_replica_unavailable_error_is_what_a_dead_replica_raises():
    assert issubclass(ReplicaDiedError, ReplicaUnavailableError) and issubclass(ReplicaUnavailableError,
                                                                                RayServeException)


def test_custom_metrics_are_aggregated_per_replica_over_the_window_as_rays():
    cfg = AutoscalingConfig(max_replicas=4, look_back_period_s=10)
    state = autoscaling.ScaleState()
    # one round at 1.0 brings r1's two samples since the last (their ages then: 1 s and 0 s)
    autoscaling.record_custom(cfg, state, {"app#D#r1": [(1.0, {"load": 10.0}), (0.0, {"load": 40.0})],
                                           "app#D#r2": [(0.0, {"load": 5.0})]}, 1.0)
    facts = autoscaling.Facts("app", "D", 2, ["app#D#r1"])  # r2 is not running: left out
    ctx = autoscaling._context(cfg, 2, 0.0, 4.0, state, facts)
    r1 = ReplicaID("r1", DeploymentID("D", "app"))
    assert ctx.aggregated_metrics == {"load": {r1: (10 * 1 + 40 * 3) / 4}}  # each value weighed by how long it held
    assert [(p.timestamp, p.value) for p in ctx.raw_metrics["load"][r1]] == [(0.0, 10.0), (1.0, 40.0)]
    peak = AutoscalingConfig(max_replicas=4, look_back_period_s=2, aggregation_function="max")
    assert autoscaling._context(peak, 2, 0.0, 2.5, state, facts).aggregated_metrics == {"load": {r1: 40.0}}
    autoscaling.record_custom(cfg, state, {}, 30.0)  # past the window: every sample goes
    assert state.custom == {}


def test_record_autoscaling_stats_results_are_checked_as_rays(capfd):
    from muster.serve._internal.autoscaling_stats import AutoscalingStats

    class Stats:
        value: object = {"a": 1, "b": 2.5}

        def record_autoscaling_stats(self):
            if self.value == "raise":
                raise RuntimeError("boom")
            return self.value

    obj = Stats()
    stats = AutoscalingStats(obj, "replica X")
    assert stats.read() == {"a": 1.0, "b": 2.5}
    obj.value = "raise"
    assert stats.read() is None and stats.fn is not None  # one failed call: skipped, still on
    obj.value = {"a": "high"}
    assert stats.read() is None and stats.fn is None  # a wrong type: off for good, as Ray's
    assert stats.pool is not None
    stats.pool.shutdown()
    err = capfd.readouterr().err
    assert "record_autoscaling_stats() raised RuntimeError: boom" in err
    assert "returned str 'high' for 'a'; return a dict of metric name -> int or float" in err


def test_proxy_location_is_rays_enum_and_serve_start_checks_it():
    """Ray's ``from ray.serve.config import ProxyLocation`` failed; a bad location was ignored."""
    assert ProxyLocation("EveryNode") is ProxyLocation.EveryNode == "EveryNode"
    assert ProxyLocation._normalize("NoServer") is ProxyLocation.Disabled  # Ray's older name
    with pytest.raises(ValueError, match=r"proxy_location='Everywhere': use one of \['Disabled', 'HeadOnly', 'Every"):
        serve.start(proxy_location="Everywhere")
    with pytest.raises(TypeError, match=r"proxy_location=\{'port': 0\}: pass a ProxyLocation .*http_options="):
        serve.start({"port": 0})  # Ray's first positional is proxy_location


#: Ray 2.60's public Serve names (@PublicAPI) muster does not provide: each fails naming what to use instead (they
#: were bare AttributeErrors, or ModuleNotFoundErrors for the modules, naming nothing)
UNSUPPORTED_NAMES = {
    "muster.serve.exceptions": ["gRPCStatusError"],
    "muster.serve.autoscaling_policy": ["PrometheusQueryMixin", "PrometheusScalar", "PrometheusSample",
                                        "PrometheusVector"],
    "muster.serve.config": ["ControllerOptions"],
    "muster.serve.schema": ["TracingConfig", "ServeActorDetails", "AutoscalingMetricsHealth", "AutoscalingStatus",
                            "ScalingDecision", "DeploymentAutoscalingDetail", "DeploymentNode", "DeploymentTopology",
                            "Target", "TargetGroup", "DurationStats", "ControllerHealthMetrics", "CeleryAdapterConfig",
                            "TaskProcessorConfig", "TaskResult", "TaskProcessorAdapter", "ScaleDeploymentRequest",
                            "RequestRouterConfig"],
    "muster.serve.llm": ["CloudMirrorConfig", "build_pd_openai_app", "build_dp_deployment", "build_dp_openai_app"],
}
UNSUPPORTED_MODULES = ["muster.serve.grpc_util", "muster.serve.taskiq_task_processor",
                       "muster.serve.utils", "muster.serve.llm.request_router", "muster.serve.llm.openai_api_models"]


def test_rays_other_public_serve_names_fail_naming_the_equivalent():
    import importlib

    from muster.exceptions import UnsupportedRayImportError

    for module, names in UNSUPPORTED_NAMES.items():
        for name in names:
            ray_name = f"ray{module.removeprefix('muster')}.{name}"
            with pytest.raises(UnsupportedRayImportError, match=rf"\(Ray's {ray_name}\) is not supported by muster; "
                                                                r"nearest equivalent: \w"):
                exec(f"from {module} import {name}")
    for module in UNSUPPORTED_MODULES:
        with pytest.raises(UnsupportedRayImportError, match=r"is not supported by muster; nearest equivalent: \w"):
            importlib.import_module(module)


def test_rays_homes_of_serve_names_hold_the_same_objects():
    """``ray.serve.schema.ReplicaRank`` and ``ray.serve.api``'s decorators and getters, where Ray's code imports
    them."""
    from muster.serve import api, context, schema

    assert schema.ReplicaRank is context.ReplicaRank
    for name in ("deployment", "ingress", "multiplexed", "get_multiplexed_model_id", "get_replica_context",
                 "get_deployment_actor", "get_deployment_actor_context", "Application", "Deployment"):
        assert getattr(api, name) is getattr(serve, name), name


def test_rays_handle_routing_methods_fail_naming_remote():
    """Ray 2.60's ``handle.choose_replica()`` / ``dispatch()``: they became calls of deployment methods of those
    names, failing later with "'DeploymentHandle' object is not callable"."""
    from muster.exceptions import UnsupportedRayAPIError
    from muster.serve.handle import DeploymentHandle

    handle = DeploymentHandle("D", "app")
    for name in ("choose_replica", "dispatch"):
        with pytest.raises(UnsupportedRayAPIError, match=rf"DeploymentHandle.{name} .*nearest equivalent: "
                                                         rf"handle.remote.*options\(method_name='{name}'\)"):
            getattr(handle, name)
    assert handle.predict.deployment_name == "D"  # any other name is still a method to call


def test_a_deployments_properties_are_rays():
    """Ray's ``Deployment`` properties ported code reads (AttributeError before) and ``set_logging_config``."""

    @serve.deployment(max_queued_requests=7, backpressure_config={"status_code": 429},
                      logging_config={"log_level": "DEBUG"})
    class D:
        pass

    assert D.max_queued_requests == 7 and D.backpressure_config.status_code == 429
    unset = D.options(backpressure_config=None).backpressure_config  # what one unset gets (Ray's: no Retry-After)
    assert (unset.status_code, unset.retry_after_s) == (503, 1)
    assert (D.init_args, D.init_kwargs) == ((), {})
    assert D.logging_config is not None and D.logging_config["log_level"] == "DEBUG"
    D.set_logging_config({"log_level": "WARNING", "encoding": "JSON"})
    assert D.logging_config["log_level"] == "WARNING" and D.bind().deployment.config.logging_config.encoding == "JSON"
