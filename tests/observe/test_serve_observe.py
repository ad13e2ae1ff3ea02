"""Serve in the run store: a real app on a free port, driven by httpx, then the store, the API, `muster logs`,
the page."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

pytest.importorskip("starlette")
pytestmark = pytest.mark.allow_leftover_workers  # the module's replicas live across its tests; the fixture stops them

GOOD, BAD = 40, 4


def _wait(cond, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """App ``obs`` (deployment ``Echo``, 2 replicas) served, loaded, and one replica SIGKILLed and replaced."""
    from muster import serve
    from muster.observe.store.reader import StoreReader

    storage = str(tmp_path_factory.mktemp("serve-store"))
    old = os.environ.get("MUSTER_STORAGE_PATH")
    os.environ["MUSTER_STORAGE_PATH"] = storage

    @serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0})
    class Echo:
        def __init__(self):
            print(f"echo replica up in pid {os.getpid()}", flush=True)

        def __call__(self, request):
            if request.query_params.get("fail"):
                raise ValueError("asked to fail")
            print(f"served {request.query_params.get('i')} in pid {os.getpid()}", flush=True)
            return {"pid": os.getpid()}

    try:
        serve.start(http_options={"host": "127.0.0.1", "port": 0})
        port = serve.status().http["port"]
        serve.run(Echo.bind(), name="obs", route_prefix="/obs")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
            codes = [c.get("/obs", params={"i": i}).status_code for i in range(GOOD)]
            codes += [c.get("/obs", params={"fail": 1}).status_code for _ in range(BAD)]
        assert codes == [200] * GOOD + [500] * BAD
        reader = StoreReader.for_root(storage)
        first = _wait(lambda: len(reader.serve_replicas("obs", "Echo")) == 2 and reader.serve_replicas("obs", "Echo"),
                      30, "two replicas in the store")
        _wait(lambda: any((m["served"] or 0) >= GOOD and (m["errors"] or 0) >= BAD
                          for m in reader.serve_metrics("obs", "Echo")), 30, "the load in the metrics samples")
        victim = next(r for r in first if r["replica"] == 1)
        os.kill(victim["pid"], signal.SIGKILL)
        _wait(lambda: [r["state"] for r in reader.serve_replicas("obs", "Echo")].count("RUNNING") == 2
              and len(reader.serve_replicas("obs", "Echo")) == 3, 60, "the killed replica replaced in the store")
        _wait(lambda: any(m["restarts"] == 1 and m["running"] == 2 for m in reader.serve_metrics("obs", "Echo")),
              30, "a sample after the restart")
        yield {"storage": storage, "reader": reader, "victim": victim, "port": port}
    finally:
        serve.shutdown()
        if old is None:
            os.environ.pop("MUSTER_STORAGE_PATH", None)
        else:
            os.environ["MUSTER_STORAGE_PATH"] = old


def test_store_holds_requests_latencies_and_replica_events(served):
    reader = served["reader"]
    (dep,) = reader.serve_deployments()
    assert (dep["app"], dep["deployment"], dep["running"], dep["dead"]) == ("obs", "Echo", 2, 1)
    rows = reader.serve_metrics("obs", "Echo")
    last = rows[-1]
    assert last["served"] == GOOD and last["errors"] == BAD and last["target"] == 2 and last["restarts"] == 1
    assert any(r["p50_ms"] is not None and 0 < r["p50_ms"] <= r["p99_ms"] for r in rows)
    assert any(r["requests_per_s"] > 0 for r in rows)
    per_replica = {n: reader.serve_metrics("obs", "Echo", replica=n) for n in (0, 1)}
    assert all(per_replica.values()), "each replica has its own samples"
    reps = {r["replica"]: r for r in reader.serve_replicas("obs", "Echo")}
    assert reps[1]["state"] == "DEAD" and reps[1]["pid"] == served["victim"]["pid"] and reps[1]["cause"]
    assert reps[0]["state"] == reps[2]["state"] == "RUNNING"
    kinds = [e["kind"] for e in reader.serve_events("obs")]
    assert "deploy" in kinds and kinds.count("replica_started") == 3
    assert "replica_died" in kinds and "restart" in kinds


def test_logs_per_replica(served):
    out = subprocess.run(
        [sys.executable, "-m", "muster.cli", "logs", "obs", "--replica", "1", "--storage-path", served["storage"]],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    pid = served["victim"]["pid"]
    lines = out.stdout.splitlines()
    assert f"(serve obs/Echo #1, pid={pid}) echo replica up in pid {pid}" in lines  # printed in its constructor
    assert lines and all(line.startswith("(serve obs/Echo #1,") for line in lines)
    everyone = subprocess.run(
        [sys.executable, "-m", "muster.cli", "logs", "obs/Echo", "--storage-path", served["storage"]],
        capture_output=True, text=True, timeout=60,
    ).stdout
    assert sum("served " in line for line in everyone.splitlines()) == GOOD
    bad = subprocess.run(
        [sys.executable, "-m", "muster.cli", "logs", "nope", "--replica", "0", "--storage-path", served["storage"]],
        capture_output=True, text=True, timeout=60,
    )
    assert bad.returncode == 1 and "No Serve app or deployment 'nope'" in bad.stderr


def test_dashboard_api(served, dashboard):
    d = dashboard(served["storage"])
    (dep,) = [x for x in httpx.get(d.base + "api/serve").json()["deployments"] if x["app"] == "obs"]
    assert dep["app"] == "obs" and dep["last"]["served"] == GOOD and dep["last"]["errors"] == BAD
    detail = httpx.get(d.base + "api/serve/obs/Echo").json()
    assert sorted(r["replica"] for r in detail["replicas"]) == [0, 1, 2]
    assert "replica_died" in [e["kind"] for e in detail["events"]]
    metrics = httpx.get(d.base + "api/serve/obs/Echo/metrics").json()["metrics"]
    assert metrics[-1]["served"] == GOOD
    logs = httpx.get(d.base + "api/serve/obs/Echo/logs", params={"replica": 0}).json()["logs"]
    assert logs and {line["replica"] for line in logs} == {0}
    assert httpx.get(d.base + "api/serve/obs/Nope").status_code == 404


def test_serve_page(served, dashboard, page, screenshots):
    d = dashboard(served["storage"])
    page.goto(d.base + "#/serve")
    row = page.wait_for_selector("#serve-deps tr[data-dep='obs/Echo']")
    assert str(GOOD) in row.inner_text() and str(BAD) in row.inner_text()
    row.query_selector("a").click()
    page.wait_for_selector("#replicas tr[data-replica='2']")
    assert "DEAD" in page.inner_text("#replicas tr[data-replica='1']")
    for chart in ("#chart-rate", "#chart-latency", "#chart-ongoing"):
        assert page.query_selector(f"{chart} canvas") is not None, chart
    assert "replica_died" in page.inner_text("#serve-events")
    page.wait_for_selector("#serve-logs:has-text('served')")
    screenshots(page, "dashboard-serve")


def test_a_replica_whose_process_is_gone_reads_lost(tmp_path):
    """A driver that died without serve.shutdown() leaves RUNNING rows: the reader tells them apart."""
    import socket

    from muster.observe.store import writer
    from muster.observe.store.reader import StoreReader

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(30)
    path = str(tmp_path / "runs.db")
    conn = writer.connect(path)
    for rid, n, pid in (("a#D#1", 0, gone.pid), ("a#D#2", 1, os.getpid())):
        conn.execute("INSERT INTO serve_replicas (id, app, deployment, replica, host, pid, state, started_at)"
                     " VALUES (?, 'a', 'D', ?, ?, ?, 'RUNNING', 1)", (rid, n, socket.gethostname(), pid))
    conn.commit()
    conn.close()
    reader = StoreReader(path)
    assert {r["replica"]: r["state"] for r in reader.serve_replicas("a", "D")} == {0: "LOST", 1: "RUNNING"}
    (dep,) = reader.serve_deployments()
    assert (dep["running"], dep["lost"], dep["dead"]) == (1, 1, 0)


def test_llm_deployment_rows_show_on_the_serve_pages(tmp_path, dashboard, page):
    """Rows with the LLM columns (schema v3): the list shows tokens/s, TTFT and queue; the deployment page
    charts them. (The rows' real origin is tested in tests/serve_llm/test_openai_server.py.)"""
    import socket

    from muster.observe.store import writer

    path = str(tmp_path / ".muster" / "runs.db")
    os.makedirs(os.path.dirname(path))
    conn = writer.connect(path)
    conn.execute("INSERT INTO serve_replicas (id, app, deployment, replica, host, pid, state, started_at)"
                 " VALUES ('r1', 'llm', 'LLMServer:m', 0, ?, ?, 'RUNNING', 1)", (socket.gethostname(), os.getpid()))
    for i in range(5):
        conn.execute("INSERT INTO serve_metrics (time, app, deployment, replica, served, errors, ongoing, running,"
                     " llm_requests, prompt_tokens, completion_tokens, tokens_per_s, ttft_p50_ms, ttft_p99_ms,"
                     " ttft_samples, engine_running, engine_waiting, queue_depth)"
                     " VALUES (?, 'llm', 'LLMServer:m', NULL, ?, 0, 3, 1, ?, ?, ?, 4321.5, 12.5, 40.0, 8, 3, 2, 5)",
                     (100.0 + i, 8 * i, 8 * i, 80 * i, 256 * i))
    conn.commit()
    conn.close()
    d = dashboard(str(tmp_path))
    page.goto(d.base + "#/serve")
    row = page.wait_for_selector("#serve-deps tr[data-dep='llm/LLMServer:m']")
    cells = row.inner_text().split("\t")
    assert cells[-4:-1] == ["4322", "12.50 ms", "5"], cells  # tokens/s, TTFT p50, queue depth
    row.query_selector("a").click()
    page.wait_for_selector("#serve-llm:not([hidden])")
    for chart in ("#chart-tokens", "#chart-ttft", "#chart-queue"):
        assert page.query_selector(f"{chart} canvas") is not None, chart


def test_a_late_stats_reply_loses_no_latency_and_counts_nothing_twice(served):
    """The controller samples each replica about once a second and leaves out a reply that takes over
    5 s. Here the reply waits behind a 7 s ``reconfigure``: its requests' latencies must come in a later
    sample (they were dropped), and the requests served before it must not be counted again."""
    from muster import serve

    @serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 0}, user_config={"sleep_s": 0})
    class Slow:
        def reconfigure(self, config):
            time.sleep(config["sleep_s"])

        def __call__(self, request):
            return "ok"

    reader = served["reader"]
    serve.run(Slow.bind(), name="late", route_prefix="/late")
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{served['port']}", timeout=30) as c:
            assert {c.get("/late").status_code for _ in range(10)} == {200}
            _wait(lambda: any(m["served"] == 10 for m in reader.serve_metrics("late", "Slow")), 30, "10 served")
            update = threading.Thread(target=serve.run, args=(Slow.options(user_config={"sleep_s": 7}).bind(),),
                                      kwargs={"name": "late", "route_prefix": "/late"})
            update.start()
            time.sleep(1.5)  # the next stats call now waits behind reconfigure() in the replica
            seen = len(reader.serve_metrics("late", "Slow"))
            assert {c.get("/late").status_code for _ in range(20)} == {200}
            update.join(timeout=60)
        _wait(lambda: [m for m in reader.serve_metrics("late", "Slow")[seen:] if m["served"] >= 30],
                     30, "the 20 requests served during reconfigure() in the samples")
        after = reader.serve_metrics("late", "Slow")[seen:]
        assert any(m["p50_ms"] is not None for m in after), after
        assert max(m["served"] for m in after) == 30, after
    finally:
        serve.delete("late")


def test_a_burst_before_the_first_stats_round_shows_as_a_rate():
    """A loaded machine can poll a new deployment for the first time only after a burst is over: the
    first round's rate then spans the replica's time up (it read 0 requests/s, as if nothing was served)."""
    from muster.serve._internal.metrics import DeploymentMetrics

    m = DeploymentMetrics()
    snap = {"served": 8, "errors": 2, "ongoing": 0, "latency_ms": [1.0] * 10, "acks": {}, "up_s": 2.0}
    m.update({"r1": snap}, now=100.0)
    assert m.served == 8 and m.errors == 2
    assert m.requests_per_s == 5.0 and m.by_replica["r1"]["requests_per_s"] == 5.0
    # a replica started after the last round counts from its start; later rounds from the round before
    m.update({"r1": dict(snap, served=18, up_s=3.0), "r2": dict(snap, up_s=0.5)}, now=101.0)
    assert m.by_replica["r1"]["requests_per_s"] == 10.0 and m.by_replica["r2"]["requests_per_s"] == 20.0
