"""Fixtures for the runtime tests."""

from __future__ import annotations

import pytest

from muster.core.local import LocalRuntime


@pytest.fixture
def small_rt(monkeypatch):
    """A separate 2-CPU engine whose zygote preloads nothing (these workers never touch torch)."""
    monkeypatch.setenv("MUSTER_PRELOAD", "")
    rt = LocalRuntime(num_cpus=2, num_gpus=0)
    try:
        rt.start(wait=True)
        yield rt
    finally:
        rt.shutdown()
