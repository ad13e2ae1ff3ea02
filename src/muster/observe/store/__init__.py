"""The run store: one SQLite database per storage root (see ``schema.py`` for its tables).

``store_path(root)`` says where a root's database lives; the driver writes it
through :mod:`.writer` (batched, off the training path) and the CLI and the
dashboard read it through :mod:`.reader`.
"""

from __future__ import annotations

import hashlib
import os
import re

from muster.core import settings

STORE_DIR = ".muster"
STORE_FILE = "runs.db"


def store_path(root: str) -> str:
    """The database file for storage root ``root``.

    A local root keeps its store inside itself (``<root>/.muster/runs.db``); a
    remote one (``s3://bucket/prefix``), where SQLite cannot write, keeps it on
    this machine under ``MUSTER_STORE_DIR`` (default ``~/.muster/stores``).
    """
    if root.startswith("file://"):
        root = root[len("file://"):]
    if "://" not in root:
        return os.path.join(os.path.abspath(os.path.expanduser(root)), STORE_DIR, STORE_FILE)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", root)[:80]
    digest = hashlib.sha1(root.encode()).hexdigest()[:8]
    return os.path.join(settings.run_store_dir(), f"{slug}-{digest}", STORE_FILE)


__all__ = ["store_path", "STORE_DIR", "STORE_FILE"]
