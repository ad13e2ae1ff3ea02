"""``RunConfig(log_to_file=)``: a trial's printed output also goes to files in its folder, as in Ray."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from typing import IO, Any

from muster.exceptions import InvalidArgumentError

#: the file names ``log_to_file=True`` writes, Ray's
DEFAULT_FILES = ("stdout", "stderr")


def log_file_names(value: Any) -> tuple[str | None, str | None]:
    """``(stdout file, stderr file)`` for ``RunConfig(log_to_file=value)``: ``True`` is Ray's
    ``("stdout", "stderr")``, a name is one file for both, a pair is one each; ``False``/``None`` neither.

    Raises:
        InvalidArgumentError: anything else.
    """
    if not value:
        return None, None
    if value is True:
        return DEFAULT_FILES
    if isinstance(value, str):
        return value, value
    if isinstance(value, Sequence) and len(value) == 2 and all(v is None or isinstance(v, str) for v in value):
        return value[0], value[1]
    raise InvalidArgumentError(
        f"RunConfig(log_to_file={value!r}): pass True (files 'stdout' and 'stderr' in each trial's folder), "
        "one file name for both, or a (stdout file, stderr file) pair; names are relative to the trial's folder."
    )


class _Tee:
    """A text stream that writes to the console's stream and to a file."""

    def __init__(self, console: Any, file: IO[str]):
        self.console, self.file = console, file

    def write(self, text: str) -> int:
        self.file.write(text)
        return int(self.console.write(text) or len(text))

    def flush(self) -> None:
        self.file.flush()
        self.console.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.console, name)


@contextlib.contextmanager
def output_to_files(names: tuple[str | None, str | None], folder: str) -> Iterator[None]:
    """While inside, what the trainable prints (``sys.stdout``/``sys.stderr``) is also appended to the
    named files, relative to ``folder`` (absolute names as they are); it still reaches the console."""
    opened: dict[str, IO[str]] = {}
    saved = sys.stdout, sys.stderr
    try:
        for stream, name in zip(("stdout", "stderr"), names):
            if name is None:
                continue
            path = os.path.join(folder, os.path.expanduser(name))
            if path not in opened:
                os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
                opened[path] = open(path, "a", buffering=1)
            setattr(sys, stream, _Tee(getattr(sys, stream), opened[path]))
        yield
    finally:
        sys.stdout, sys.stderr = saved
        for f in opened.values():
            f.close()
