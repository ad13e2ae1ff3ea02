"""Ray's ``ray.actor``: the actor types, for type hints (``handle: muster.actor.ActorHandle``).

``exit_actor`` is not provided: end an actor with ``muster.kill(handle)``, or with ``sys.exit()``
in one of its methods (the call raises ``ActorDiedError``, and ``max_restarts`` applies).
"""

from __future__ import annotations

from typing import Any

from muster.tasks.actor import ActorClass, ActorHandle
from muster.tasks.actor import _Method as ActorMethod


def __getattr__(name: str) -> Any:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.actor", name)


__all__ = ["ActorClass", "ActorHandle", "ActorMethod"]
