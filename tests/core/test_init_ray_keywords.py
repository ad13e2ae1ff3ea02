"""``muster.init`` takes Ray's ``ray.init`` keywords: honoured ones act, the rest are no-ops, none is a TypeError."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import muster
from muster.core import api

SCRIPT = textwrap.dedent("""
    import logging, os
    import muster as ray

    ray.init(
        num_cpus=2, num_gpus=0, resources={"widget": 1}, address=None,
        configure_logging=True, logging_level="warning", logging_format="%(levelname)s|%(message)s",
        log_to_driver=False, include_dashboard=False, dashboard_host="127.0.0.1", dashboard_port=None,
        ignore_reinit_error=True, namespace="team", runtime_env={"env_vars": {"MUSTER_T_FLAG": "on"}},
        object_store_memory=10**8, _temp_dir="/tmp/unused", local_mode=False, job_config=None,
    )

    @ray.remote
    def shout():
        print("WORKER-OUTPUT-LINE", flush=True)
        return os.environ.get("MUSTER_T_FLAG")

    print("flag", ray.get(shout.remote(), timeout=60))
    print("widget", ray.cluster_resources().get("widget"))
    print("level", logging.getLogger("muster").level)
    ray.init(ignore_reinit_error=True, include_dashboard=True)  # a second call: no error
    ray.shutdown()
""")


def test_ray_init_keywords_in_a_ported_script(tmp_path):
    env = {**os.environ, "MUSTER_RUN_STORE": "0"}
    env.pop("MUSTER_ADDRESS", None)
    env.pop("RAY_ADDRESS", None)
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120,
                         env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "flag on" in lines  # runtime_env env_vars reached the worker
    assert "widget 1.0" in lines
    assert "level 30" in lines  # logging_level="warning"
    assert "WORKER-OUTPUT-LINE" not in out.stdout + out.stderr  # log_to_driver=False


def test_unknown_keyword_is_a_type_error_naming_it(monkeypatch):
    monkeypatch.setattr(api, "_runtime", None)
    with pytest.raises(TypeError, match="num_cpu\\b.*log_to_driver"):
        muster.init(num_cpu=2)
    assert api._runtime is None


def test_bad_honoured_values_name_the_fix(monkeypatch):
    monkeypatch.setattr(api, "_runtime", None)
    with pytest.raises(ValueError, match="logging_level='loud'"):
        muster.init(logging_level="loud")
    with pytest.raises(ValueError, match="env_vars maps names to string values"):
        muster.init(runtime_env={"env_vars": {"A": 1}})
    assert api._runtime is None
