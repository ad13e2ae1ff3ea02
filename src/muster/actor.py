"""Ray's ``ray.actor``: the actor types, for type hints (``handle: muster.actor.ActorHandle``), and
``exit_actor()``.
"""

from __future__ import annotations

import atexit
from typing import Any, NoReturn

from muster.tasks.actor import ActorClass, ActorHandle
from muster.tasks.actor_method import ActorMethod


def exit_actor() -> NoReturn:
    """End the calling actor on purpose, as Ray's: it is not restarted (whatever ``max_restarts``
    says), its ``__ray_shutdown__()`` (if its class defines one) and ``atexit`` handlers run, and the
    call that asked, with every call queued behind it, fails with ``ActorDiedError`` saying it exited.
    (``sys.exit()`` in a method ends the process too, but as a failure: ``max_restarts`` applies.)

    Raises:
        TypeError: called outside an actor.
    """
    from muster.core import context as core_context
    from muster.exceptions import InvalidTypeError
    from muster.tasks import events, worker_side

    info = worker_side.current()
    if info is None or info.actor_id is None:
        raise InvalidTypeError("exit_actor() ends the actor it is called in; here no actor runs (end one from "
                               "outside with muster.kill(handle)).")
    core_context.send_event(events.ExitActor(int(info.actor_id)))  # waits: the owner knows before the death
    worker_side.run_shutdown_hook()  # the actor's __ray_shutdown__, as Ray calls it when an actor ends on purpose
    core_context.flush()  # its user metrics, while the channel still works (a Ray worker's atexit disconnects it)
    atexit._run_exitfuncs()
    core_context.exit_process(0)


def __getattr__(name: str) -> Any:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.actor", name)


__all__ = ["ActorClass", "ActorHandle", "ActorMethod", "exit_actor"]
