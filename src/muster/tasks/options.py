"""Options of ``@muster.remote`` / ``.options(...)``: validated once, turned into resources."""

from __future__ import annotations

import functools
import inspect
import warnings
from typing import Any

from muster.core import context as core_context
from muster.core import resources as res
from muster.core.init_options import warn_unused_runtime_env
from muster.core.runtime import NodeRef
from muster.exceptions import InvalidArgumentError, InvalidTypeError, ResourcesUnavailableError, TaskError
from muster.runtime_env import working_dir as local_dirs
from muster.runtime_env.checks import check_runtime_env
from muster.tasks import labels

#: The placement group options (read by :func:`placement_group_of`), and ``label_selector`` and
#: ``fallback_strategy`` (checked against the engine's node: :mod:`muster.tasks.labels`).
_PLACED = {"scheduling_strategy", "placement_group", "placement_group_bundle_index",
           "placement_group_capture_child_tasks", "label_selector", "fallback_strategy"}
#: Ray 2.60's options that muster takes and does nothing with, each with why and what to do: set to anything but
#: Ray's default, one warns (once per function or class) naming itself and the fix.
_IGNORED = {
    "accelerator_type": "muster does not schedule by accelerator type (one machine has one kind); ask for num_gpus=",
    "enable_task_events": "muster records every task in its state API (muster.util.state.list_tasks) all the same",
    "object_store_memory": "muster reserves no object store memory for a task or actor",
    "_labels": "muster keeps no labels on a task or actor (Ray shows them in its dashboard)",
    "_metadata": "muster's tasks carry no libraries' metadata",
    "_generator_backpressure_num_objects": "muster's streaming generators never pause a generator that runs "
                                           "ahead of its reader",
    "_num_objects_per_yield": "muster sends each yielded value on its own",
    "_actor_generator_backpressure_num_objects": "muster's streaming generators never pause a generator that runs "
                                                 "ahead of its reader",
    "enable_tensor_transport": "muster moves tensors through its object store (no GPU-to-GPU transport)",
    "tensor_transport": "muster moves tensors through its object store (no GPU-to-GPU transport)",
}
_DEFAULTS = {"enable_task_events": True}  # Ray's default where it is not None: setting it changes nothing
_NO_OP = _PLACED | set(_IGNORED)
TASK_OPTIONS = {"num_cpus", "num_gpus", "resources", "max_retries", "retry_exceptions", "name", "memory",
                "num_returns", "runtime_env", "max_calls"} | _NO_OP - {"_actor_generator_backpressure_num_objects",
                                                                      "enable_tensor_transport", "tensor_transport"}
ACTOR_OPTIONS = {"num_cpus", "num_gpus", "resources", "max_restarts", "max_task_retries", "name", "memory",
                 "namespace", "get_if_exists", "lifetime", "max_concurrency", "runtime_env", "concurrency_groups",
                 "max_pending_calls", "allow_out_of_order_execution"} | _NO_OP - {
                     "_generator_backpressure_num_objects", "_num_objects_per_yield", "tensor_transport"}
#: Ray 2.60's ``@ray.method`` options, and those of ``actor.method.options(...)`` (``ActorMethod._remote``'s
#: keywords: ``_num_objects_per_yield`` is the decorator's only, as in Ray)
METHOD_OPTIONS = {"num_returns", "concurrency_group", "max_task_retries", "retry_exceptions", "enable_task_events",
                  "_generator_backpressure_num_objects", "_num_objects_per_yield", "tensor_transport"}
CALL_OPTIONS = METHOD_OPTIONS - {"_num_objects_per_yield"} | {"name", "_labels"}
_warned_ignored: set[tuple[str, str]] = set()


