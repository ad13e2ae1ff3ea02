"""Pure checks: option validation, the autoscaling policy, the app graph, config files."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

from muster import serve
from muster.serve._internal import autoscaling, plan
from muster.serve.config import AutoscalingConfig, DeploymentConfig, HTTPOptions
from muster.serve.schema import ServeConfig, import_app


@serve.deployment
class A:
    pass


@serve.deployment(num_replicas=3, ray_actor_options={"num_cpus": 0.5, "resources": {"acc": 1}})
class B:
    def __init__(self, a, items):
        pass


def test_bad_options_name_the_field():
    with pytest.raises(ValueError, match="max_ongoing_requests=0"):
        DeploymentConfig(name="x", max_ongoing_requests=0)
    with pytest.raises(ValueError, match="max_queued_requests=-2"):
        DeploymentConfig(name="x", max_queued_requests=-2)
    # a fixed count of 0 (Ray refuses it too) left its callers queued until their timeout
    zero = r"deployment 'x': num_replicas=0: .* autoscaling_config=\{'min_replicas': 0"
    with pytest.raises(ValueError, match=zero):
        DeploymentConfig(name="x", num_replicas=0)
    with pytest.raises(ValueError, match=zero.replace("'x'", "'A'")):
        A.options(num_replicas=0)
    with pytest.raises(ValueError, match=zero.replace("'x'", "'f'")):
        serve.deployment(num_replicas=0, name="f")(lambda: None)
    with pytest.raises(ValueError, match="both set"):
        DeploymentConfig(name="x", num_replicas=2, autoscaling_config={"max_replicas": 2})
    with pytest.raises(ValueError, match="max_replicas=1 is below min_replicas=2"):
        AutoscalingConfig(min_replicas=2, max_replicas=1)
    with pytest.raises(ValueError, match="unknown key"):
        DeploymentConfig(name="x", ray_actor_options={"num_cpu": 1})
    for not_json in ({"x": {1, 2}}, {"x": object()}):  # Ray refuses them at .options(); muster deployed them
        with pytest.raises(ValueError, match=r"A: user_config=\{'x': .* is not JSON-serializable"):
            A.options(user_config=not_json)
    with pytest.raises(ValueError, match="env_vars must map str to str"):
        DeploymentConfig(name="x", ray_actor_options={"runtime_env": {"env_vars": {"A": 1}}})
    assert (AutoscalingConfig.default().min_replicas, AutoscalingConfig.default().max_replicas) == (1, 100)
    with pytest.raises(ValueError, match="name='a#b'.* without '/' or '#'"):
        DeploymentConfig(name="a#b")
    with pytest.raises(ValueError, match="port=70000"):
        HTTPOptions(port=70000)
    with pytest.warns(UserWarning, match="location='EveryNode' have no effect"):  # a TypeError before
        assert HTTPOptions(location="EveryNode").port == 8000
    with pytest.warns(UserWarning, match="root_path='/api'"):  # dropped silently from a dict before
        HTTPOptions.coerce({"root_path": "/api"})
    with pytest.raises(ValueError, match="loop='trio': use 'uvloop' or 'asyncio'"):
        HTTPOptions.coerce({"loop": "trio"})
    with pytest.raises(TypeError, match="unknown option"):
        serve.deployment(colour="red")
    # Ray's removed options (its old docs still show them) name what replaced them
    with pytest.raises(TypeError, match=r"\['max_concurrent_queries', 'route_prefix'\]\. Ray removed "
                                        r"max_concurrent_queries \(use max_ongoing_requests\), route_prefix \(use "
                                        r"serve.run\(app, route_prefix=...\)\)"):
        serve.deployment(max_concurrent_queries=100, route_prefix="/")
    with pytest.raises(TypeError, match=r"Ray removed max_concurrent_queries \(use max_ongoing_requests\)"):
        A.options(max_concurrent_queries=100)
    for refused in (lambda: serve.deployment(version="v2"), lambda: A.options(version="v2")):  # as Ray 2.60 refuses it
        with pytest.raises(TypeError, match=r"Ray removed version \(drop it: Serve versions a deployment itself"):
            refused()
    with pytest.raises(TypeError, match=r"\['route_prefix'\].*Ray removed route_prefix \(use "
                                        r"serve.run\(app, route_prefix=...\)\)"):
        A.options(route_prefix="/a")  # accepted and ignored before
    with pytest.raises(TypeError, match="async def"):
        serve.batch(lambda xs: xs)
    with pytest.raises(TypeError, match="bind"):
        A()


def test_options_and_resources():
    assert B.config.resources() == {"CPU": 0.5, "acc": 1.0}
    auto = B.options(num_replicas="auto")
    assert auto.config.autoscaling_config is not None and auto.config.initial_replicas == 1
    scaled = B.options(autoscaling_config={"min_replicas": 2, "max_replicas": 4})
    assert scaled.config.num_replicas is None and scaled.config.initial_replicas == 2
    assert A.config.resources() == {"CPU": 1.0}  # Ray's default: one CPU per replica


def test_rays_options_with_no_effect_here_are_accepted_with_a_warning_that_says_so():
    with pytest.warns(UserWarning, match=r"deployment 'C': max_replicas_per_node=1 has no effect in muster: "
                                         r"replicas are not capped per node"):
        @serve.deployment(max_replicas_per_node=1)
        class C:
            pass
    assert C.config.name == "C"
    assert A.options(logging_config={"log_level": "debug"}).config.logging_config.log_level == "DEBUG"  # applied
    with pytest.warns(UserWarning, match=r"deployment 'A': request_router_config=.*power of two choices"):
        plan.build(A.bind(), "app", overrides={"A": {"request_router_config": {"request_router_class": "x.Y"}}})
    with pytest.warns(UserWarning, match=r"deployment 'D': runtime_env pip, working_dir have no effect on muster"):
        runtime_env = {"pip": ["requests"], "working_dir": "."}
        serve.deployment(name="D", ray_actor_options={"runtime_env": runtime_env})(A.func_or_class)
    assert AutoscalingConfig(min_replicas=0, max_replicas=2, downscale_to_zero_delay_s=30).start_replicas == 0
    handle = serve.DeploymentHandle("A", "app")
    assert handle.options(use_new_handle_api=True, stream=True)._stream  # Ray's no-op option
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['stram'\]"):
        handle.options(stram=True)
    with pytest.raises(TypeError, match=r"multiplexed_model_id=1\): a model id is a string"):
        handle.options(multiplexed_model_id=1)
    assert handle.options(multiplexed_model_id="m1").options(stream=True)._model_id == "m1"  # kept through options
    # Ray 2.60's options, with no effect under its default router (TypeError before)
    assert handle.options(session_id="s1", request_serialization="msgpack", response_serialization="orjson")._method \
        == "__call__"
    with pytest.raises(ValueError, match=r"request_serialization='yaml'\): use one of Ray's"):
        handle.options(request_serialization="yaml")


def test_graph_turns_bound_deployments_into_handles():
    a = A.bind()
    ingress, plans = plan.build(B.bind(a, [a]), "app")
    assert ingress == "B" and [p.name for p in plans] == ["A", "B"]
    handle, items = plans[1].args
    assert isinstance(handle, serve.DeploymentHandle) and handle.deployment_name == "A"
    assert items[0].deployment_name == "A"
    _, plans = plan.build(B.bind(A.bind(), A.bind()), "app")
    assert [p.name for p in plans] == ["A", "A_1", "B"]
    _, plans = plan.build(B.bind(a, []), "app", overrides={"A": {"num_replicas": 4}})
    assert plans[0].config.initial_replicas == 4
    with pytest.raises(ValueError, match=r"overrides deployment\(s\) \['Z'\]"):
        plan.build(B.bind(a, []), "app", overrides={"Z": {"num_replicas": 4}})
    with pytest.raises(TypeError, match="call .bind()"):
        plan.build(A, "app")  # type: ignore[arg-type]


def test_autoscaling_policy_waits_for_its_delays():
    cfg = AutoscalingConfig(min_replicas=1, max_replicas=4, target_ongoing_requests=2, upscale_delay_s=1,
                            downscale_delay_s=5, look_back_period_s=0.5)  # a window of one sample
    st = autoscaling.ScaleState()
    assert autoscaling.decide(cfg, 1, 7, now=0.0, state=st) == 1  # wants 4, waits
    assert autoscaling.decide(cfg, 1, 7, now=1.0, state=st) == 4
    assert autoscaling.decide(cfg, 4, 100, now=2.0, state=st) == 4  # capped at max
    assert autoscaling.decide(cfg, 4, 0, now=3.0, state=st) == 4
    assert autoscaling.decide(cfg, 4, 0, now=8.0, state=st) == 1
    assert autoscaling.decide(cfg, 1, 3, now=9.0, state=st) == 1  # need gone before the delay: resets
    assert autoscaling.decide(cfg, 1, 0, now=10.0, state=st) == 1


def test_autoscaling_averages_over_its_look_back_window_and_smooths():
    # Ray's keys are accepted (the Ray autoscaling guide's config)
    keys = dict(look_back_period_s=2.0, smoothing_factor=1.0, upscale_smoothing_factor=None,
                downscale_smoothing_factor=None, upscaling_factor=None, downscaling_factor=None,
                downscale_to_zero_delay_s=60, aggregation_function="mean")
    assert DeploymentConfig(name="x", autoscaling_config={"max_replicas": 4, **keys}).autoscaling_config is not None
    with pytest.raises(ValueError, match="aggregation_function='median'"):
        AutoscalingConfig(aggregation_function="median")
    # bursty load (8 ongoing, then none, in turn) averages 4 over the window: it scales up, as Ray does,
    # though the instantaneous count is never above target for the whole upscale delay
    cfg = AutoscalingConfig(max_replicas=4, target_ongoing_requests=2, upscale_delay_s=2, look_back_period_s=10)
    st = autoscaling.ScaleState()
    got = [autoscaling.decide(cfg, 1, 8.0 if i % 2 == 0 else 0.0, now=i * 0.5, state=st) for i in range(5)]
    assert got == [1, 1, 1, 1, 3]  # after upscale_delay_s: the mean 4.8 over the window wants ceil(4.8 / 2)
    # smoothing: a decision moves part of the way (upscaling_factor), "max" aggregates the peak
    assert autoscaling.wanted(AutoscalingConfig(max_replicas=10, upscaling_factor=0.5), 1, 8.0) == 3  # 1 -> 4, half
    assert autoscaling.wanted(AutoscalingConfig(max_replicas=10, downscaling_factor=0.5), 4, 0.0) == 2
    peak = AutoscalingConfig(max_replicas=10, aggregation_function="max", upscale_delay_s=0)
    st = autoscaling.ScaleState()
    assert [autoscaling.decide(peak, 1, v, now=t, state=st) for t, v in enumerate([8.0, 0.0])] == [4, 4]


def test_config_schema_and_import_errors():
    cfg = ServeConfig.from_dict({"applications": [{"name": "a", "import_path": "m:app",
                                                   "deployments": [{"name": "X", "num_replicas": 2}]}]})
    assert cfg.applications[0].overrides() == {"X": {"num_replicas": 2}}
    with pytest.raises(ValueError, match="unique"):
        ServeConfig.from_dict({"applications": [{"name": "a", "import_path": "m:x"},
                                                {"name": "a", "import_path": "m:y"}]})
    with pytest.raises(ValueError, match="applications"):
        ServeConfig.from_dict({"apps": []})
    one = [{"name": "a", "import_path": "m:app"}]
    with pytest.raises(ValueError, match=r"unknown top-level field\(s\) \['http_option'\]"):
        ServeConfig.from_dict({"applications": one, "http_option": {"port": 1}})  # a typo was ignored
    with pytest.warns(UserWarning, match="proxy_location have no effect in muster"):
        ServeConfig.from_dict({"applications": one, "proxy_location": "EveryNode"})
    with pytest.raises(ImportError, match="module 'nowhere_xyz' was not found"):
        import_app("nowhere_xyz:app")
    with pytest.raises(ImportError, match="has no attribute 'missing'"):
        import_app("muster.serve:missing")
    assert import_app(f"{__name__}:A").deployment is A


def test_ray_schema_names_import_and_unsupported_ones_name_the_equivalent():
    from muster.exceptions import UnsupportedRayImportError
    from muster.serve.schema import ApplicationStatusOverview, DeploymentStatusOverview, ServeStatus

    assert (ServeStatus, ApplicationStatusOverview, DeploymentStatusOverview) == \
        (serve.ServeStatus, serve.ApplicationStatusOverview, serve.DeploymentStatusOverview)
    cases = [("muster.serve.schema", "ServeInstanceDetails", "serve.status()"),
             ("muster.serve.config", "RequestRouterConfig", "power of two choices"),
             ("muster.serve.config", "gRPCOptions", "HTTP only"),
             ("muster.serve.handle", "RayServeHandle", "DeploymentHandle"),
             ("muster.serve.request_router", "RequestRouter", "power of two choices"),
             ("muster.serve.handle", "RayServeDeploymentHandle", "await handle.remote"),  # Ray's old names
             ("muster.serve.drivers", "DAGDriver", "Ray removed DAGDriver too"),
             ("muster.serve.deployment_graph", "InputNode", "Ray removed InputNode too")]
    for module, name, hint in cases:
        with pytest.raises(UnsupportedRayImportError, match=hint):
            exec(f"from {module} import {name}")


def test_importing_serve_makes_starlette_requests_reachable_as_rays_does():
    """Ray's snippets write ``import starlette`` and annotate ``starlette.requests.Request``: that works
    because importing Serve imports ``starlette.requests``; it raised AttributeError after the port."""
    code = ("import starlette\nfrom muster import serve\n"
            "@serve.deployment\nclass A:\n    async def __call__(self, request: starlette.requests.Request): pass\n"
            "print(A.name)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["A"]


def test_rays_removed_autoscaling_name_is_ignored_with_a_warning():
    """Ray's docs still show ``target_num_ongoing_requests_per_replica``; Ray 2.60 ignores it (its config drops
    unknown fields), so the target stays 2. It was refused as unknown before, failing the ported script."""
    with pytest.warns(UserWarning, match=r"target_num_ongoing_requests_per_replica=10 is ignored, as Ray 2.60 "
                                         r"ignores it: .* set that instead"):
        cfg = AutoscalingConfig.coerce({"min_replicas": 1, "max_replicas": 5,
                                        "target_num_ongoing_requests_per_replica": 10})
    assert cfg is not None and (cfg.target_ongoing_requests, cfg.max_replicas) == (2.0, 5)
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['max_replica'\]"):  # typos stay errors
        AutoscalingConfig.coerce({"max_replica": 2})


def _wants(ctx):
    """A custom policy: the replicas its kwargs-free state counts up to, and how often it was asked."""
    asked = ctx.policy_state.get("asked", 0) + 1
    return ctx.total_num_requests + asked, {"asked": asked}


class _Fixed:
    def __init__(self, n: int):
        self.n = n

    def __call__(self, ctx):
        return self.n, {}


def test_a_custom_autoscaling_policy_decides_through_the_configs_bounds_factors_and_delays():
    """Ray 2.60's AutoscalingConfig(policy=AutoscalingPolicy(policy_function=...)); it was refused as unknown."""
    from muster.serve.config import AutoscalingPolicy

    cfg = AutoscalingConfig.coerce({"min_replicas": 1, "max_replicas": 4, "upscale_delay_s": 1, "downscale_delay_s": 0,
                                    "look_back_period_s": 0.5, "policy": {"policy_function": _wants}})
    assert cfg is not None and isinstance(cfg.policy, AutoscalingPolicy)
    facts = autoscaling.Facts("app", "D", 1, ["app#D#1"])
    st = autoscaling.ScaleState()
    assert autoscaling.decide(cfg, 1, 0, now=0.0, state=st, facts=facts) == 1  # wants 1 (asked once): stays
    assert autoscaling.decide(cfg, 1, 1, now=1.0, state=st, facts=facts) == 1  # wants 3: waits out the delay
    assert autoscaling.decide(cfg, 1, 1, now=2.0, state=st, facts=facts) == 4  # wants 1 + 3: kept in max_replicas
    assert st.policy_state == {"asked": 3} and st.last_up == 2.0
    assert autoscaling.decide(cfg, 4, 0, now=5.0, state=st, facts=facts) == 4  # 4 asked, none ongoing
    down = AutoscalingConfig(min_replicas=2, max_replicas=8, downscale_delay_s=0, downscaling_factor=0.5,
                             policy=AutoscalingPolicy(policy_function=_Fixed, policy_kwargs={"n": 0}))
    st = autoscaling.ScaleState()
    assert autoscaling.decide(down, 8, 0, now=0.0, state=st, facts=facts) == 4  # half way to 0, by the factor
    assert autoscaling.decide(down, 4, 0, now=1.0, state=st, facts=facts) == 2  # ... and never under min_replicas
    named = AutoscalingConfig.coerce({"max_replicas": 2, "policy": {
        "policy_function": "ray.serve.autoscaling_policy:default_autoscaling_policy"}})
    assert named is not None and named.policy is None  # Ray's default policy, by name
    with pytest.raises(ValueError, match=r"policy_function='no_such_module:f'\): cannot import it"):
        AutoscalingPolicy(policy_function="no_such_module:f").load()


