"""Ray's ``ExecutionOptions`` and ``ExecutionResources`` (``from ray.data import ExecutionOptions``).

On one machine a pipeline runs in its consumer's threads, so of these options only ``preserve_order``
acts; the cluster ones (``resource_limits``, ``exclude_resources``, ``locality_with_output``,
``label_selector``...) are kept as set, so Ray's scripts that tune them run unchanged.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable

from muster.data.context import DataContext
from muster.exceptions import InvalidArgumentError


class ExecutionResources:
    """Ray's resource amounts (``cpu``, ``gpu``, ``object_store_memory``, ``memory``; unset is 0) or limits
    (``for_limits()``: unset is unlimited). Kept for Ray's scripts; no effect on muster's pipelines.

    Immutable and hashable, as Ray 2.60's: every operation returns a new one, and an amount is changed by
    assigning a copy (``ctx.execution_options.resource_limits = ctx.execution_options.resource_limits.copy(
    cpu=8)``). Amounts are rounded as Ray's: ``cpu`` and ``gpu`` to 5 decimals, the memories to whole bytes."""

    __slots__ = ("_cpu", "_gpu", "_object_store_memory", "_memory")  # None where not given (as Ray's)
    _cpu: float | None
    _gpu: float | None
    _object_store_memory: float | None
    _memory: float | None

    def __init__(self, cpu: float | None = None, gpu: float | None = None, object_store_memory: float | None = None,
                 memory: float | None = None):
        object.__setattr__(self, "_cpu", _rounded(cpu, 5))
        object.__setattr__(self, "_gpu", _rounded(gpu, 5))
        object.__setattr__(self, "_object_store_memory", _rounded(object_store_memory, 0))
        object.__setattr__(self, "_memory", _rounded(memory, 0))

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _AMOUNTS:
            raise AttributeError(
                f"ExecutionResources.{name} = {value!r}: an ExecutionResources is immutable, as Ray's. Assign a "
                f"copy with the new amount, e.g. options.resource_limits = options.resource_limits.copy("
                f"{name}={value!r}).")
        object.__setattr__(self, name, value)  # __slots__ refuses any other public name, as Ray's

    @property
    def cpu(self) -> float:
        return self._cpu or 0.0

    @property
    def gpu(self) -> float:
        return self._gpu or 0.0

    @property
    def object_store_memory(self) -> float:
        return self._object_store_memory or 0

    @property
    def memory(self) -> float:
        return self._memory or 0

    @classmethod
    def for_limits(cls, cpu: float | None = None, gpu: float | None = None, object_store_memory: float | None = None,
                   memory: float | None = None) -> ExecutionResources:
        """Limits: each amount not given is unlimited (``inf``)."""
        given = {"cpu": cpu, "gpu": gpu, "object_store_memory": object_store_memory, "memory": memory}
        return cls(**{k: math.inf if v is None else v for k, v in given.items()})

    @classmethod
    def zero(cls) -> ExecutionResources:
        """No resources (one shared instance, as Ray's)."""
        return _ZERO

    @classmethod
    def inf(cls) -> ExecutionResources:
        """Unlimited resources (one shared instance, as Ray's)."""
        return _INF

    @classmethod
    def from_resource_dict(cls, resources: dict[str, float]) -> ExecutionResources:
        """From Ray's resource names (``CPU``/``num_cpus``, ``GPU``/``num_gpus``, ``object_store_memory``,
        ``memory``)."""
        return cls(resources.get("CPU") or resources.get("num_cpus"), resources.get("GPU") or resources.get("num_gpus"),
                   resources.get("object_store_memory"), resources.get("memory"))

    def to_resource_dict(self) -> dict[str, float]:
        return {"CPU": self.cpu, "GPU": self.gpu, "object_store_memory": self.object_store_memory,
                "memory": self.memory}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ExecutionResources):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in _AMOUNTS)

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, n) for n in _AMOUNTS))

    def _each(self, other: ExecutionResources, fn: Callable[[float, float], float]) -> ExecutionResources:
        return ExecutionResources(*(fn(getattr(self, n), getattr(other, n)) for n in _AMOUNTS))

    def add(self, other: ExecutionResources) -> ExecutionResources:
        """Each amount plus ``other``'s."""
        return self._each(other, lambda a, b: a + b)

    def subtract(self, other: ExecutionResources) -> ExecutionResources:
        """Each amount less ``other``'s (may go negative: see ``is_non_negative``)."""
        return self._each(other, lambda a, b: a - b)

    def min(self, other: ExecutionResources) -> ExecutionResources:
        """The smaller of each amount and ``other``'s."""
        return self._each(other, min)

    def max(self, other: ExecutionResources) -> ExecutionResources:
        """The larger of each amount and ``other``'s."""
        return self._each(other, max)

    def floordiv(self, other: ExecutionResources) -> ExecutionResources:
        """How many times each of ``other``'s amounts fits in this one (``inf`` where ``other``'s is 0)."""
        return self._each(other, _times_in)

    def scale(self, f: float) -> ExecutionResources:
        """Each amount times ``f`` (by 0: zero, an unlimited amount too; an amount of 0 stays 0, as Ray's).

        Raises:
            InvalidArgumentError: ``f`` is negative.
        """
        if f < 0:
            raise InvalidArgumentError(f"ExecutionResources.scale({f!r}): the factor must be 0 or more.")
        if f == 0:
            return ExecutionResources.zero()
        return ExecutionResources(*(0.0 if getattr(self, n) == 0 else getattr(self, n) * f for n in _AMOUNTS))

    @staticmethod
    def combine(resources: Iterable[ExecutionResources],
                fn: Callable[[float, float], float]) -> ExecutionResources | None:
        """``resources`` folded amount by amount with ``fn`` (None when there are none)."""
        folded: ExecutionResources | None = None
        for r in resources:
            folded = r.copy() if folded is None else folded._each(r, fn)
        return folded

    @staticmethod
    def combine_sum(resources: Iterable[ExecutionResources]) -> ExecutionResources:
        """The sum of ``resources`` (zero when there are none)."""
        return ExecutionResources.combine(resources, lambda a, b: a + b) or ExecutionResources.zero()

    def satisfies_limit(self, limit: ExecutionResources, *, ignore_object_store_memory: bool = False) -> bool:
        """Whether every amount is at most ``limit``'s (``object_store_memory`` left out if asked)."""
        return all(getattr(self, n) <= getattr(limit, n) for n in _AMOUNTS
                   if not (ignore_object_store_memory and n == "object_store_memory"))

    def is_zero(self) -> bool:
        return all(getattr(self, n) == 0 for n in _AMOUNTS)

    def is_non_negative(self) -> bool:
        return all(getattr(self, n) >= 0 for n in _AMOUNTS)

    def object_store_memory_str(self) -> str:
        """``object_store_memory`` in bytes, KiB, MiB... (``'1.5KiB'``), as Ray shows it."""
        return _bytes_str(self.object_store_memory)

    def memory_str(self) -> str:
        """``memory`` in bytes, KiB, MiB... (``'3.0GiB'``)."""
        return _bytes_str(self.memory)

    def __repr__(self) -> str:
        return (f"ExecutionResources(cpu={self.cpu}, gpu={self.gpu}, object_store_memory="
                f"{self.object_store_memory_str()}, memory={self.memory_str()})")

    def copy(self, cpu: float | None = None, gpu: float | None = None, memory: float | None = None,
             object_store_memory: float | None = None) -> ExecutionResources:
        """A copy with the amounts given replaced (Ray's ``resource_limits.copy(cpu=10)``)."""
        given = {"cpu": cpu, "gpu": gpu, "object_store_memory": object_store_memory, "memory": memory}
        return ExecutionResources(**{n: getattr(self, n) if given[n] is None else given[n] for n in _AMOUNTS})


