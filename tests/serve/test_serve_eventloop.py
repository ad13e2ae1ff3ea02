"""The process's Serve event loop across a fork: the child gets a loop of its own."""

from __future__ import annotations

import asyncio

from _shared import check_in_fork

from muster.serve._internal import eventloop


def test_a_forked_child_runs_a_serve_loop_of_its_own():
    """A child forked while the parent's loop runs (a worker forked from a driver or a replica
    that has used Serve) has the parent's loop object but not its thread: reusing it would never
    run a coroutine (or, on uvloop with the parent's descriptors closed, abort the process)."""
    parent = eventloop.get_loop()
    assert eventloop.run_sync(asyncio.sleep(0, result="parent"), timeout=10) == "parent"

    def child_runs_its_own() -> bool:
        own = eventloop.get_loop() is not parent
        return own and eventloop.run_sync(asyncio.sleep(0, result="child"), timeout=10) == "child"

    assert check_in_fork(child_runs_its_own) == "passed"
    assert eventloop.get_loop() is parent  # the parent's loop is untouched


EXITING_DRIVER = '''
import asyncio
import atexit
import threading

def last():  # registered before the Serve loop starts, so it runs after the loop's own exit handler
    threads = [t.is_alive() for t in threading.enumerate() if t.name == "muster-serve-loop"]
    print("AT EXIT closed", eventloop._loop.is_closed(), "threads", threads, flush=True)

atexit.register(last)
from muster.serve._internal import eventloop

async def forever():
    await asyncio.sleep(3600)

eventloop.submit(forever())  # a task still pending as the driver exits
print(eventloop.run_sync(asyncio.sleep(0, result="ran"), timeout=10), flush=True)
'''


def test_the_serve_loop_is_stopped_and_closed_before_the_interpreter_finalizes(tmp_path):
    """Before, the driver's uvloop kept running on its daemon thread into finalization, and about one exit in
    twenty under load died of SIGSEGV in the last garbage collection (a Ctrl-C'd ``serve.run(blocking=True)``
    driver exited -11 in CI). Its pending tasks are cancelled first, so none logs "Task was destroyed"."""
    import os
    import subprocess
    import sys

    (tmp_path / "driver.py").write_text(EXITING_DRIVER)
    env = dict(os.environ, PYTHONPATH=os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "src")))
    done = subprocess.run([sys.executable, "driver.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ran\nAT EXIT closed True threads []\n", done.stdout + done.stderr
    assert "destroyed" not in done.stderr, done.stderr
