"""The hidden files that whole-file writes fill before renaming them into place, named after their writer.

A name ``.<name>.<kind>-<host>-<pid>`` (``kind``: ``tmp`` for the run store's files, ``partial`` for
``muster.data``'s output files; ``host``: a hash of the writer's host name) says who writes it, so that
one a writer killed mid-write (SIGKILL, a power cut) left behind is told from a live writer's, and from
the user's files, and removed when the folder is opened or written again. Only this host's files whose
process is gone are stale: another host's (a folder shared over NFS, an object store) may be a live
writer's, and are kept.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket

import psutil

_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|partial)-(?P<host>[0-9a-f]{8})-(?P<pid>\d+)$")
HOST = hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]


def temp_name(name: str, kind: str = "tmp") -> str:
    """The hidden name this process writes ``name`` (a base name) under before renaming it."""
    return f".{name}.{kind}-{HOST}-{os.getpid()}"


def is_temp_file(name: str) -> bool:
    """Whether the base name ``name`` is a whole-file write's hidden file (a live or a dead writer's)."""
    return _TEMP.match(name) is not None


def is_stale(name: str) -> bool:
    """Whether the base name ``name`` is a hidden file whose writer died: written on this host by a
    process that no longer runs (never another host's, nor a live process's)."""
    m = _TEMP.match(name)
    return m is not None and m["host"] == HOST and not psutil.pid_exists(int(m["pid"]))