_AMOUNTS = ("cpu", "gpu", "object_store_memory", "memory")  # ExecutionResources' positional order


def _rounded(amount: float | None, digits: int) -> float | None:
    """``amount`` rounded as Ray's (Ray's scheduler counts CPUs and GPUs to 5 decimals); None and inf kept."""
    return amount if amount is None or math.isinf(amount) else round(amount, digits)


def _times_in(a: float, b: float) -> float:
    """How many whole ``b`` fit in ``a`` (``inf`` for ``b`` 0 or ``a`` unlimited), as Ray's ``floor(a / b)``."""
    return math.inf if b == 0 or math.isinf(a) else math.floor(a / b)


def _bytes_str(amount: float) -> str:
    """``amount`` bytes in B, KiB, MiB... as Ray's ``memory_string`` (``inf`` unlimited; below 1024, bytes)."""
    if amount == math.inf:
        return "inf"
    unit = 0
    while amount >= 1024 and unit < len(_UNITS) - 1:
        amount /= 1024
        unit += 1
    return f"{amount:.1f}{_UNITS[unit]}"


_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
_ZERO = ExecutionResources(0.0, 0.0, 0.0, 0.0)  # zero() and inf(): shared, as Ray's (immutable)
_INF = ExecutionResources.for_limits()


