"""Remote work the waiting-warning tests share (test_busy_wait_warning.py, test_group_wait_warning.py): work that
holds resources until told, and work that waits for them. conftest.py ships this module to workers by value."""

from __future__ import annotations

import os
import time

import muster


@muster.remote
def hold_until(path: str, started: str):
    """Hold its resources until ``path`` exists (``started`` appears once it runs); its pid."""
    open(started, "w").close()
    while not os.path.exists(path):
        time.sleep(0.05)
    return os.getpid()


@muster.remote
def nap(seconds: float, started: str = ""):
    if started:
        open(started, "w").close()
    time.sleep(seconds)
    return "rested"


@muster.remote
class Needy:
    def ping(self):
        return "pong"
