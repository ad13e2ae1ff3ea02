"""Driver-side helpers shared by the task/actor API tests (never shipped to workers)."""

from __future__ import annotations

import os
import time

TIMEOUT = 30  # generous bound on one remote call on a loaded 2-core box


def wait_for(predicate, timeout: float = TIMEOUT, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def wait_for_file(path: str, timeout: float = TIMEOUT) -> str:
    assert wait_for(lambda: os.path.exists(path), timeout), f"{path} never appeared"
    with open(path) as f:
        return f.read()
