"""Ray's ``ray.util.inspect_serializability``: which part of an object stops it from being sent to a task.

muster sends task arguments, actors and functions with cloudpickle, as Ray does. When that fails, the
error names the type that would not pickle (a lock, a socket, a file) but not where it sits. This walks
down from the object given (a function's closure and the globals it uses, a bound method's instance,
an object's attributes, a container's items), ``depth`` levels at most, and reports the innermost
parts that fail on their own: those are what to move into the function, or to make in the task.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any, Iterator, TextIO

import cloudpickle

_MAX_ITEMS = 100  # the items of a container looked at


class FailureTuple:
    """One part that does not serialize: ``obj``, its ``name`` where it was found, and its ``parent``."""

    __slots__ = ("obj", "name", "parent")

    def __init__(self, obj: Any, name: str, parent: Any):
        self.obj, self.name, self.parent = obj, name, parent

    def _key(self) -> tuple[int, str, int]:
        return id(self.obj), self.name, id(self.parent)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FailureTuple) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"FailureTuple({self.name} [obj={_short(self.obj)}, parent={_short(self.parent)}])"


def _short(obj: Any, limit: int = 80) -> str:
    try:
        text = repr(obj)
    except Exception:  # noqa: BLE001 - a repr that fails must not stop the report
        text = f"<{type(obj).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _error(obj: Any) -> Exception | None:
    try:
        cloudpickle.dumps(obj)
        return None
    except Exception as exc:  # noqa: BLE001 - whatever pickling raised is the finding
        return exc


def _parts(obj: Any) -> Iterator[tuple[str, Any]]:
    """The named parts of ``obj`` that pickling it pickles too."""
    if inspect.ismethod(obj):
        yield "__self__", obj.__self__
        yield "__func__", obj.__func__
    elif inspect.isfunction(obj):
        try:
            found = inspect.getclosurevars(obj)
        except (TypeError, ValueError):
            return
        yield from found.nonlocals.items()
        yield from found.globals.items()
    elif isinstance(obj, dict):
        for i, (k, v) in enumerate(obj.items()):
            if i == _MAX_ITEMS:
                return
            yield f"[{k!r}]", v
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for i, v in enumerate(obj):
            if i == _MAX_ITEMS:
                return
            yield f"[{i}]", v
    elif not inspect.isclass(obj) and hasattr(obj, "__dict__"):
        yield from vars(obj).items()


def _walk(obj: Any, name: str, parent: Any, depth: int, level: int, failures: set[FailureTuple],
          out: list[str]) -> bool:
    """Whether ``obj`` serializes; what fails goes to ``failures``, the story to ``out``."""
    error = _error(obj)
    if error is None:
        return True
    out.append(f"{'    ' * level}{name} ({type(obj).__name__}): FAILS: {type(error).__name__}: {error}")
    below = False
    if depth > 0:
        for part_name, part in _parts(obj):
            if not _walk(part, part_name, obj, depth - 1, level + 1, failures, out):
                below = True
    if not below:  # nothing inside it fails on its own: it is the culprit
        failures.add(FailureTuple(obj, name, parent))
    return False


def inspect_serializability(base_obj: Any, name: str | None = None, depth: int = 3,
                            print_file: TextIO | None = None) -> tuple[bool, set[FailureTuple]]:
    """Whether ``base_obj`` can be sent to a task or actor, and if not, the innermost parts that cannot
    (each a :class:`FailureTuple`), found ``depth`` levels down at most. A report goes to
    ``print_file`` (default: standard output)."""
    label = name or _short(base_obj)
    out = [f"Checking whether {label} serializes (for a task's arguments, an actor, a function)"]
    failures: set[FailureTuple] = set()
    ok = _walk(base_obj, label, None, depth, 0, failures, out)
    if ok:
        out.append("It serializes.")
    else:
        out.append("The parts that do not serialize (the innermost found):")
        out.extend(f"    {f!r}" for f in failures)
        out.append("Fix: make these inside the function or actor (or in the task) instead of capturing them, "
                   "or register a serializer for their type (muster.util.register_serializer).")
    print("\n".join(out), file=print_file or sys.stdout)
    return ok, failures
