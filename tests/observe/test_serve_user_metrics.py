"""Ray Serve's custom metrics (``serve.metrics``): a real app of 2 replicas counts its HTTP requests in a Counter and
observes a Histogram; the totals reach ``serve.status()``, the run store and the dashboard's Prometheus ``/metrics``."""

from __future__ import annotations

import os
import re

import httpx
import pytest
from _shared import wait_for

pytest.importorskip("starlette")

N = 24


def _counted(series: list[dict], name: str) -> float:
    return sum(s["value"] for s in series if s["name"] == name)


@pytest.fixture
def port(storage, monkeypatch):
    """Serve on a free port, recording into the run store at ``storage``."""
    from muster import serve

    monkeypatch.setenv("MUSTER_STORAGE_PATH", storage)
    serve.start(http_options={"host": "127.0.0.1", "port": 0})
    try:
        yield serve.status().http["port"]
    finally:
        serve.shutdown()


def test_counter_and_histogram_of_two_replicas_are_exported(port, storage, dashboard, page):
    from muster import serve
    from muster.observe.store.reader import StoreReader

    @serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0})
    class Counted:
        def __init__(self):
            self.requests = serve.metrics.Counter("my_requests", description="Requests seen.",
                                                  tag_keys=("model", "route"))
            self.requests.set_default_tags({"model": "m1"})
            self.sizes = serve.metrics.Histogram("my_sizes", description="Sizes.", boundaries=[1, 10, 100])

        def __call__(self, request):
            self.requests.inc()
            self.sizes.observe(int(request.query_params["size"]))
            return {"pid": os.getpid()}

    serve.run(Counted.bind(), name="counted", route_prefix="/counted")
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
        pids = {c.get("/counted", params={"size": [5, 50, 500][i % 3]}).json()["pid"] for i in range(N)}
    assert len(pids) == 2, "both replicas served requests"

    def custom() -> list[dict]:
        m = serve.status().applications["counted"].deployments["Counted"].metrics
        return m.get("custom_metrics") or []

    assert wait_for(lambda: _counted(custom(), "my_requests") == N, 30), custom()
    series = custom()
    counters = [s for s in series if s["name"] == "my_requests"]
    assert len({s["tags"]["replica"] for s in counters}) == 2  # a series per replica: Ray's tags and the user's
    for s in counters:
        assert s["kind"] == "counter" and s["tags"]["model"] == "m1" and s["tags"]["route"] == "/counted"
        assert s["tags"]["deployment"] == "Counted" and s["tags"]["application"] == "counted"
        assert re.fullmatch(r"\w+", s["tags"]["replica"])  # Ray's: the replica's unique_id (was app#dep#id)
    hist = [s for s in series if s["name"] == "my_sizes"]
    assert sum(h["count"] for h in hist) == N and sum(h["sum"] for h in hist) == (5 + 50 + 500) * N // 3
    assert [sum(h["buckets"][i] for h in hist) for i in range(4)] == [0, N // 3, N // 3, N // 3]

    reader = StoreReader.for_root(storage)
    assert wait_for(lambda: _counted(reader.serve_custom_metrics("counted"), "my_requests") == N, 30)
    rows = reader.serve_custom_metrics("counted")
    assert {r["tags"]["replica"] for r in rows if r["name"] == "my_requests"} == \
        {s["tags"]["replica"] for s in counters}

    d = dashboard(storage)
    text = httpx.get(d.base + "metrics").text
    totals = [float(v) for v in re.findall(r'^ray_my_requests_total\{[^}]*model="m1"[^}]*\} (\S+)$', text, re.M)]
    assert len(totals) == 2 and sum(totals) == N, text
    assert "# TYPE ray_my_requests_total counter" in text and "# TYPE ray_my_sizes histogram" in text
    counts = re.findall(r'^ray_my_sizes_count\{[^}]*\} (\S+)$', text, re.M)
    assert sum(int(x) for x in counts) == N
    inf = re.findall(r'^ray_my_sizes_bucket\{[^}]*le="\+Inf"[^}]*\} (\S+)$', text, re.M)
    assert sum(int(x) for x in inf) == N
    page.goto(d.base + "#/serve/counted/Counted")  # the Serve page lists the series of the last sample
    table = page.wait_for_selector("#custom-metrics")
    shown = table.inner_text()
    assert shown.count("my_requests") == 2 and sum(int(c) for c in re.findall(r"count (\d+),", shown)) == N

    @serve.deployment(ray_actor_options={"num_cpus": 0})
    class Reserved:
        def __init__(self):
            serve.metrics.Gauge("mine", tag_keys=("replica",))

    with pytest.raises(serve.RayServeException, match="'replica' tag in tag_keys is reserved"):
        serve.run(Reserved.bind(), name="reserved", route_prefix=None)
