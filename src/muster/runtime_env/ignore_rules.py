"""Gitignore-style patterns, as Ray reads a ``runtime_env``'s ``excludes`` and the ``.gitignore`` and
``.rayignore`` files of the folders it copies (Ray's ``gitwildmatch``).

A rule is a line of such a file: ``*`` and ``?`` stay within one path component, ``**`` spans any number of
them, a trailing ``/`` matches folders only, a ``/`` at the start or in the middle anchors the pattern at the
folder the rules belong to (else it matches at any depth), ``!`` re-includes, and the last matching rule wins.
An excluded folder is left out with all it holds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


def _glob_to_regex(glob: str) -> str:
    out, i = [], 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        elif glob[i] == "[" and "]" in glob[i + 2:]:
            end = glob.index("]", i + 2)
            body = glob[i + 1:end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            if glob[i] == "\\" and i + 1 < len(glob):
                i += 1
            out.append(re.escape(glob[i]))
            i += 1
    return "".join(out)


@dataclass(frozen=True)
class _Rule:
    regex: re.Pattern[str]
    negated: bool
    folders_only: bool


def _rule(line: str) -> _Rule | None:
    line = line.rstrip("\n").rstrip()
    if not line or line.startswith("#"):
        return None
    negated = line.startswith("!")
    if negated:
        line = line[1:]
    folders_only = line.endswith("/")
    line = line.rstrip("/")
    if not line:
        return None
    anchored = "/" in line
    line = line.lstrip("/")
    prefix = "" if anchored or line.startswith("**") else "(?:.*/)?"
    return _Rule(re.compile(f"^{prefix}{_glob_to_regex(line)}$"), negated, folders_only)


class IgnoreRules:
    """The rules of one folder (``excludes``, or the lines of its ``.gitignore``), matched against paths
    relative to that folder, with ``/`` between components."""

    def __init__(self, lines: list[str] | tuple[str, ...]):
        self._rules = [r for r in map(_rule, lines) if r is not None]

    def __bool__(self) -> bool:
        return bool(self._rules)

    def excludes(self, relative: str, is_folder: bool) -> bool:
        """Whether the path ``relative`` (a folder when ``is_folder``) is left out."""
        verdict = False
        for rule in self._rules:
            if (is_folder or not rule.folders_only) and rule.regex.match(relative):
                verdict = not rule.negated
        return verdict
