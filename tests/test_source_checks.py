"""Static checks of the source that neither mypy nor the tests' behaviour catches."""

from __future__ import annotations

import ast
import pathlib

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "muster"


def test_no_dict_literal_repeats_a_key():
    """A repeated key silently drops the first entry (a merge once left two "muster.train" tables in
    ``_unsupported.UNSUPPORTED``, and ``train.LoggingConfig`` lost its hint)."""
    repeats = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Dict):
                seen: set[object] = set()
                for key in node.keys:
                    if isinstance(key, ast.Constant):
                        if key.value in seen:
                            repeats.append(f"{path.relative_to(SRC)}:{key.lineno}: {key.value!r}")
                        seen.add(key.value)
    assert not repeats, repeats


MAX_LINE = 120
ROOT = SRC.parents[1]


def test_no_source_line_is_longer_than_the_style_limit():
    """STYLE.md keeps lines to 120 characters, in the tests as in the source."""
    long = []
    for path in sorted([*SRC.rglob("*.py"), *(ROOT / "tests").rglob("*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if len(line) > MAX_LINE:
                long.append(f"{rel}:{number} has {len(line)} characters")
    assert not long, (
        f"wrap these lines to at most {MAX_LINE} characters (implicit joining inside brackets, or adjacent "
        "string literals): " + "; ".join(long)
    )
