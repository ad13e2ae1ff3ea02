"""One Serve instance (ingress on a free port) per test module; its replicas live across the module's tests."""

from __future__ import annotations

import os

import pytest

pytest.register_assert_rewrite("serve_helpers")  # its checks' failures show the values, as a test module's do

from serve_helpers import serving  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _serve_store(tmp_path_factory):
    """Serve records into the run store of MUSTER_STORAGE_PATH: a temporary one here, never ~/muster_results."""
    old = os.environ.get("MUSTER_STORAGE_PATH")
    os.environ["MUSTER_STORAGE_PATH"] = str(tmp_path_factory.mktemp("serve-runs"))
    yield
    if old is None:
        os.environ.pop("MUSTER_STORAGE_PATH", None)
    else:
        os.environ["MUSTER_STORAGE_PATH"] = old


@pytest.fixture(scope="module")
def client():
    """An httpx client on a fresh Serve ingress; after the module Serve stops and its processes must be gone."""
    with serving() as c:
        yield c