def test_rays_2_60_deployment_options_are_accepted_with_a_warning_that_says_what_happens_instead():
    """Options Ray 2.60 added to ``@serve.deployment`` were refused as unknown (a TypeError)."""
    said = {"max_constructor_retry_count": (3, "fails serve.run at once"),
            "rolling_update_percentage": (0.5, "starts all the new replicas beside the old ones"),
            "max_surge_percent": (25, "starts all the new replicas beside the old ones")}
    for option, (value, why) in said.items():
        with pytest.warns(UserWarning, match=rf"deployment 'A': {option}=.* has no effect in muster: .*{why}"):
            assert serve.deployment(**{option: value})(A.func_or_class).config.name == "A"


def test_an_ingress_app_with_websocket_routes_is_taken_without_a_warning():
    """Ray's websocket snippets declare ``@app.websocket`` routes; muster serves them now (it warned at once that it
    would not), so decorating the class says nothing."""
    fastapi = pytest.importorskip("fastapi")
    app = fastapi.FastAPI()

    with warnings.catch_warnings():
        warnings.simplefilter("error")

        @serve.ingress(app)
        class Echo:
            @app.websocket("/ws")
            async def echo(self, ws) -> None:
                await ws.accept()


def test_rays_config_models_validate_and_give_back_the_config_file():
    """Ray's ``ServeDeploySchema``/``ServeApplicationSchema``/``DeploymentSchema``/``RayActorOptionsSchema``,
    ``EncodingType`` and ``APIType`` (the models failed to import)."""
    from muster.serve.schema import (
        APIType,
        DeploymentSchema,
        EncodingType,
        LoggingConfig,
        RayActorOptionsSchema,
        ServeApplicationSchema,
        ServeDeploySchema,
    )

    raw = {"http_options": {"host": "127.0.0.1", "port": 8123},
           "applications": [{"name": "app1", "route_prefix": "/a", "import_path": "mod:app", "deployments": [
               {"name": "Model", "num_replicas": 2, "ray_actor_options": {"num_cpus": 0.5}}]}]}
    config = ServeDeploySchema.parse_obj(raw)
    app = config.applications[0]
    assert isinstance(app, ServeApplicationSchema) and app.deployment_names() == ["Model"] and app.host == "0.0.0.0"
    dep = app.deployments[0]
    assert isinstance(dep, DeploymentSchema) and dep.ray_actor_options == RayActorOptionsSchema(num_cpus=0.5)
    assert dep.max_ongoing_requests == 5 and dep.ray_actor_options.num_gpus is None
    assert config.model_dump(exclude_unset=True) == raw  # what a config file holds, for muster serve deploy
    assert ServeConfig.from_dict(config.dict(exclude_unset=True)).applications[0].overrides() == {
        "Model": {"num_replicas": 2, "ray_actor_options": {"num_cpus": 0.5}}}
    built = ServeDeploySchema(applications=[ServeApplicationSchema(
        name="b", import_path="mod:b", deployments=[DeploymentSchema(name="D", max_ongoing_requests=8)])])
    assert built.dict(exclude_unset=True) == {"applications": [
        {"name": "b", "import_path": "mod:b", "deployments": [{"name": "D", "max_ongoing_requests": 8}]}]}
    with pytest.raises(ValueError, match="num_replicas=0"):
        DeploymentSchema(name="D", num_replicas=0)
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['num_replica'\]"):
        DeploymentSchema(name="D", num_replica=2)
    with pytest.raises(ValueError, match="num_cpus=-1: use a number >= 0"):
        DeploymentSchema(name="D", ray_actor_options={"num_cpus": -1})
    with pytest.raises(ValueError, match=r"application names must be unique; repeated: \['x'\]"):
        ServeDeploySchema(applications=[{"name": "x", "import_path": "m:a"},
                                        {"name": "x", "import_path": "m:b", "route_prefix": "/b"}])
    with pytest.raises(ValueError, match="route_prefix='a': use a path starting with '/'"):
        ServeApplicationSchema(import_path="m:a", route_prefix="a")
    with pytest.raises(ValueError, match=r"missing field\(s\) \['import_path'\]"):
        ServeApplicationSchema(name="x")
    assert LoggingConfig(encoding=EncodingType.JSON).encoding == "JSON"
    assert APIType.get_valid_user_values() == ["imperative", "declarative"]
