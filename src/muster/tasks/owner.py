"""The driver as owner of every task, actor and object: it answers workers' requests.

A worker that calls ``muster.get``, ``.remote()`` or ``muster.put`` sends an
event; :func:`handle_event` serves it here.  Waits run on a helper thread and
answer through a future, so the worker's link stays free, and the waiting
worker lends its CPUs out meanwhile (nested tasks cannot deadlock).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any, Callable

from muster.core.api import get_runtime
from muster.core.runtime import ActorHandle as CoreHandle
from muster.tasks import events, objects


def when_all(futures: list[Future], then: Callable[[], None]) -> None:
    """Call ``then`` once every future is done (at once if there are none)."""
    if not futures:
        then()
        return
    # A done future keeps its callbacks: drop ``then`` once called, or a dependency would keep
    # its dependent task's arguments and result alive (and, through them, itself: a cycle).
    state: list[Any] = [len(futures), then]
    lock = threading.Lock()

    def one_done(_: Future) -> None:
        with lock:
            state[0] -= 1
            call, state[1] = (state[1], None) if state[0] == 0 else (None, state[1])
        if call is not None:
            call()

    for f in futures:
        f.add_done_callback(one_done)


def resolve(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Top-level ObjectRef arguments become their values (as in Ray); their errors propagate."""

    def value(a: Any) -> Any:
        if isinstance(a, objects.ObjectRef):
            fut = a.future()
            exc = fut.exception()
            if exc is not None:
                raise exc
            return fut.result()
        return a

    return tuple(value(a) for a in args), {k: value(v) for k, v in kwargs.items()}


def dependencies(args: tuple, kwargs: dict) -> list[Future]:
    return [a.future() for a in (*args, *kwargs.values()) if isinstance(a, objects.ObjectRef)]


def _in_background(handle: CoreHandle, work: Callable[[], Any]) -> Future:
    out: Future = Future()

    def run() -> None:
        try:
            with get_runtime().blocked(handle):
                result = work()
            out.set_result(result)
        except BaseException as exc:  # noqa: BLE001
            out.set_exception(exc)

    threading.Thread(target=run, name="muster-owner-wait", daemon=True).start()
    return out


def handle_event(handle: CoreHandle, payload: Any) -> Any:
    """Serve one request from a worker running a task or an actor."""
    from muster.tasks import actor, named, remote_function

    if isinstance(payload, events.TaskStarted):
        remote_function.task_started(payload.task_id, handle)
        return None
    if isinstance(payload, events.ActorCallDone):
        actor.lookup(payload.actor_id)._complete(payload.token, payload.ok, payload.value)
        return None
    if isinstance(payload, events.Cancel):
        from muster.tasks.cancel import cancel

        return cancel(objects.ObjectRef(payload.ref_id), force=payload.force)
    if isinstance(payload, events.GetActor):
        found = named.lookup(payload.name, payload.namespace)
        return None if found is None else found._id
    if isinstance(payload, events.ListNamedActors):
        return named.listing(payload.all_namespaces)
    kind = payload.get("kind") if isinstance(payload, dict) else None
    if kind == "cluster_resources":
        return get_runtime().resources()
    if kind == "available_resources":
        return get_runtime().available()
    if kind == "put":
        return objects.pin(objects.store(payload["value"]))  # fresh off the wire: no copy
    if kind == "get":

        def get_all() -> list[tuple[bool, Any]]:
            out = []
            futures = [objects.lookup(i) for i in payload["ids"]]
            objects._wait_local([objects.ObjectRef(i, f) for i, f in zip(payload["ids"], futures)],
                                len(futures), payload["timeout"])
            for f in futures:
                if not f.done():
                    from muster.exceptions import GetTimeoutError

                    raise GetTimeoutError(f"muster.get timed out after {payload['timeout']} s.")
                exc = f.exception()
                out.append((False, exc) if exc is not None else (True, f.result()))
            return out

        return _in_background(handle, get_all)
    if kind == "wait":
        refs = [objects.ObjectRef(i) for i in payload["ids"]]
        return _in_background(
            handle, lambda: list(objects._wait_local(refs, payload["num_returns"], payload["timeout"]))
        )
    if kind == "submit":
        fn, options = payload["fn"], payload["options"]
        ref = remote_function.submit(fn, payload["args"], payload["kwargs"], options)
        n = remote_function.num_returns(fn, options)
        return _pin_shaped(ref if n == "streaming" else remote_function.shape(ref, n))
    if kind == "create_actor":
        return actor.create(payload["cls"], payload["args"], payload["kwargs"], payload["options"])._id
    if kind == "actor_call":
        target = actor.lookup(payload["actor"])
        return _pin_shaped(target._call(payload["method"], payload["args"], payload["kwargs"],
                                        payload.get("num_returns")))
    if kind == "kill":
        actor.lookup(payload["actor"])._kill(payload["no_restart"])
        return None
    raise ValueError(f"unknown request from a worker: {kind!r}")


def _pin_shaped(refs: Any) -> Any:
    """A ref's id, a list of ids, or None, for a worker to rebuild its refs from."""
    if refs is None:
        return None
    if isinstance(refs, list):
        return [objects.pin(r) for r in refs]
    return objects.pin(refs)