def _check_unhonoured(options: dict[str, Any], what: str) -> None:
    """Warn for each option muster ignores that ``options`` set; refuse a label selector no node satisfies."""
    for key, why in _IGNORED.items():
        if options.get(key) is not None and options.get(key) != _DEFAULTS.get(key) and (what, key) not in \
                _warned_ignored:
            _warned_ignored.add((what, key))
            warnings.warn(f"{what}: {key}={options[key]!r} has no effect: {why}. Leave it out to silence this.",
                          stacklevel=5)
    selector, fallback = options.get("label_selector"), options.get("fallback_strategy")
    if fallback is None:
        labels.check_selector(selector, what)
        return
    if not isinstance(fallback, list) or not all(isinstance(f, dict) and f and set(f) <= {"label_selector"}
                                                 for f in fallback):
        raise InvalidArgumentError(f"{what}: fallback_strategy={fallback!r}; pass a list of dicts, each "
                                   "{'label_selector': {...}} (Ray's only fallback option).")
    choices = [selector] + [f["label_selector"] for f in fallback]
    for choice in choices[:-1]:  # the first one the node satisfies is used, as Ray tries them in order
        try:
            labels.check_selector(choice, what)
            return
        except InvalidArgumentError:
            continue
    labels.check_selector(choices[-1], what, "fallback_strategy's last label_selector")


_warned_memory: set[str] = set()


def validate(options: dict[str, Any], allowed: set[str], what: str) -> dict[str, Any]:
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise InvalidTypeError(
            f"{what}: unknown option(s) {', '.join(unknown)}. Supported: {', '.join(sorted(allowed))}."
        )
    for key in ("num_cpus", "num_gpus", "memory", "object_store_memory"):  # memory: bytes
        v = options.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0):
            raise InvalidArgumentError(f"{what}: {key}={v!r}; use a number{' of bytes' * ('memory' in key)} >= 0.")
    for key in ("max_retries", "max_restarts", "max_task_retries"):
        v = options.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < -1):
            raise InvalidArgumentError(f"{what}: {key}={v!r}; use an integer >= 0, or -1 for unlimited.")
    n = options.get("num_returns")
    if n is not None and n not in ("dynamic", "streaming") and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
        raise InvalidArgumentError(f"{what}: num_returns={n!r}; use an integer >= 0, 'dynamic' or 'streaming'.")
    if options.get("lifetime") not in (None, "detached", "non_detached"):
        raise InvalidArgumentError(f"{what}: lifetime={options['lifetime']!r}; use None, 'detached' or 'non_detached'.")
    rx = options.get("retry_exceptions")
    if rx is not None and not isinstance(rx, bool) and not (
            isinstance(rx, (list, tuple)) and all(isinstance(t, type) and issubclass(t, BaseException) for t in rx)):
        raise InvalidArgumentError(
            f"{what}: retry_exceptions={rx!r}; use True (retry any exception) or a list of exception classes."
        )
    group = options.get("concurrency_group")
    if group is not None and not isinstance(group, str):
        raise InvalidArgumentError(f"{what}: concurrency_group={group!r}; use the name (a str) of one of the "
                                   "actor's concurrency_groups.")
    strategy = options.get("scheduling_strategy")
    if isinstance(strategy, str) and strategy not in ("DEFAULT", "SPREAD"):
        raise InvalidArgumentError(
            f"{what}: scheduling_strategy={strategy!r}; use 'DEFAULT', 'SPREAD', or a strategy object from "
            "muster.util.scheduling_strategies (PlacementGroupSchedulingStrategy, NodeAffinitySchedulingStrategy)."
        )
    mc = options.get("max_concurrency")
    if mc is not None and (isinstance(mc, bool) or not isinstance(mc, int) or mc < 1):
        raise InvalidArgumentError(f"{what}: max_concurrency={mc!r}; use an integer >= 1.")
    env = options.get("runtime_env")
    check_runtime_env(env, what)
    warn_unused_runtime_env(env, what, stacklevel=4, local_dirs=True)
    if not core_context.in_worker():  # a local working_dir/py_modules is copied where it is given (in the driver)
        local_dirs.resolve(env, what)
    _check_unhonoured(options, what)
    if options.get("memory") and what not in _warned_memory:
        _warned_memory.add(what)
        warnings.warn(
            f"{what}: memory={options['memory']!r} is not reserved by muster (memory is not a resource its "
            "engine schedules by): as many run at once as their CPUs allow. To run fewer at once, ask for more "
            "num_cpus each.", stacklevel=4,
        )
    calls = options.get("max_calls")
    if calls is not None and (isinstance(calls, bool) or not isinstance(calls, int) or calls < 0):
        raise InvalidArgumentError(f"{what}: max_calls={calls!r}; use an integer >= 0 (0: no limit).")
    if options.get("resources") is not None:
        custom = options["resources"]
        if not isinstance(custom, dict) or "CPU" in custom or "GPU" in custom:
            raise InvalidArgumentError(
                f"{what}: resources={custom!r}; pass a dict of custom resources, and CPU/GPU as num_cpus=/num_gpus=."
            )
        res.normalize(custom, what=f"{what}: resources")
    return dict(options)


