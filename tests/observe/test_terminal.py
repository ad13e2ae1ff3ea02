"""`muster logs --follow` on a run that is still going."""

from __future__ import annotations

import subprocess
import sys


def test_logs_follow_prints_until_the_run_ends(live_run):
    live = live_run("followed", steps=4, hold_at=2, workers=1)
    live.wait_for_reports(2)
    follower = subprocess.Popen([sys.executable, "-m", "muster.cli", "logs", "followed", "--follow",
                                 "--storage-path", live.storage], stdout=subprocess.PIPE, text=True)
    try:
        assert follower.stdout.readline().endswith("live step 0\n")
        live.release()
        rest = follower.stdout.read()  # to EOF: it exits by itself once the run has ended
        assert follower.wait(60) == 0
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert [line.split(") ", 1)[1] for line in rest.splitlines()] == [f"live step {i}" for i in (1, 2, 3)]
