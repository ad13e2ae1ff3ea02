"""The dashboard's server: its JSON API over a real run, and who may read it."""

from __future__ import annotations

import httpx
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")


def test_api_serves_the_run(recorded, dashboard):
    d = dashboard(recorded["storage"])
    assert d.token is None and d.base.startswith("http://127.0.0.1:")
    runs = httpx.get(d.base + "api/runs").json()
    assert runs["root"] == recorded["storage"]
    (run,) = runs["runs"]
    assert run["name"] == "recorded" and run["status"] == "FINISHED"
    detail = httpx.get(f"{d.base}api/runs/{run['id']}").json()
    assert [w["rank"] for w in detail["workers"]] == [0, 1]
    assert [e["kind"] for e in detail["events"]].count("failure") == 1
    reports = httpx.get(f"{d.base}api/runs/{run['id']}/reports").json()["reports"]
    assert len(reports) == len(recorded["result"].all_reports)
    after = httpx.get(f"{d.base}api/runs/{run['id']}/reports", params={"after": reports[-2]["id"]}).json()["reports"]
    assert after == reports[-1:]  # incremental polling
    logs = httpx.get(f"{d.base}api/runs/{run['id']}/logs", params={"rank": 0, "tail": 2}).json()["logs"]
    assert len(logs) == 2 and logs[-1]["line"] == "epoch 5 done on rank 0"
    assert httpx.get(f"{d.base}api/runs/999").status_code == 404
    page = httpx.get(d.base)
    assert page.status_code == 200 and "uPlot.iife.min.js" in page.text
    assert httpx.get(d.base + "static/vendor/uPlot.iife.min.js").status_code == 200


def test_read_only_and_loopback_host_only(recorded, dashboard):
    d = dashboard(recorded["storage"])
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        r = httpx.request(method, d.base + "api/runs")
        assert r.status_code == 405 and "read-only" in r.text
    # a page elsewhere that rebinds its DNS name to 127.0.0.1 sends its own Host
    r = httpx.get(d.base + "api/runs", headers={"Host": "attacker.example:8265"})
    assert r.status_code == 403 and "--token" in r.text
    assert httpx.get(d.base + "api/runs", headers={"Host": "localhost"}).status_code == 200


def test_other_addresses_need_the_generated_token(recorded, dashboard):
    d = dashboard(recorded["storage"], "--host", "0.0.0.0")
    assert d.token and len(d.token) >= 24
    base = d.base.replace("0.0.0.0", "127.0.0.1")
    denied = httpx.get(base + "api/runs")
    assert denied.status_code == 401 and "?token=" in denied.text
    assert httpx.get(base + "api/runs", params={"token": "wrong"}).status_code == 401
    assert httpx.get(base + "api/runs", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(base + "api/runs", headers={"Authorization": f"Bearer {d.token}"}).status_code == 200
    with httpx.Client() as client:  # the printed URL sets a cookie; the page's own requests then pass
        first = client.get(base, params={"token": d.token})
        assert first.status_code == 200 and "HttpOnly" in first.headers["set-cookie"]
        assert client.get(base + "api/runs").status_code == 200
    assert httpx.post(base + "api/runs", headers={"Authorization": f"Bearer {d.token}"}).status_code == 405


def test_a_given_token_is_used(recorded, dashboard):
    d = dashboard(recorded["storage"], "--host", "0.0.0.0", "--token", "s3cret-token-for-the-test")
    assert d.token == "s3cret-token-for-the-test"
    base = d.base.replace("0.0.0.0", "127.0.0.1")
    assert httpx.get(base + "api/runs", params={"token": d.token}).status_code == 200


def test_no_store_is_a_clear_error(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "muster.cli", "dashboard", "--storage-path", str(tmp_path),
                           "--port", "0"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "No run store" in proc.stderr and "--storage-path" in proc.stderr
