"""Ray's ``ExecutionOptions`` and ``ExecutionResources`` (``from ray.data import ExecutionOptions``).

On one machine a pipeline runs in its consumer's threads, so of these options only ``preserve_order``
acts; the cluster ones (``resource_limits``, ``exclude_resources``, ``locality_with_output``,
``label_selector``...) are kept as set, so Ray's scripts that tune them run unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Callable, Iterable

from muster.data.context import DataContext


@dataclass
class ExecutionResources:
    """Ray's resource amounts (``cpu``, ``gpu``, ``object_store_memory``, ``memory``; unset is 0) or limits
    (``for_limits()``: unset is unlimited). Kept for Ray's scripts; no effect on muster's pipelines."""

    cpu: float = 0.0
    gpu: float = 0.0
    object_store_memory: float = 0.0
    memory: float = 0.0

    def __init__(self, cpu: float | None = None, gpu: float | None = None, object_store_memory: float | None = None,
                 memory: float | None = None):
        self.cpu, self.gpu = cpu or 0.0, gpu or 0.0
        self.object_store_memory, self.memory = object_store_memory or 0.0, memory or 0.0

    @classmethod
    def for_limits(cls, cpu: float | None = None, gpu: float | None = None, object_store_memory: float | None = None,
                   memory: float | None = None) -> ExecutionResources:
        """Limits: each amount not given is unlimited (``inf``)."""
        given = {"cpu": cpu, "gpu": gpu, "object_store_memory": object_store_memory, "memory": memory}
        return cls(**{k: math.inf if v is None else v for k, v in given.items()})

    @classmethod
    def zero(cls) -> ExecutionResources:
        return cls()

    @classmethod
    def inf(cls) -> ExecutionResources:
        return cls.for_limits()

    @classmethod
    def from_resource_dict(cls, resources: dict[str, float]) -> ExecutionResources:
        """From Ray's resource names (``CPU``/``num_cpus``, ``GPU``/``num_gpus``, ``object_store_memory``,
        ``memory``)."""
        return cls(resources.get("CPU") or resources.get("num_cpus"), resources.get("GPU") or resources.get("num_gpus"),
                   resources.get("object_store_memory"), resources.get("memory"))

    def to_resource_dict(self) -> dict[str, float]:
        return {"CPU": self.cpu, "GPU": self.gpu, "object_store_memory": self.object_store_memory,
                "memory": self.memory}

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
        """Each amount times ``f`` (an unlimited amount scaled by 0 is 0)."""
        return ExecutionResources(*(0.0 if f == 0 else getattr(self, n) * f for n in _AMOUNTS))

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
        return ExecutionResources(**{f.name: getattr(self, f.name) if given[f.name] is None else given[f.name]
                                     for f in fields(self)})


_AMOUNTS = ("cpu", "gpu", "object_store_memory", "memory")  # ExecutionResources' positional order


def _times_in(a: float, b: float) -> float:
    """How many whole ``b`` fit in ``a`` (``inf`` for ``b`` 0 or ``a`` unlimited)."""
    return math.inf if b == 0 or math.isinf(a) else int(a // b)


def _bytes_str(amount: float) -> str:
    if math.isinf(amount) or math.isnan(amount):
        return str(amount)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(amount) < 1024 or unit == "PiB":
            return f"{amount:.1f}{unit}"
        amount /= 1024
    raise AssertionError("unreachable")


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
        if name in self.RAY_ONLY:  # kept in the context: resource_limits.cpu = 8 changes the context's
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
