"""One Serve instance (ingress on a free port) per test module; its replicas live across the module's tests."""

from __future__ import annotations

import pytest
from serve_helpers import serving


@pytest.fixture(scope="module")
def client():
    """An httpx client on a fresh Serve ingress; after the module Serve stops and its processes must be gone."""
    with serving() as c:
        yield c
