"""Every module imports on its own (no cycles), and layers only import downwards."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import _background
import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "muster"
MODULES = sorted(
    ".".join(p.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__")
    for p in SRC.rglob("*.py")
)


# Each runs in a fresh interpreter, importing the modules it is given one by one, with every muster module dropped
# from sys.modules first: each starts muster's import graph from nothing (a cycle shows up as it would for a
# user's first import). Third-party packages stay loaded between modules: importing torch, ray and pyarrow afresh
# for each of ~330 modules made this the suite's slowest test (over 3 minutes). Two halves, one per core, run in
# the background from the session's start (tests/_background.py), or side by side once this test starts.
_IMPORT_EACH = """
import importlib, sys, traceback
for module in sys.argv[1:]:
    for name in [n for n in sys.modules if n == "muster" or n.startswith("muster.")]:
        del sys.modules[name]
    try:
        importlib.import_module(module)
    except BaseException:
        print(module + ": " + traceback.format_exc().strip().splitlines()[-1], flush=True)
"""
BACKGROUND = {f"imports-{half}": [sys.executable, "-c", _IMPORT_EACH, *MODULES[half::2]] for half in (0, 1)}


@pytest.mark.background
@pytest.mark.timeout(900)
def test_every_module_imports_alone():
    failures = []
    for name, argv in BACKGROUND.items():
        _background.start(name, argv)  # both halves at once, if the session did not start them
    for name, argv in BACKGROUND.items():
        proc = _background.result(name, argv, timeout=600)
        assert proc.returncode == 0, proc.stderr
        failures += proc.stdout.splitlines()
    assert not failures, "\n".join(failures)


def test_import_muster_is_light():
    """`import muster` needs only the core dependencies and does not start anything."""
    proc = subprocess.run(
        [sys.executable, "-c", "import muster, sys; print('ray' in sys.modules, muster.is_initialized())"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False"]


def _imports(path: pathlib.Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("layer", ["train", "tasks", "observe", "tune", "serve"])
def test_layers_above_core_use_the_seam(layer):
    """Above core/, nothing starts processes or talks to Ray directly."""
    banned = {"multiprocessing", "subprocess", "ray"}
    offenders = {
        str(p.relative_to(SRC)): sorted(n for n in _imports(p) if n.split(".")[0] in banned)
        for p in (SRC / layer).rglob("*.py")
    }
    assert not {k: v for k, v in offenders.items() if v}


def test_core_never_imports_the_libraries():
    libraries = ("muster.train", "muster.tasks", "muster.observe", "muster.tune")
    offenders = {
        str(p.relative_to(SRC)): sorted(n for n in _imports(p) if n.startswith(libraries))
        for p in (SRC / "core").rglob("*.py")
    }
    assert not {k: v for k, v in offenders.items() if v}


def test_train_never_imports_tune():
    """Tune drives trainers, never the reverse: train/ must not depend on tune/."""
    offenders = {
        str(p.relative_to(SRC)): sorted(n for n in _imports(p) if n.startswith("muster.tune"))
        for p in (SRC / "train").rglob("*.py")
    }
    assert not {k: v for k, v in offenders.items() if v}
