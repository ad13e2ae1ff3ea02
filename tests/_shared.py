"""Helpers shared by test modules of every folder (driver side only; never shipped to workers).

``tests/`` is on ``sys.path`` while the suite runs (it holds the root conftest), so any
test module can ``from _shared import free_port, wait_for``.
"""

from __future__ import annotations

import socket
import time
from typing import Callable


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (never a fixed port in a test)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0, interval: float = 0.02) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` seconds pass; its last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
