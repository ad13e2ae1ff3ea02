"""User-input errors are MusterErrors and still the builtin ValueError/TypeError."""

from __future__ import annotations

import ast
import pathlib

import pytest

import muster
from muster import train, tune
from muster.exceptions import InvalidArgumentError, InvalidTypeError, MusterError
from muster.train import ScalingConfig

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "muster"
# internal errors (a muster bug, not a user's input) may stay plain builtins
INTERNAL = {("tasks/owner.py", "ValueError"), ("data/execution.py", "TypeError")}


@pytest.mark.parametrize(
    ("bad_call", "category", "builtin", "needle"),
    [
        (lambda: ScalingConfig(num_workers=-3), InvalidArgumentError, ValueError, "-3"),
        (lambda: tune.choice([]), InvalidArgumentError, ValueError, "choice([])"),
        (lambda: muster.util.placement_group([{"CPU": 1}], strategy="SIDEWAYS"), InvalidArgumentError, ValueError,
         "SIDEWAYS"),
        (lambda: train.Checkpoint.from_dict(["not", "a", "dict"]), InvalidTypeError, TypeError, "list"),
        (lambda: muster.remote(1, 2), InvalidTypeError, TypeError, "keyword options only"),
    ],
)
def test_user_input_errors_are_muster_errors_and_builtins(bad_call, category, builtin, needle):
    with pytest.raises(category) as info:
        bad_call()
    assert isinstance(info.value, MusterError) and isinstance(info.value, builtin)
    assert needle in str(info.value)


def test_src_raises_no_plain_value_or_type_error():
    """Every ``raise ValueError(...)``/``raise TypeError(...)`` in src/ is one of the categories instead."""
    plain = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and isinstance(node.exc.func, ast.Name):
                name = node.exc.func.id
                if name in ("ValueError", "TypeError") and (rel, name) not in INTERNAL:
                    plain.append(f"{rel}:{node.lineno} raise {name}")
    assert not plain, "use InvalidArgumentError / InvalidTypeError (muster.exceptions):\n" + "\n".join(plain)
