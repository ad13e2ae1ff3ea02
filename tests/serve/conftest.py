"""One Serve instance (ingress on a free port) per test module; its replicas live across the module's tests."""

from __future__ import annotations

import time

import httpx
import psutil
import pytest

from muster import serve

pytestmark = pytest.mark.allow_leftover_workers


def _serve_processes() -> list[psutil.Process]:
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if any("serve" in part for part in child.cmdline()[-1:]) or child.name().startswith("muster"):
                out.append(child)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.fixture(scope="module")
def client():
    """An httpx client on a fresh Serve ingress; Serve is shut down (and its processes checked) after the module."""
    serve.start(http_options={"host": "127.0.0.1", "port": 0})
    port = serve.status().http["port"]
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
        yield c
    serve.shutdown()


def wait_until(cond, timeout_s: float = 30.0, what: str = "condition"):
    """Poll ``cond`` (bounded); return its truthy value or fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
