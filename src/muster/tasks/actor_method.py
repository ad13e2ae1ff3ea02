"""An actor method's options: ``@muster.method(...)`` on its definition, ``handle.m.options(...)`` on one call.

Both take Ray 2.60's keys (``options.METHOD_OPTIONS``, ``options.CALL_OPTIONS``). A call's options
override its method's, which override its actor's (``max_task_retries``); the ones muster does not
honour warn once, naming themselves (see :mod:`muster.tasks.options`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.tasks import options as opts

_DECLARED = "__muster_method_options__"  # where @muster.method keeps a method's options


def method(*args: Any, **options: Any) -> Any:
    """Options for one actor method, as Ray's ``@ray.method(num_returns=2)`` (``@ray.method`` alone: none).

    ``concurrency_group="io"`` puts the method in the actor's group ``io`` (one of its
    ``concurrency_groups``; see :mod:`muster.tasks.concurrency_groups`). ``max_task_retries`` replaces
    the actor's for this method's calls; with ``retry_exceptions`` (True, or a list of exception types)
    a call that raises one of them runs again, up to ``max_task_retries`` times, as in Ray.

    Raises:
        InvalidTypeError: an option that is not one of Ray's (``options.METHOD_OPTIONS``), or positional ones.
        InvalidArgumentError: a value out of range (``max_task_retries=-2``, ``retry_exceptions="yes"``).
    """
    if len(args) == 1 and callable(args[0]) and not options:  # bare @muster.method
        setattr(args[0], _DECLARED, {})
        return args[0]
    if args:
        raise InvalidTypeError(f"@muster.method takes keyword options only (num_returns=...); got {args!r}.")
    if set(options) - opts.METHOD_OPTIONS:  # an unknown key fails at once, as in Ray
        opts.validate(options, opts.METHOD_OPTIONS, "@muster.method")

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        what = f"@muster.method on {getattr(fn, '__qualname__', fn)}"
        setattr(fn, _DECLARED, opts.validate(options, opts.METHOD_OPTIONS, what))
        opts.check_generator_returns(fn, options.get("num_returns"), what)
        return fn

    return decorate


def declared(cls: type | None, name: str) -> dict[str, Any]:
    """The ``@muster.method`` options of ``cls``'s method ``name`` (none when it has none, or ``cls`` is unknown)."""
    fn = getattr(cls, name, None) if cls is not None else None
    return getattr(fn, _DECLARED, None) or {}


@dataclass(frozen=True)
class Retries:
    """How one actor call is retried: ``max_task_retries`` times (-1: no limit) when its actor dies under it,
    and when it raises an exception ``retry_exceptions`` names (False: never; True: any; else a list of types)."""

    max_task_retries: int = 0
    retry_exceptions: Any = False

    @staticmethod
    def of(method_options: dict[str, Any], call_options: dict[str, Any], actor_retries: int) -> "Retries":
        """The call's options, else its method's, else (``max_task_retries``) its actor's, as in Ray."""
        merged = {**method_options, **{k: v for k, v in call_options.items() if v is not None}}
        retries = merged.get("max_task_retries")
        return Retries(actor_retries if retries is None else retries, merged.get("retry_exceptions") or False)


class ActorMethod:
    """``handle.name``: ``.remote(...)`` calls the method; ``.options(...)`` a copy with some call options."""

    def __init__(self, actor: Any, name: str, options: dict[str, Any] | None = None):
        self._actor, self._name, self._options = actor, name, options or {}

    def options(self, **options: Any) -> "ActorMethod":
        """A copy with these call options (Ray's ``actor.method.options(...)``), over any given before.

        Raises:
            InvalidTypeError: an option that is not one of Ray's (``options.CALL_OPTIONS``).
            InvalidArgumentError: ``_num_objects_per_yield`` (the decorator's only, as in Ray), or a bad value.
        """
        cls = getattr(self._actor, "_cls", None)
        what = f"{cls.__name__ if cls is not None else 'actor'}.{self._name}.options()"
        if "_num_objects_per_yield" in options:
            raise InvalidArgumentError(
                f"{what}: _num_objects_per_yield={options['_num_objects_per_yield']!r} cannot be set per call (as "
                "in Ray); set it on the method: @muster.method(_num_objects_per_yield=...).")
        options = opts.validate(options, opts.CALL_OPTIONS, what)
        opts.check_generator_returns(getattr(cls, self._name, None) if cls is not None else None,
                                     options.get("num_returns"), what)
        return ActorMethod(self._actor, self._name, {**self._options, **options})

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        cls = getattr(self._actor, "_cls", None)
        if cls is not None:
            opts.check_method_call(cls, self._name, args, kwargs)
        return self._actor._call(self._name, args, kwargs, self._options)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise InvalidTypeError(f"Actor methods cannot be called directly. Use .{self._name}.remote(...).")
