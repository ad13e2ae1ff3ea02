"""Ray 2.60's application-level autoscaling policy (a config file app's ``autoscaling_policy``): one function decides
the replica counts of all the app's autoscaling deployments together, from all their contexts."""

from __future__ import annotations

import pytest
from serve_helpers import loaded, wait_until

from muster import serve
from muster.serve._internal import autoscaling
from muster.serve.autoscaling_policy import AutoscalingPolicy
from muster.serve.config import AutoscalingConfig
from muster.serve.schema import ServeConfig, deploy

pytestmark = pytest.mark.allow_leftover_workers  # the module's Serve instance outlives each test


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=8)
class Back:
    def __call__(self) -> str:
        return "back"


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=8)
class Front:
    def __init__(self, back):
        self.back = back

    async def __call__(self, request) -> str:
        import asyncio

        await asyncio.sleep(float(request.query_params.get("s", "0")))
        return "front"


app = Front.bind(Back.bind())


def follow_the_front(ctxs):
    """Both deployments run 3 replicas while Front is busy (Back gets no requests at all), else 1."""
    by_name = {dep.name: ctx for dep, ctx in ctxs.items()}
    n = 3 if by_name["Front"].total_num_requests >= 2 else 1
    return {dep: n for dep in ctxs}, {dep: {"calls": ctx.policy_state.get("calls", 0) + 1} for dep, ctx in ctxs.items()}


_AUTO = {"min_replicas": 1, "max_replicas": 3, "upscale_delay_s": 0, "downscale_delay_s": 0,
         "metrics_interval_s": 0.1, "look_back_period_s": 0.5}


def test_an_app_policy_scales_both_deployments_under_real_load(client):
    cfg = ServeConfig.from_dict({"applications": [{
        "name": "pair", "route_prefix": "/pair", "import_path": f"{__name__}:app",
        "autoscaling_policy": {"policy_function": f"{__name__}:follow_the_front"},
        "deployments": [{"name": "Front", "autoscaling_config": _AUTO},
                        {"name": "Back", "autoscaling_config": _AUTO}]}]})
    deploy(cfg)

    def running() -> tuple[int, int]:
        deps = serve.status().applications["pair"].deployments
        return deps["Front"].replica_states.get("RUNNING", 0), deps["Back"].replica_states.get("RUNNING", 0)

    assert running() == (1, 1)
    with loaded(client, "/pair?s=0.5"):
        wait_until(lambda: running() == (3, 3), 60, "both deployments at the policy's 3 replicas")
    wait_until(lambda: running() == (1, 1), 60, "both back to 1 once Front is idle")
    serve.delete("pair")


def test_the_config_entry_is_checked():
    one = {"name": "a", "import_path": "m:app"}
    with pytest.raises(ValueError, match=r"autoscaling_policy: unknown field\(s\) \['policy'\]"):
        ServeConfig.from_dict({"applications": [{**one, "autoscaling_policy": {"policy": "m:f"}}]})
    with pytest.raises(ValueError, match=r"autoscaling_policy='m:f': pass a AutoscalingPolicy or a dict"):
        ServeConfig.from_dict({"applications": [{**one, "autoscaling_policy": "m:f"}]})


def _member(name: str, current: int, ongoing: float, **cfg) -> autoscaling.Member:
    config = AutoscalingConfig(**{"min_replicas": 1, "max_replicas": 4, "upscale_delay_s": 0, "downscale_delay_s": 0,
                                  **cfg})
    facts = autoscaling.Facts("a", name, current, [])
    return autoscaling.Member(config, current, ongoing, autoscaling.ScaleState(), facts)


def test_decisions_go_through_each_deployments_factors_bounds_and_delays():
    asked = {"A": 10, "B": 3}
    policy = autoscaling.AppPolicy(AutoscalingPolicy(
        policy_function=lambda ctxs: ({d: asked[d.name] for d in ctxs if d.name in asked}, None)))
    members = [_member("A", 1, 0), _member("B", 1, 0, upscaling_factor=0.5), _member("C", 2, 0)]
    assert autoscaling.decide_app(policy, members, now=1.0) == {"A": 4, "B": 2}  # A capped, B halfway, C kept
    slow = [_member("A", 1, 0, upscale_delay_s=5)]
    assert autoscaling.decide_app(policy, slow, now=1.0) == {"A": 1}  # wanted for 0 s of the 5
    assert autoscaling.decide_app(policy, slow, now=7.0) == {"A": 4}
    bad = autoscaling.AppPolicy(AutoscalingPolicy(policy_function=lambda ctxs: ({"A": 2}, {})))
    with pytest.raises(ValueError, match=r"returned \(\{'A': 2\}, \{\}\).*keyed by the ctx dict's keys"):
        autoscaling.decide_app(bad, [_member("A", 1, 0)], now=1.0)


