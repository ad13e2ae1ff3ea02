"""Short scripts written in Ray's docs style run with ``import muster as ray`` (each its own process)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

SCRIPTS = pathlib.Path(__file__).parent / "ray_scripts"


def _run(name: str, tmp_path: pathlib.Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "MUSTER_STORAGE_PATH": str(tmp_path / "results"), "MUSTER_RUN_STORE": "0"}
    env.pop("MUSTER_ADDRESS", None)
    env.pop("RAY_ADDRESS", None)
    return subprocess.run([sys.executable, str(SCRIPTS / name)], capture_output=True, text=True, timeout=280,
                          env=env, cwd=tmp_path)


@pytest.mark.timeout(300)  # a fresh interpreter and engine per script; slow on a loaded machine
def test_core_tour(tmp_path):
    out = _run("core_tour.py", tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.strip().endswith("OK")


@pytest.mark.timeout(300)
def test_tune_tour(tmp_path):
    pytest.importorskip("optuna")
    out = _run("tune_tour.py", tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.count("trial ended:") == 3 and "failed" not in out.stdout
    assert out.stdout.strip().endswith("OK")


def test_unsupported_api_names_itself_and_the_muster_equivalent(tmp_path):
    out = _run("unsupported.py", tmp_path)
    assert out.returncode != 0
    assert "UnsupportedRayAPIError: muster.timeline (Ray's ray.timeline) is not supported" in out.stderr
    assert "muster dashboard" in out.stderr
