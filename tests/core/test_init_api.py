"""``muster.init``: one engine per process, clear errors for what this build cannot do."""

from __future__ import annotations

import subprocess
import sys

import pytest
from _shared import free_port

import muster
from muster.core import api
from muster.core import resources as res
from muster.core.api import get_runtime


def test_init_twice_raises_unless_told_not_to():
    assert muster.is_initialized()  # the session fixture called muster.init()
    running = get_runtime()
    with pytest.raises(RuntimeError, match="ignore_reinit_error=True"):
        muster.init()
    with pytest.raises(RuntimeError, match="already"):
        muster.init(num_cpus=1)
    assert muster.init(ignore_reinit_error=True) is running
    assert get_runtime() is running


@pytest.fixture
def uninitialised(monkeypatch):
    """Look uninitialised to ``init`` for one test; the session engine comes back after."""
    monkeypatch.setattr(api, "_runtime", None)
    yield
    leaked = api._runtime
    if leaked is not None:  # init() should have raised; do not leave its engine running
        leaked.shutdown()


@pytest.mark.parametrize("scheme", ["ray://", ""])
def test_unreachable_cluster_address_fails_fast_saying_what_to_do(uninitialised, scheme):
    """Nothing listens there: a ConnectionError in seconds that names the address and the fix."""
    pytest.importorskip("ray")
    address = f"{scheme}127.0.0.1:{free_port()}"
    with pytest.raises(ConnectionError) as info:
        muster.init(address=address)
    msg = str(info.value)
    assert repr(address) in msg and "ray start --head" in msg and "address='local'" in msg
    assert api._runtime is None  # nothing was started


def test_malformed_address_raises_value_error(uninitialised):
    with pytest.raises(ValueError, match="'nonsense'.*ray://<head>:10001"):
        muster.init(address="nonsense")


def test_cluster_address_refuses_local_resource_arguments(uninitialised):
    with pytest.raises(ValueError, match="ray start --num-cpus"):
        muster.init(address="ray://head:10001", num_cpus=4)


def test_auto_address_without_a_cluster_means_this_machine(uninitialised, monkeypatch, tmp_path):
    """A ported `ray.init(address="auto")` runs locally when no cluster is configured or running."""
    monkeypatch.delenv("MUSTER_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))  # no `ray start` address file there
    rt = muster.init(address="auto", num_cpus=1, num_gpus=0)
    try:
        assert rt.name == "local" and res.machine(rt.resources()) == {"CPU": 1.0}
    finally:
        api._runtime = None
        rt.shutdown()


def test_what_init_returns_disconnects_as_rays_context_does(uninitialised):
    """Ray's docs end a job with ``context = ray.init(...); ...; context.disconnect()``."""
    rt = muster.init(num_cpus=1, num_gpus=0)
    assert muster.is_initialized()
    rt.disconnect()
    assert not muster.is_initialized() and api._runtime is None


def test_ray_address_env_is_read_when_no_address_given(uninitialised, monkeypatch):
    pytest.importorskip("ray")
    dead = f"127.0.0.1:{free_port()}"
    monkeypatch.delenv("MUSTER_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_ADDRESS", f"ray://{dead}")
    with pytest.raises(ConnectionError, match=f"ray://{dead}"):
        muster.init()
    with pytest.raises(ConnectionError, match=f"ray://{dead}"):  # "auto" means the configured one
        muster.init(address="auto")
    monkeypatch.setenv("MUSTER_ADDRESS", dead)  # muster's own variable wins
    with pytest.raises(ConnectionError, match=f"'{dead}'"):
        muster.init()


def test_fresh_process_init_shutdown_init():
    """In a clean interpreter: init, init again fails, shutdown, init works again, and actor names do not
    outlive their engine (before, the new engine refused the name: ActorAlreadyExistsError)."""
    code = r"""
import time
import muster
rt = muster.init(num_cpus=1, num_gpus=0)
try:
    muster.init()
except RuntimeError as e:
    print("second-init-raised")
assert muster.init(ignore_reinit_error=True) is rt
t0 = time.monotonic()
muster.shutdown()  # right after init: its worker launcher is likely still starting
took = time.monotonic() - t0
# The bug sat in zygote.wait(3) for a launcher still importing; under 3 s means that wait did
# not run out (the fix stops the launcher first and does not wait on it).
assert took < 3.0, f"shutdown took {took:.1f} s"
assert rt._zygote.poll() is not None, "worker launcher still running after shutdown"
muster.shutdown()  # idempotent
assert not muster.is_initialized()
rt2 = muster.init(num_cpus=1, num_gpus=0)
assert rt2 is not rt

@muster.remote(num_cpus=0)
class Named:
    def pid(self):
        import os
        return os.getpid()

first = muster.get(Named.options(name="kept").remote().pid.remote())
muster.shutdown()
muster.init(num_cpus=1, num_gpus=0)  # a new job: the names of the last one's actors are free, as in Ray
try:
    muster.get_actor("kept")
except ValueError:
    print("name-freed")
assert muster.get(Named.options(name="kept").remote().pid.remote()) != first
muster.shutdown()
print("ok")
"""
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("MUSTER_ADDRESS", "RAY_ADDRESS")}
    env.pop("MUSTER_PRELOAD", None)  # the default preload (torch) keeps the launcher busy at first
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["second-init-raised", "name-freed", "ok"]


def test_an_ignored_runtime_env_key_at_init_names_both_keys_init_applies(uninitialised, monkeypatch):
    """A ``runtime_env={"working_dir": <URI>}`` (a local folder is applied): the warning said "only env_vars is
    applied", though init also runs a ``worker_process_setup_hook``; and "working_dir have" for one key."""
    from muster.core import init_options

    monkeypatch.setattr(init_options, "_warned_runtime_env", set())
    with pytest.warns(UserWarning) as caught:
        rt = muster.init(num_cpus=1, num_gpus=0, runtime_env={"working_dir": "s3://bucket/code.zip"})
    rt.shutdown()
    api._runtime = None
    (message,) = [str(w.message) for w in caught if "runtime_env" in str(w.message)]
    assert message.startswith("muster.init(): runtime_env working_dir has no effect on muster"), message
    assert ("only env_vars and worker_process_setup_hook, and working_dir and py_modules given as local paths "
            "are applied") in message, message