SEEN: list = []  # what the custom-metrics policy below saw, tick by tick (it runs in this process, the driver)


def scale_on_load(ctx):
    """Ray's custom-metrics policy (its autoscaling guide's): 2 replicas while a replica reports a load over 50."""
    load = ctx.aggregated_metrics.get("load", {})
    SEEN.append((dict(load), {r: [p.value for p in s] for r, s in ctx.raw_metrics.get("load", {}).items()},
                 list(ctx.running_replicas)))
    return (2 if load and max(load.values()) > 50 else 1), {}


@serve.deployment(ray_actor_options={"num_cpus": 0}, autoscaling_config={
    **_AUTO, "max_replicas": 2, "policy": {"policy_function": scale_on_load}})
class Gauged:
    def __init__(self):
        self.load = 0.0

    def set_load(self, value: float) -> None:
        self.load = value

    async def record_autoscaling_stats(self) -> dict:
        return {"load": self.load}

    def __call__(self) -> str:
        return "ok"


def test_record_autoscaling_stats_reaches_the_policy_as_rays_custom_metrics(client):
    """A replica's record_autoscaling_stats() values reach the policy as ctx.aggregated_metrics / raw_metrics, per
    running replica (they were always empty: the policy never saw the load and kept 1 replica)."""
    handle = serve.run(Gauged.bind(), name="gauged", route_prefix=None)

    def running() -> int:
        return serve.status().applications["gauged"].deployments["Gauged"].replica_states.get("RUNNING", 0)

    wait_until(lambda: SEEN and SEEN[-1][0], 30, "the policy to see the replica's load")
    handle.set_load.remote(90).result()
    wait_until(lambda: running() == 2, 60, "a second replica once the load is over 50")
    load, raw, replicas = SEEN[-1]
    busy = [r for r, v in load.items() if v > 50]
    assert busy and set(load) == set(raw) and set(load) <= set(replicas)
    assert raw[busy[0]][-1] == 90.0  # the samples of the window, oldest first
    handle.broadcast("set_load", 0).results(timeout_s=30)
    wait_until(lambda: running() == 1, 60, "back to 1 replica once every replica reports 0")
    serve.delete("gauged")


WINDOWS: list = []  # the samples of each window the policy below saw: [(timestamp, value)] per replica


def keep_one(ctx):
    WINDOWS.extend([(p.timestamp, p.value) for p in s] for s in ctx.raw_metrics.get("calls", {}).values())
    return 1, {}


@serve.deployment(ray_actor_options={"num_cpus": 0}, autoscaling_config={
    **_AUTO, "max_replicas": 1, "metrics_interval_s": 1.0, "look_back_period_s": 1.0,
    "policy": {"policy_function": keep_one}})
class Sampled:
    def __init__(self):
        self.calls = 0

    def record_autoscaling_stats(self) -> dict:
        self.calls += 1
        return {"calls": self.calls}


def test_record_autoscaling_stats_is_sampled_as_rays_several_times_per_window(client):
    """Ray calls it every min(look_back_period_s * 0.2, metrics_interval_s): here every 0.2 s, so a 1 s window
    holds about five samples (muster called it once per 1 s stats round: one sample a window, and "max" or "mean"
    over the window saw a single value)."""
    serve.run(Sampled.bind(), name="sampled", route_prefix=None)
    wait_until(lambda: len(WINDOWS) >= 3, 30, "three of the policy's windows")
    serve.delete("sampled")
    window = WINDOWS[-1]
    assert len(window) >= 3, WINDOWS
    gaps = [b[0] - a[0] for a, b in zip(window, window[1:])]
    assert all(0.1 < g < 0.5 for g in gaps), gaps  # about 0.2 s apart
    values = [v for _, v in window]
    assert values == sorted(values) and values[-1] - values[0] == len(values) - 1  # every call, in order
