"""Run the examples in the docstrings of the installed Ray with ``import ray`` changed to ``import muster as ray``.

The examples are read from Ray's own source files at run time (nothing of Ray's is copied here): a
docstring's ``>>>`` lines run as a doctest (their printed output compared, with ``...`` and whitespace
relaxed, as Ray's doctests are), its ``.. testcode::`` blocks run as one script. The examples of one file
share an engine of 4 CPUs (an example that calls ``ray.init()`` starts its own).

Run as a script, it takes example ids (``ray/util/queue.py::Queue``: a file under site-packages and
the docstring's owner) and prints one JSON line per id: ``{"id", "ok", "error"}``.
"""

from __future__ import annotations

import ast
import contextlib
import doctest
import importlib.util
import io
import json
import pathlib
import re
import sys
import textwrap
import time
import traceback


def ray_root() -> pathlib.Path | None:
    """The installed ``ray`` package's folder, found without importing it; None where Ray is absent."""
    spec = importlib.util.find_spec("ray")
    if spec is None or not spec.submodule_search_locations:
        return None
    return pathlib.Path(list(spec.submodule_search_locations)[0])


def _docstring(path: pathlib.Path, qualname: str) -> str:
    node: ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef = ast.parse(path.read_text())
    for part in qualname.split("."):
        node = next(n for n in ast.iter_child_nodes(node)
                    if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == part)
    return ast.get_docstring(node, clean=True) or ""


def _testcode(doc: str) -> str:
    """The docstring's ``.. testcode::`` (or ``.. code-block:: python``) blocks, joined (Sphinx runs them in
    one namespace)."""
    blocks, lines = [], doc.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)\.\. (testcode|code-block:: python)", line)
        if not m:
            continue
        body = []
        for nxt in lines[i + 1:]:
            if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= len(m.group(1)):
                break
            body.append(nxt)
        blocks.append("\n".join(b for b in textwrap.dedent("\n".join(body)).splitlines()
                                if not re.match(r"^:\w+:", b)))
    return "\n".join(blocks)


def rewrite(code: str) -> str:
    """Ray's imports as a port writes them: ``import ray`` -> ``import muster as ray``, ``from ray.x`` ->
    ``from muster.x``; nothing else changes."""
    code = re.sub(r"(?m)^(\s*)import ray\s*$", r"\1import muster as ray", code)
    code = re.sub(r"(?m)^(\s*)import ray\.([\w.]+) as (\w+)", r"\1import muster.\2 as \3", code)
    code = re.sub(r"(?m)^(\s*)import ray\.([\w.]+)\s*$", r"\1import muster.\2, muster as ray", code)
    return re.sub(r"(?m)^(\s*)from ray(\.[\w.]+)? import", r"\1from muster\2 import", code)


def run_example(example_id: str, fresh: bool = False) -> None:
    """Run one example (see the module docstring); raises AssertionError naming what differed.
    ``fresh``: on a new engine (what the examples before it left, actors and placement groups, gone)."""
    import muster

    root = ray_root()
    assert root is not None, "Ray is not installed"
    where, _, qualname = example_id.partition("::")
    doc = _docstring(root.parent / where, qualname)
    if fresh or "ray.init(" in doc:
        muster.shutdown()
    if "ray.init(" not in doc:
        muster.init(num_cpus=4, ignore_reinit_error=True)  # Ray's doctests run on a cluster of several CPUs
    globs = {"__name__": "__main__", "ray": muster}
    if ">>>" in doc:
        test = doctest.DocTestParser().get_doctest(doc, globs, example_id, where, 0)
        for example in test.examples:
            example.source = rewrite(example.source)
        out = io.StringIO()
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        result = runner.run(test, out=out.write)
        assert result.attempted and not result.failed, out.getvalue()[-3000:]
        return
    code = _testcode(doc)
    assert code, f"{example_id}: no example found"
    exec(compile(rewrite(code), example_id, "exec"), globs)  # noqa: S102 - Ray's own example, as its docs run it


def main(ids: list[str]) -> None:
    previous = ""
    for example_id in ids:
        t0, ok, error = time.monotonic(), True, ""
        where = example_id.partition("::")[0]
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                run_example(example_id, fresh=where != previous)  # each file's examples on an engine of their own
        except BaseException:  # noqa: BLE001 - reported per example
            ok, error = False, traceback.format_exc()[-3000:]
        previous = where
        print(json.dumps({"id": example_id, "ok": ok, "error": error, "s": round(time.monotonic() - t0, 2)}),
              flush=True)
    import muster

    muster.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
