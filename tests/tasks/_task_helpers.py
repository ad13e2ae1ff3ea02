"""Driver-side helpers shared by the task/actor API tests (never shipped to workers)."""

from __future__ import annotations

import os

from _shared import wait_for  # noqa: F401  (re-exported: the task tests import it from here)

TIMEOUT = 30  # generous bound on one remote call on a loaded 2-core box


def wait_for_file(path: str, timeout: float = TIMEOUT) -> str:
    assert wait_for(lambda: os.path.exists(path), timeout), f"{path} never appeared"
    with open(path) as f:
        return f.read()