def check_generator_returns(fn: Any, num_returns: Any, what: str) -> None:
    """As in Ray 2.60: ``num_returns="streaming"``/``"dynamic"`` only on a generator function (else its caller
    would wait for a stream of values it never yields), and ``"dynamic"`` warns that it is deprecated.
    ``fn`` None (a method muster cannot see from here) skips the generator check."""
    if num_returns not in ("streaming", "dynamic"):
        return
    if num_returns == "dynamic":
        warnings.warn(f"{what}: num_returns='dynamic' is deprecated, as in Ray, and will be removed in a future "
                      "release; use num_returns='streaming' instead.", DeprecationWarning, stacklevel=_user_level())
    if fn is not None and not (inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn)):
        name = getattr(fn, "__name__", repr(fn))
        raise InvalidArgumentError(
            f"{what}: num_returns={num_returns!r} is for generator functions (that yield their results), and "
            f"{name} is not one. Yield each value instead of returning them, or leave num_returns out "
            "(one value), or give their number, e.g. num_returns=2 for a function that returns a 2-tuple.")


def _user_level() -> int:
    """The ``stacklevel`` of the first caller outside muster's package, so a warning names the user's line."""
    import sys
    from types import FrameType

    package = __name__.split(".")[0] + "."
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and (frame.f_globals.get("__name__") or "").startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def retries_exception(retry_exceptions: Any, error: BaseException | None) -> bool:
    """Whether ``retry_exceptions`` (a task's or actor method's) retries ``error``, an exception the work raised
    (a :class:`TaskError`): True retries any; a list, only those types (and their subclasses), as in Ray."""
    if not isinstance(error, TaskError) or not retry_exceptions:
        return False
    if isinstance(retry_exceptions, bool):
        return True
    if error.cause is not None:
        return isinstance(error.cause, tuple(retry_exceptions))
    return any(error.cause_type in (t.__name__, t.__qualname__, f"{t.__module__}.{t.__qualname__}")
               for t in retry_exceptions)


def declared_task_options(options: dict[str, Any]) -> dict[str, Any]:
    """``@muster.remote`` options of a function with Ray's default filled in: a function declared
    with GPUs runs once per worker (``max_calls=1``), so the GPU memory a framework keeps after it is
    freed with the worker's process."""
    if options.get("num_gpus") and options.get("max_calls") is None:
        return {**options, "max_calls": 1}
    return options


def placement_group_of(options: dict[str, Any]) -> tuple[Any, int, bool]:
    """The placement group ``options`` schedule into (None: none), the bundle's index (-1: any), and
    whether child tasks inherit the group."""
    strategy: Any = options.get("scheduling_strategy")
    if hasattr(strategy, "placement_group"):
        group = strategy.placement_group
        if group is None or getattr(group, "is_empty", False):  # Ray's PlacementGroup.empty(): no group
            return None, -1, bool(strategy.placement_group_capture_child_tasks)
        return group, strategy.placement_group_bundle_index, bool(strategy.placement_group_capture_child_tasks)
    group = options.get("placement_group")
    if group is None or group == "default" or getattr(group, "is_empty", False):
        return None, -1, False
    index = options.get("placement_group_bundle_index")
    return group, -1 if index is None else index, bool(options.get("placement_group_capture_child_tasks"))


