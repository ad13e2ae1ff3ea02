"""What the controller says of an attempt that stalls or fails: the stall report, and the root cause.

A rank that reports nothing for ``RunConfig.stall_report_s`` is named, with its Python stacks printed
(:func:`report_stall`). A rank that raises is often the victim of a peer's death, which breaks the
others' collectives, never the reverse: :func:`pick_root_cause` waits briefly for such a death and
prefers it, and :func:`root_cause` labels an error with the rank it came from.
"""

from __future__ import annotations

import queue
import time
from typing import TYPE_CHECKING, Callable

from muster.core.api import get_runtime
from muster.exceptions import TaskError, WorkerCrashedError
from muster.observe.recorder import RunRecorder
from muster.train._internal import events as ev
from muster.train.worker_group import Member

if TYPE_CHECKING:
    from muster.train.controller import _Attempt

DEATH_GRACE_S = 0.5  # after a rank raises, how long to look for a peer's death that caused it


def report_stall(attempt: "_Attempt", limit: float | None, warn: Callable[[str], None],
                 recorder: RunRecorder) -> None:
    """No rank reported or finished for ``limit`` seconds (``RunConfig.stall_report_s``): say so, naming
    the ranks still running, and have each print its Python stacks into its output (local engine), so a
    hang shows where it waits. Said again after twice as long, and so on; the run goes on."""
    quiet = time.monotonic() - attempt.last_activity
    said = attempt.stall_reported[1] if attempt.stall_reported and \
        attempt.stall_reported[0] == attempt.last_activity else None
    if limit is None or quiet < (limit if said is None else 2 * said):
        return
    attempt.stall_reported = (attempt.last_activity, quiet)
    running = [m for m in attempt.group.members if m.rank not in attempt.finished]
    runtime = get_runtime()
    shown = [m.rank for m in running if runtime.show_stacks(m.handle)]
    done = f"ranks {sorted(attempt.finished)} finished their loop; " if attempt.finished else ""
    message = (
        f"no rank has reported for {quiet:.0f} s; {done}ranks {[m.rank for m in running]} still run"
        + (f"; ranks {shown} printed their Python stacks in their output above" if shown else "")
        + ". A rank waiting in a collective (all_reduce, barrier, a checkpoint save that gathers from "
        "every rank) that another rank never makes waits forever: every rank must make the same "
        "collective calls. (RunConfig(stall_report_s=None) turns this off; worker_timeout_s fails such "
        "a run instead.)"
    )
    warn(message)
    recorder.event("stall", message)


def pick_root_cause(attempt: "_Attempt", first: BaseException) -> BaseException:
    """A rank raised ``first``. If a peer died, its death caused this: wait briefly for one and prefer it."""
    if isinstance(first, WorkerCrashedError):
        return first
    deadline = time.monotonic() + DEATH_GRACE_S
    while (left := deadline - time.monotonic()) > 0:
        try:
            event = attempt.events.get(timeout=left)
        except queue.Empty:
            break
        if isinstance(event, ev.StopRequested):  # a Tune stop while the cause is looked for
            continue
        exc = event.error if isinstance(event, ev.WorkerDied) else event.future.exception()
        if isinstance(exc, WorkerCrashedError):
            return root_cause(exc, event.member)
    return first


def root_cause(exc: BaseException, member: Member) -> BaseException:
    """``exc``, raised by ``member``'s process, labelled with its rank, pid and host."""
    if isinstance(exc, WorkerCrashedError):
        return WorkerCrashedError(f"rank {member.rank}", exc.pid or member.pid, exc.exitcode, member.host)
    if isinstance(exc, TaskError):
        return exc.relabelled(f"rank {member.rank}", exc.pid or member.pid, exc.host or member.host)
    return exc
