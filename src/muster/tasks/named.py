"""Named actors: ``options(name=..., namespace=..., get_if_exists=...)``, ``get_actor``, ``list_named_actors``.

The driver keeps the table; workers ask it through events.  A detached actor
(``lifetime="detached"``) is kept like any other: on muster's engine every
actor ends with the driver's ``shutdown()`` (there is no cluster to outlive it).
"""

from __future__ import annotations

import threading
from typing import Any

from muster.core import context as core_context
from muster.core.init_options import current_namespace
from muster.exceptions import ActorAlreadyExistsError, InvalidArgumentError
from muster.tasks import events

_names: dict[tuple[str, str], Any] = {}  # (namespace, name) -> the actor's record (actor._Actor)
_lock = threading.Lock()


def check_options(cls_name: str, options: dict[str, Any]) -> None:
    """An actor's ``name``, ``namespace`` and ``get_if_exists`` options, checked as Ray checks them.

    Raises:
        InvalidArgumentError: a name or namespace that is not a non-empty string, or get_if_exists without a name.
    """
    name, namespace = options.get("name"), options.get("namespace")
    if name is not None and (not isinstance(name, str) or not name):
        raise InvalidArgumentError(f"{cls_name}.options(name={name!r}): an actor's name is a non-empty "
                                   "string; give one, or leave name out for an actor no one looks up by name.")
    if namespace is not None and (not isinstance(namespace, str) or not namespace):
        raise InvalidArgumentError(f"{cls_name}.options(namespace={namespace!r}): a namespace is a non-empty "
                                   "string; give one, or pass None for the current namespace (as in Ray).")
    if options.get("get_if_exists") and not name:
        raise InvalidArgumentError(f"{cls_name}.options(get_if_exists=True) needs the actor's name: pass "
                                   "name='...' with it (as in Ray), or leave get_if_exists out.")


def claim(namespace: str, name: str, make: Any, get_if_exists: bool) -> Any:
    """The actor called ``name``: an existing one (``get_if_exists``), else ``make()``'s, registered."""
    with _lock:
        existing = _names.get((namespace, name))
        if existing is not None and not existing._gone():
            if get_if_exists:
                return existing
            raise ActorAlreadyExistsError(
                f"An actor named {name!r} already exists in namespace {namespace!r}; pick another name, pass "
                "get_if_exists=True to reuse it, or look it up with muster.get_actor(name)."
            )
        handle = make()
        _names[(namespace, name)] = handle
        return handle


def forget(handle: Any) -> None:
    with _lock:
        for key, h in list(_names.items()):
            if h is handle:
                del _names[key]


def lookup(name: str, namespace: str | None) -> Any:
    ns = namespace or current_namespace()
    with _lock:
        handle = _names.get((ns, name))
    return handle if handle is not None and not handle._gone() else None


def listing(all_namespaces: bool) -> list[Any]:
    ns = current_namespace()
    with _lock:
        live = [(k, h) for k, h in _names.items() if not h._gone()]
    if all_namespaces:
        return [{"name": n, "namespace": s} for (s, n), _ in live]
    return [n for (s, n), _ in live if s == ns]


def get_actor(name: str, namespace: str | None = None) -> Any:
    """The handle of the live actor called ``name`` (in ``namespace``, default: the current one).

    Raises:
        ValueError: no live actor has that name there, or the name or namespace is not a non-empty string.
    """
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"muster.get_actor(name={name!r}): pass the actor's name, a non-empty string.")
    if namespace is not None and (not isinstance(namespace, str) or not namespace):  # as Ray refuses it
        raise InvalidArgumentError(f"muster.get_actor({name!r}, namespace={namespace!r}): a namespace is a non-empty "
                                   "string; pass None to look in the current namespace.")
    if core_context.in_worker():
        actor_id = core_context.send_event(events.GetActor(name, namespace))
        if actor_id is not None:
            from muster.tasks.actor import WorkerActorHandle

            return WorkerActorHandle(actor_id)
    else:
        found = lookup(name, namespace)
        if found is not None:
            from muster.tasks.actor import ActorHandle

            return ActorHandle(found)
    raise InvalidArgumentError(
        f"Failed to look up actor {name!r} in namespace {namespace or current_namespace()!r}: no live actor has "
        "that name. Start it with Cls.options(name=...).remote(), or list names with "
        "muster.util.list_named_actors()."
    )


def list_named_actors(all_namespaces: bool = False) -> list[Any]:
    """Names of live named actors in the current namespace; with ``all_namespaces``, dicts of name and namespace."""
    if core_context.in_worker():
        return list(core_context.send_event(events.ListNamedActors(all_namespaces)))
    return listing(all_namespaces)
