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
from muster.core.runtime import RuntimeActor
from muster.exceptions import MusterError
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


def _in_background(handle: RuntimeActor, work: Callable[[], Any]) -> Future:
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


def _get(handle: RuntimeActor, e: events.Get) -> Future:
    def get_all() -> list[tuple[bool, Any]]:
        futures = [objects.lookup(i) for i in e.ids]
        failed, pending = objects.settle(futures, e.timeout)
        if failed is not None:  # the worker raises it at once, as Ray's get does
            return [(False, failed.exception())]
        if pending:
            from muster.exceptions import GetTimeoutError

            raise GetTimeoutError(f"muster.get timed out after {e.timeout} s.")
        return [(True, f.result()) for f in futures]

    return _in_background(handle, get_all)


def _wait(handle: RuntimeActor, e: events.Wait) -> Future:
    refs = [objects.ObjectRef(i) for i in e.ids]
    return _in_background(handle, lambda: list(objects._wait_local(refs, e.num_returns, e.timeout)))


def _submit(handle: RuntimeActor, e: events.Submit) -> Any:
    from muster.tasks import remote_function as rf

    refs = rf.shape(rf.submit(e.fn, e.args, e.kwargs, e.options), rf.num_returns(e.fn, e.options))
    return _adopted(e.parent, refs)


def _create_actor(handle: RuntimeActor, e: events.CreateActor) -> int:
    from muster.tasks import actor

    return actor.create(e.cls, e.args, e.kwargs, e.options)._id


def _actor_call(handle: RuntimeActor, e: events.ActorCall) -> Any:
    from muster.tasks import actor

    call = actor.lookup(e.actor)._call(e.method, e.args, e.kwargs, e.options, submitter=("worker", id(handle)))
    return _adopted(e.parent, call)


def _exit_actor(handle: RuntimeActor, e: events.ExitActor) -> None:
    from muster.tasks import actor

    actor.lookup(e.actor)._exiting()


def _kill(handle: RuntimeActor, e: events.Kill) -> None:
    from muster.tasks import actor

    actor.lookup(e.actor)._kill(e.no_restart)


def _task_started(handle: RuntimeActor, e: events.TaskStarted) -> None:
    from muster.tasks import remote_function

    remote_function.task_started(e.task_id, handle)


def _yielded(handle: RuntimeActor, e: events.Yielded) -> None:
    from muster.tasks import generators

    generators.yielded(e.task_id, e.index, e.value)


def _actor_call_done(handle: RuntimeActor, e: events.ActorCallDone) -> None:
    from muster.tasks import actor

    actor.lookup(e.actor_id)._answered(e.token, e.ok, e.value)


def _cancel(handle: RuntimeActor, e: events.Cancel) -> bool:
    from muster.tasks.cancel import cancel_ref

    return cancel_ref(objects.ObjectRef(e.ref_id), e.force, e.recursive)


def _is_canceled(handle: RuntimeActor, e: events.IsCanceled) -> bool:
    from muster.tasks.cancel import cancelled

    return cancelled(e)


def _get_actor(handle: RuntimeActor, e: events.GetActor) -> int | None:
    from muster.tasks import named

    found = named.lookup(e.name, e.namespace)
    if found is None:
        return None
    found._borrowed = True  # a worker holds a handle of it now: it is kept (muster.tasks.lifetimes)
    return found._id


def _list_named(handle: RuntimeActor, e: events.ListNamedActors) -> list[Any]:
    from muster.tasks import named

    return named.listing(e.all_namespaces)


def _list_actors(handle: RuntimeActor, e: events.ListActors) -> list[dict[str, Any]]:
    from muster.tasks.actor_table import actor_rows

    return actor_rows()


def _list_tasks(handle: RuntimeActor, e: events.ListTasks) -> list[dict[str, Any]]:
    from muster.tasks.task_table import task_rows

    return task_rows()