def node_of(options: dict[str, Any], what: str) -> NodeRef | None:
    """The node ``options`` pin the work to (Ray's ``NodeAffinitySchedulingStrategy``; None: none).

    Raises:
        ResourcesUnavailableError: (Ray's ``TaskUnschedulableError``) with ``soft=False``, no live node has
            that id, so the work could never start. Ray fails it too, when its scheduler finds that out.
    """
    strategy: Any = options.get("scheduling_strategy")
    if not (hasattr(strategy, "node_id") and hasattr(strategy, "soft")):
        return None
    node = NodeRef(str(strategy.node_id), bool(strategy.soft))
    if not node.soft:
        import muster

        alive = [n["NodeID"] for n in muster.nodes() if n.get("Alive")]
        if node.node_id not in alive:
            raise ResourcesUnavailableError(
                f"{what}: scheduling_strategy=NodeAffinitySchedulingStrategy(node_id={node.node_id!r}, soft=False) "
                f"names no live node, so it could never start (the nodes: {', '.join(map(repr, alive))}). Fix: pass "
                "the NodeID of one of muster.nodes() (muster.get_runtime_context().get_node_id() is this one's), "
                "or soft=True to run it elsewhere when that node cannot.")
    return node


def inherit_placement_group(options: dict[str, Any], group: Any) -> dict[str, Any]:
    """``options`` of a task or actor started inside a group that captures its children (Ray's
    ``placement_group_capture_child_tasks``): in that group too, unless they name a strategy or group."""
    if group is None or options.get("scheduling_strategy") is not None or options.get("placement_group") is not None:
        return options
    return {**options, "placement_group": group, "placement_group_capture_child_tasks": True}


def to_resources(options: dict[str, Any], default_cpus: float) -> dict[str, float]:
    out: dict[str, float] = {"CPU": float(options.get("num_cpus", default_cpus) or 0.0)}
    if options.get("num_gpus"):
        out["GPU"] = float(options["num_gpus"])
    out.update(options.get("resources") or {})
    return res.normalize(out)



def check_call(fn: Any, args: tuple, kwargs: dict, what: str, skip_first: bool = False) -> None:
    """Raise at ``.remote()`` when ``args``/``kwargs`` do not fit ``fn``'s signature, as Ray does (its
    ``TypeError`` comes at the call, not from ``get``). ``skip_first`` drops ``self``/``cls``. A callable
    without a readable signature is not checked.

    Raises:
        InvalidTypeError: (a ``TypeError``) naming the call and what ``inspect`` found wrong.
    """
    try:
        sig = _signature(fn, skip_first)
    except TypeError:  # an unhashable callable: read each time
        sig = _signature.__wrapped__(fn, skip_first)
    _bind(sig, args, kwargs, what)


def check_method_call(cls: Any, name: str, args: tuple, kwargs: dict) -> None:
    """:func:`check_call` for ``actor.<name>.remote(...)`` (``__init__`` for the class's own ``.remote()``):
    plain, static and class methods are checked; a class without ``__init__`` takes no arguments."""
    what = f"{cls.__name__}.remote()" if name == "__init__" else f"{cls.__name__}.{name}.remote()"
    try:
        sig = _method_signature(cls, name)
    except TypeError:  # an unhashable class: read each time
        sig = _method_signature.__wrapped__(cls, name)
    _bind(sig, args, kwargs, what)


def _bind(sig: inspect.Signature | None, args: tuple, kwargs: dict, what: str) -> None:
    if sig is None:
        return
    try:
        sig.bind(*args, **kwargs)
    except TypeError as exc:
        raise InvalidTypeError(f"{what}: {exc}; it takes {sig}.") from None


# Signatures are read once per function (``inspect.signature`` costs tens of microseconds, a tenth of a
# task's round trip); bounded, as a driver may define functions in a loop.
@functools.lru_cache(maxsize=4096)
def _signature(fn: Any, skip_first: bool) -> inspect.Signature | None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    if skip_first:
        sig = sig.replace(parameters=list(sig.parameters.values())[1:])
    return sig


@functools.lru_cache(maxsize=4096)
def _method_signature(cls: Any, name: str) -> inspect.Signature | None:
    method = inspect.getattr_static(cls, name, None)
    if name == "__init__" and method is object.__init__:
        # no __init__: no arguments, unless a custom __new__ takes them (it takes what it takes)
        return inspect.Signature() if inspect.getattr_static(cls, "__new__", None) is object.__new__ else None
    if isinstance(method, staticmethod):
        return _signature(method.__func__, False)
    if isinstance(method, classmethod) or inspect.isfunction(method):
        return _signature(getattr(method, "__func__", method), True)
    return None
