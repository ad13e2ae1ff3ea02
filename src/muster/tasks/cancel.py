"""``muster.cancel(ref, force=...)``: stop a task or an actor call (Ray's ``ray.cancel``)."""

from __future__ import annotations

import threading
from typing import Any

from muster.core import context as core_context
from muster.exceptions import InvalidTypeError
from muster.tasks import actor, events, remote_function, task_table, worker_side
from muster.tasks.generators import ObjectRefGenerator
from muster.tasks.objects import ObjectRef


def cancel(ref: "ObjectRef | ObjectRefGenerator", *, force: bool = False, recursive: bool = True) -> None:
    """Cancel the task or actor call behind ``ref`` (or a generator's task: its next item then
    raises); ``get(ref)`` then raises ``TaskCancelledError``.

    A task not started yet never runs.  A running task gets a
    ``KeyboardInterrupt`` (``force=False``; on a Ray cluster Ray raises it
    at the task's next Python instruction, after a blocking call returns)
    or its process is killed (``force=True``); it is not retried.  An
    actor call not sent yet is dropped; a running call on an async actor
    is cancelled (``asyncio``'s ``CancelledError`` in it).  A running call on a plain or threaded actor
    is not interrupted (as in Ray): ``get_runtime_context().is_canceled()``
    turns True in it, and ``get(ref)`` raises ``TaskCancelledError`` once it
    returns, whatever it returned.

    With ``recursive=True`` (the default, as in Ray) a cancelled task's children are cancelled
    too: the tasks and actor calls it submitted that have not finished, theirs in turn, and any it
    submits from then on.  ``force`` reaches child tasks; child actor calls are cancelled without
    it (an actor call cannot be forced).  Cancelling an actor call leaves its children running.

    Returns None, as Ray's (a task already finished is left as it is).

    Raises:
        TypeError: ``ref`` is not an ObjectRef.
        ValueError: ``force=True`` on an actor call.
    """
    cancel_ref(ref, force, recursive)


def cancel_ref(ref: "ObjectRef | ObjectRefGenerator", force: bool, recursive: bool = True) -> bool:
    """:func:`cancel`; True if something was cancelled, False if it had already finished."""
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
        return bool(core_context.send_event(events.Cancel(ref.id, force, recursive)))
    done = actor.cancel_call(ref, force)
    if done is not None:
        return done
    task = remote_function.cancel(ref, force, recursive)
    if task is None:
        return False
    if recursive:
        with _family_lock:
            children, task.children = task.children, []
        for child in children:
            _cancel_child(child, force)
    return True


def _cancel_child(ref_id: int, force: bool) -> None:
    """Cancel a cancelled task's child ``ref_id``, and its children (an actor call without ``force``)."""
    child = ObjectRef(ref_id)
    if actor.cancel_call(child, False) is None:
        cancel_ref(child, force)


_family_lock = threading.Lock()


def adopt(parent: str | None, refs: Any) -> None:
    """``refs`` (what ``.remote()`` returned in a worker: a ref, a list of them, a generator, None) were
    submitted by the task or actor call ``parent``: the state API names it as their parent, and
    cancelling ``parent`` with ``recursive=True`` cancels them."""
    if parent is None or refs is None:
        return
    if isinstance(refs, ObjectRefGenerator):
        refs = refs.completed()
    ids = [r.id for r in (refs if isinstance(refs, list) else [refs]) if isinstance(r, ObjectRef)]
    task_table.adopted(parent, ids)
    task = remote_function.running(parent)
    if task is None or not ids:
        return
    if task.cancelled is not None:  # submitted after its parent was cancelled
        if task.recursive:
            _cancel_child(ids[0], task.cancelled)
        return
    with _family_lock:
        task.children.append(ids[0])  # (the other ids are the same task's other values)
        if len(task.children) >= 2 * max(_PRUNE_AT, task.kept):  # a long-lived parent: forget those done
            task.children = [r for r in task.children if remote_function.pending(r) or actor.pending(r)]
            task.kept = len(task.children)


_PRUNE_AT = 64


_seen_cancelled: set[tuple[str | None, int, int]] = set()  # in a worker: cancelled for good, no need to ask again


def is_canceled() -> bool:
    """Whether ``muster.cancel`` was called on the task or actor call running here (Ray's
    ``get_runtime_context().is_canceled()``); a long loop in a plain actor's method checks it to stop.

    In an actor on the embedded engine the driver's word is already in the process; in a task, or on
    a Ray cluster, each check asks the driver (one round trip) until the answer is True.

    Raises:
        RuntimeError: called in the driver, or in an async actor (whose calls are cancelled with
            ``asyncio.CancelledError`` instead), as in Ray.
    """
    if not core_context.in_worker() or worker_side.current() is None:
        raise RuntimeError("is_canceled() is only available inside a task or an actor method (as in Ray): "
                           "call it from the remote function or actor method that may be cancelled.")
    if worker_side.in_async_actor():
        raise RuntimeError("is_canceled() is not supported in an async actor (as in Ray): a cancelled call "
                           "gets asyncio.CancelledError at its next await; catch that to clean up.")
    key = worker_side.current_call()
    if key in _seen_cancelled:
        return True
    if key[0] is None:  # an actor call: the driver may have said so already
        told = worker_side.call_cancelled_here(key[2])
        if told is not None:
            return told
    if not core_context.send_event(events.IsCanceled(*key)):
        return False
    _seen_cancelled.add(key)
    return True


def cancelled(request: events.IsCanceled) -> bool:
    """The driver's answer to a worker's :func:`is_canceled`."""
    if request.task_id is not None:
        return remote_function.is_cancelled(request.task_id)
    try:
        return actor.lookup(request.actor)._is_cancelled(request.token)
    except KeyError:
        return False