def _task_of_ref(handle: RuntimeActor, e: events.TaskOfRef) -> str | None:
    from muster.tasks.task_table import task_of

    return task_of(e.ref_id)


def _resources(handle: RuntimeActor, e: events.Resources) -> dict[str, float]:
    return get_runtime().ray_view(available=e.available)


_HANDLERS: dict[type, Callable[[RuntimeActor, Any], Any]] = {
    events.Resources: _resources,
    events.Put: lambda handle, e: objects.pin((objects.failed if e.failed else objects.store)(e.value)),  # no copy
    events.Get: _get,
    events.Wait: _wait,
    events.Submit: _submit,
    events.CreateActor: _create_actor,
    events.ActorCall: _actor_call,
    events.Kill: _kill,
    events.ExitActor: _exit_actor,
    events.TaskStarted: _task_started,
    events.Yielded: _yielded,
    events.ActorCallDone: _actor_call_done,
    events.Cancel: _cancel,
    events.IsCanceled: _is_canceled,
    events.GetActor: _get_actor,
    events.ListNamedActors: _list_named,
    events.ListActors: _list_actors,
    events.ListTasks: _list_tasks,
    events.TaskOfRef: _task_of_ref,
}


def register(request: type, handler: Callable[[RuntimeActor, Any], Any]) -> None:
    """Answer workers' ``request`` events with ``handler`` here (a layer above, e.g. Serve's routes)."""
    _HANDLERS[request] = handler


def serves(payload: Any) -> bool:
    """Whether ``payload`` is a request of the tasks layer (``.remote()``, get, put, actors)."""
    return type(payload) in _HANDLERS


class Gang:
    """The tasks layer's owner for a gang of workers it did not start (a training run's).

    Their requests are served as any worker's, but the actors they create share the gang's
    fate, as an actor shares its creator's in Ray: :meth:`close` (the gang has ended) kills
    each one not made with ``lifetime="detached"``, so a run or a Tune trial leaves none behind.
    """

    def __init__(self, what: str):
        self._what = what
        self._actors: list[int] = []
        self._lock = threading.Lock()

    def handle_event(self, handle: RuntimeActor, payload: Any) -> Any:
        reply = handle_event(handle, payload)
        if isinstance(payload, events.CreateActor) and payload.options.get("lifetime") != "detached":
            with self._lock:
                self._actors.append(reply)
        return reply

    def close(self) -> None:
        from muster.tasks import actor

        with self._lock:
            ids, self._actors = self._actors, []
        for actor_id in ids:
            try:
                owned = actor.lookup(actor_id)
            except KeyError:
                continue
            owned._kill(no_restart=True, reason=f"{self._what} ended")


def handle_event(handle: RuntimeActor, payload: Any) -> Any:
    """Serve one request from a worker running a task or an actor (one handler per event type)."""
    handler = _HANDLERS.get(type(payload))
    if handler is None:
        raise MusterError(
            f"unknown request from a worker: {type(payload).__name__}. The worker runs a muster other "
            "than the driver's: install the same muster version on every node."
        )
    return handler(handle, payload)


def _adopted(parent: str | None, refs: Any) -> Any:
    """What a worker's ``.remote()`` gets back (:func:`_pin_shaped`), its work recorded as ``parent``'s."""
    from muster.tasks.cancel import adopt

    adopt(parent, refs)
    return _pin_shaped(refs)


def _pin_shaped(refs: Any) -> Any:
    """A ref's id, a list of ids, None, or ``Streamed``, for a worker to rebuild its refs from
    (:func:`muster.tasks.generators.shaped`)."""
    from muster.tasks.generators import ObjectRefGenerator

    if refs is None:
        return None
    if isinstance(refs, list):
        return [objects.pin(r) for r in refs]
    if isinstance(refs, ObjectRefGenerator):
        source = refs.completed()
        assert source is not None  # the caller's generator, not yet iterated
        return events.Streamed(objects.pin(source))
    return objects.pin(refs)
