"""Start a muster command as a background process that outlives the one starting it (the seam the CLI
layers above core use, e.g. ``muster serve run --non-blocking``)."""

from __future__ import annotations

import subprocess
import sys


def start_cli(argv: list[str], log_path: str) -> subprocess.Popen:
    """Run ``muster <argv>`` in its own session (Ctrl-C in this terminal does not reach it), stdin closed,
    stdout and stderr appended to ``log_path``. The caller polls the returned process; nothing waits for it."""
    with open(log_path, "ab") as log:
        return subprocess.Popen([sys.executable, "-m", "muster.cli", *argv], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
