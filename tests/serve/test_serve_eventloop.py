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
