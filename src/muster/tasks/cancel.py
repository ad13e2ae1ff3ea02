"""``muster.cancel(ref, force=...)``: stop a task or an actor call (Ray's ``ray.cancel``)."""

from __future__ import annotations

from muster.core import context as core_context
from muster.exceptions import InvalidTypeError
from muster.tasks import actor, events, remote_function
from muster.tasks.generators import ObjectRefGenerator
from muster.tasks.objects import ObjectRef


def cancel(ref: "ObjectRef | ObjectRefGenerator", *, force: bool = False, recursive: bool = True) -> bool:
    """Cancel the task or actor call behind ``ref`` (or a generator's task: its next item then
    raises); ``get(ref)`` then raises ``TaskCancelledError``.

    A task not started yet never runs.  A running task gets a
    ``KeyboardInterrupt`` (``force=False``) or its process is killed
    (``force=True``); it is not retried.  An actor call not sent yet is
    dropped; a running call on an async or threaded actor is cancelled; a
    running call on a plain actor finishes (as in Ray).  ``recursive`` is
    accepted for Ray's signature (tasks it started are not cancelled).

    Returns:
        True if something was cancelled; False if it had already finished.

    Raises:
        TypeError: ``ref`` is not an ObjectRef.
        ValueError: ``force=True`` on an actor call.
    """
    if isinstance(ref, ObjectRefGenerator):
        source = ref.completed()
        if source is None:  # its items are all here: nothing runs
            return False
        ref = source
    if not isinstance(ref, ObjectRef):
        raise InvalidTypeError(
            f"muster.cancel() takes an ObjectRef or an ObjectRefGenerator, got {type(ref).__name__}."
        )
    if core_context.in_worker():
        return bool(core_context.send_event(events.Cancel(ref.id, force)))
    done = actor.cancel_call(ref, force)
    if done is not None:
        return done
    return remote_function.cancel(ref, force)
