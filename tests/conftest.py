"""Shared fixtures: one engine per test session, no leaked processes, clean env."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import psutil
import pytest

import muster
import _background
from _shared import engine_workers, running

# A suite started as a background job (``cmd &`` in a script) inherits SIGINT ignored, and so
# would every driver the Ctrl-C tests start: give this process Python's own handler, which
# its children get back as the default action.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Tests run 2-4 workers on a 2-core machine: let the engine hand out 4 CPUs.
TEST_CPUS = 4


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """With pytest-xdist (`bash scripts/test.sh -n 2`): a module's tests run in one process,
    so its module-scoped fixtures start once, and all of tests/cluster in one, so one Ray cluster serves it.
    (xdist's ``loadgroup`` would do this with markers, but its group suffix is lost on pytest 9.2's node ids.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::")[0]
            return "tests/cluster" if path.startswith("tests/cluster/") else path

    return ByModule(config, log)


def pytest_collection_finish(session):
    if "PYTEST_XDIST_WORKER" not in os.environ:  # under xdist the other worker uses the idle core
        _background.start_for(session.items)


def pytest_sessionfinish(session):
    _background.stop_all()


@pytest.fixture(scope="session", autouse=True)
def _engine(tmp_path_factory):
    os.environ.setdefault("MUSTER_PLAIN_PROGRESS", "1")
    # what records into the default storage path (user metrics of tasks and actors, Serve, a RunConfig
    # without storage_path) goes to a temporary one, never ~/muster_results
    os.environ.setdefault("MUSTER_STORAGE_PATH", str(tmp_path_factory.mktemp("default-storage")))
    muster.init(num_cpus=TEST_CPUS, num_gpus=0, ignore_reinit_error=True)
    yield
    muster.shutdown()


@pytest.fixture(autouse=True)
def _restore_env():
    """Put back what a test changed in the environment, and only that. Clearing and refilling it after
    every test rewrote every variable while the Ray engine's native threads read it (getenv is not safe
    against a concurrent setenv): a CI run died of SIGSEGV in getenv, in the cluster tests."""
    saved = dict(os.environ)
    yield
    for key in [k for k in os.environ if k not in saved]:
        del os.environ[key]
    for key, value in saved.items():
        if os.environ.get(key) != value:
            os.environ[key] = value


@pytest.fixture(autouse=True)
def _no_leaked_workers(request):
    yield
    if request.node.get_closest_marker("allow_leftover_workers"):
        return
    from muster.core.api import _runtime

    def retire() -> None:  # warm task workers are a cache, not a leak (also one a cancel just freed)
        if _runtime is not None and hasattr(_runtime, "retire_idle_workers"):
            _runtime.retire_idle_workers()

    retire()
    deadline = time.monotonic() + 5
    alive = engine_workers()
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        retire()
        alive = [p for p in alive if running(p)]
    if alive:
        for p in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        pytest.fail(f"test leaked worker processes: {[p.pid for p in alive]}")


@pytest.fixture(scope="module")
def gpu_engine():
    """For a module's tests: an engine that declares 2 GPUs (ids handed out through
    CUDA_VISIBLE_DEVICES; no CUDA is touched); the session engine comes back after."""
    saved = {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "MUSTER_PRELOAD")}
    session = muster.cluster_resources()
    muster.shutdown()
    try:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        os.environ["MUSTER_PRELOAD"] = ""  # task workers never import torch (a trainer asks for it)
        muster.init(num_cpus=2, num_gpus=2, resources={"licence": 1})
        yield
    finally:
        muster.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        muster.init(num_cpus=session["CPU"], num_gpus=session.get("GPU", 0))


@pytest.fixture
def storage(tmp_path) -> str:
    """A fresh storage_path for RunConfig."""
    return str(tmp_path / "results")