class ExecutionOptions:
    """Ray's execution options: ``ExecutionOptions(resource_limits=..., preserve_order=...)`` on its own (with
    Ray's defaults), or ``DataContext.execution_options``, a view whose ``preserve_order`` is the context's.
    Ray's cluster options are kept as set and change nothing here."""

    RAY_ONLY = ("resource_limits", "exclude_resources", "locality_with_output", "actor_locality_enabled",
                "verbose_progress", "label_selector")

    def __init__(self, resource_limits: ExecutionResources | None = None,
                 exclude_resources: ExecutionResources | None = None, preserve_order: bool = False,
                 actor_locality_enabled: bool = True, verbose_progress: bool | None = None,
                 label_selector: dict[str, str] | None = None, locality_with_output: bool | list[str] = False):
        object.__setattr__(self, "_ctx", DataContext())
        self.take(dict(resource_limits=resource_limits, exclude_resources=exclude_resources,
                       preserve_order=preserve_order, actor_locality_enabled=actor_locality_enabled,
                       verbose_progress=verbose_progress, label_selector=label_selector,
                       locality_with_output=locality_with_output))

    @classmethod
    def of(cls, ctx: DataContext) -> ExecutionOptions:
        """The options of ``ctx`` (what ``ctx.execution_options`` gives)."""
        view = cls.__new__(cls)
        object.__setattr__(view, "_ctx", ctx)
        return view

    @property
    def context(self) -> DataContext:
        """The context whose options these are."""
        return self._ctx

    def __getattr__(self, name: str) -> Any:
        if name == "preserve_order":
            return self._ctx.preserve_order
        if name in self.RAY_ONLY:  # kept in the context (another view of it reads the same)
            return self._ctx.__dict__.setdefault(f"_ray_{name}", _default(name))
        raise AttributeError(f"DataContext.execution_options.{name}: muster has preserve_order, and takes Ray's "
                             f"{', '.join(self.RAY_ONLY)} with no effect.")

    def take(self, other: Any) -> None:
        """Set these options to ``other``'s (options, or a mapping or object with Ray's attribute names)."""
        for name in ("preserve_order", *self.RAY_ONLY):
            value = other.get(name) if isinstance(other, dict) else getattr(other, name, None)
            if value is not None:
                setattr(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "preserve_order":
            self._ctx.preserve_order = bool(value)
        elif name in self.RAY_ONLY:
            if name == "resource_limits" and isinstance(value, ExecutionResources):
                value = _as_limits(value)
            self._ctx.__dict__[f"_ray_{name}"] = value
        else:
            self.__getattr__(name)  # raises, naming what there is

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in ("preserve_order", *self.RAY_ONLY))
        return f"ExecutionOptions({shown})"


def _default(name: str) -> Any:
    """Ray's default for a cluster option nobody set."""
    if name == "resource_limits":
        return ExecutionResources.for_limits()
    if name == "exclude_resources":
        return ExecutionResources.zero()
    return {"actor_locality_enabled": True, "verbose_progress": True}.get(name)


def _as_limits(resources: ExecutionResources) -> ExecutionResources:
    """``resources`` as limits, as Ray's ``resource_limits`` setter keeps them: an amount not given is
    unlimited (``ExecutionResources(cpu=8)`` limits the CPUs only)."""
    return ExecutionResources.for_limits(resources._cpu, resources._gpu, resources._object_store_memory,
                                         resources._memory)
