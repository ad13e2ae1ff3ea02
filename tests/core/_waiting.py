"""Polling helper shared by the runtime tests."""

from __future__ import annotations

import time
from typing import Callable


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Poll ``predicate`` every 20 ms until it holds or ``timeout`` passes; return its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()
