"""Ray's ``ray.util.metrics`` on muster: user-defined ``Counter``, ``Gauge`` and ``Histogram``.

A metric records into its process's registry (:data:`REGISTRY`); the values are cumulative
(a counter's total, a gauge's last value, a histogram's bucket counts, sum and count), so a
reader that misses a snapshot loses nothing. Inside a Serve replica the controller reads the
registry with each round of the replica's ``stats()`` and exports the series (see
docs/serve.md "Custom metrics"). In other tasks and actors (of the local engine or a Ray
cluster), and in the driver, the series a process changed go to the driver's ``Runtime.user_metrics`` every
``MUSTER_METRICS_REPORT_INTERVAL_MS`` (and a task's when it ends, an actor's when it exits on
purpose), never one message per record; the driver merges them across processes
(:mod:`muster.core.user_metrics`) and the run store and the dashboard's ``/metrics`` show them.

Validation follows Ray's: an empty name is refused and a name Prometheus cannot take is
discarded with a warning; ``tag_keys`` must be a tuple of str; default tags and recorded tags
must name declared keys and have str values, and every declared key needs a value when a
value is recorded; a counter only goes up.
"""

from __future__ import annotations

import bisect
import os
import re
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from muster.core import api, context, settings
from muster.exceptions import InvalidArgumentError, InvalidTypeError

_NAME_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
Number = Union[int, float]
TagSet = tuple[tuple[str, str], ...]  # a series' tags, sorted by key


@dataclass
class _Family:
    """One metric name in the registry: its kind and declaration, and its series by tag set."""

    kind: str  # "counter", "gauge" or "histogram"
    description: str
    tag_keys: tuple[str, ...]
    boundaries: tuple[float, ...] = ()
    series: dict[TagSet, list[float]] = field(default_factory=dict)


class _Registry:
    """The metrics this process recorded. Thread-safe (a replica's sync methods run on a pool)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._families: dict[str, _Family] = {}
        self._changed: set[tuple[str, TagSet]] = set()  # series recorded since the last changes()

    def _forked(self) -> None:
        """In a child forked from the process that recorded (a worker from the zygote, say): start from zero,
        as the values are the parent's, and with a new lock (another thread may have held the old one at the
        fork). The declarations are kept."""
        self._lock = threading.Lock()
        self._changed = set()
        for fam in self._families.values():
            fam.series.clear()

    def declare(self, name: str, kind: str, description: str, tag_keys: tuple[str, ...],
                boundaries: tuple[float, ...] = ()) -> None:
        with self._lock:
            have = self._families.get(name)
            if have is None:
                self._families[name] = _Family(kind, description, tag_keys, boundaries)
            elif have.kind != kind:
                raise InvalidArgumentError(
                    f"Metric {name!r} is already a {have.kind} in this process; it cannot also be a {kind}. "
                    "Give the new metric another name.")
            else:
                have.description, have.tag_keys, have.boundaries = description, tag_keys, boundaries

    def record(self, name: str, tags: TagSet, value: float) -> None:
        with self._lock:
            fam = self._families[name]
            self._changed.add((name, tags))
            cur = fam.series.get(tags)
            if fam.kind == "counter":
                fam.series[tags] = [(cur[0] if cur else 0.0) + value]
            elif fam.kind == "gauge":
                fam.series[tags] = [value, time.time()]
            else:  # histogram: one count per bucket (the last is +Inf), then sum and count
                if cur is None:
                    cur = fam.series[tags] = [0.0] * (len(fam.boundaries) + 3)
                cur[bisect.bisect_left(fam.boundaries, value)] += 1
                cur[-2] += value
                cur[-1] += 1

    def snapshot(self) -> list[dict[str, Any]]:
        """Every series recorded so far, cumulative: ``{"name", "kind", "description", "tags", ...}`` with
        ``"value"`` (counter, gauge; a gauge also ``"time"``) or ``"boundaries"``, ``"buckets"`` (counts per
        bucket, not cumulative, the last one past the last boundary), ``"sum"`` and ``"count"``."""
        with self._lock:
            return [_series(name, fam, tags, v) for name, fam in self._families.items()
                    for tags, v in fam.series.items()]

    def changes(self) -> list[dict[str, Any]]:
        """The series recorded since the last call (as :meth:`snapshot` gives them, cumulative)."""
        with self._lock:
            changed, self._changed = self._changed, set()
            return [_series(name, self._families[name], tags, self._families[name].series[tags])
                    for name, tags in changed
                    if name in self._families and tags in self._families[name].series]

    def clear(self) -> None:
        with self._lock:
            self._families.clear()
            self._changed.clear()


def _series(name: str, fam: _Family, tags: TagSet, v: list[float]) -> dict[str, Any]:
    s: dict[str, Any] = {"name": name, "kind": fam.kind, "description": fam.description, "tags": dict(tags)}
    if fam.kind == "histogram":
        s.update(boundaries=list(fam.boundaries), buckets=[int(c) for c in v[:-2]], sum=v[-2], count=int(v[-1]))
    else:
        s["value"] = v[0]
        if fam.kind == "gauge":
            s["time"] = v[1]
    return s


REGISTRY = _Registry()
os.register_at_fork(after_in_child=REGISTRY._forked)


class _Exporter:
    """Sends this process's changed series where its engine collects them: a worker's to its driver
    (``context.send_metrics``), the driver's into its own engine's table. It starts at the first record
    (a process that records nothing pays nothing), then sends every report interval from a daemon
    thread; the engine also takes them with each task's result and before an exit on purpose
    (``context.take_metrics``). Batches are numbered: the driver keeps the newest of each series."""

    def __init__(self) -> None:
        self.started = False
        self.off = False  # a Serve replica: its controller exports its metrics (Replica.stats())
        self._lock = threading.Lock()
        self._seq = 0
        self._runtime: Any = None  # the driver's engine the last changes went to

    def _forked(self) -> None:
        self.started, self._lock, self._seq = False, threading.Lock(), 0

    def start(self) -> None:
        with self._lock:
            if self.started:
                return
            self.started = True
        if self.off or (context.in_worker() and not context.collects_metrics()):
            return  # values stay in this process
        if context.in_worker():
            context.set_metrics_source(self.take)
        threading.Thread(target=self._run, args=(settings.metrics_report_interval_s(),), name="muster-metrics",
                         daemon=True).start()

    def take(self) -> context.MetricsBatch | None:
        """The series changed since the last take, numbered (None: none changed, or Serve exports them)."""
        if self.off:
            return None
        with self._lock:
            changed = REGISTRY.changes()
            if not changed:
                return None
            self._seq += 1
            return self._seq, changed

    def _run(self, interval_s: float) -> None:
        while True:
            time.sleep(interval_s)
            try:
                if context.in_worker():
                    context.flush()
                else:
                    self._to_own_engine()
            except Exception as exc:  # noqa: BLE001 - the next round tries again; the process goes on
                print(f"muster: sending user metrics failed: {exc!r}", file=sys.stderr)

    def _to_own_engine(self) -> None:
        runtime = api.running()  # (get_runtime() would start one after a shutdown)
        if runtime is None:
            return  # kept as changed until muster.init()
        self.to_engine(runtime)

    def last_round(self, runtime: Any) -> None:
        """``muster.shutdown()`` begins: the driver's changes since the last round go to ``runtime`` now
        (a driver shorter than one report interval would otherwise leave none)."""
        if self.started and not self.off and not context.in_worker():
            self.to_engine(runtime)

    def to_engine(self, runtime: Any) -> None:
        batch = self.take()
        if runtime is not self._runtime:  # a new engine (muster.init() again): it gets every series
            self._runtime, batch = runtime, (self._seq, REGISTRY.snapshot())
        if batch is not None:
            runtime.user_metrics.update("driver", *batch)


_EXPORTER = _Exporter()
os.register_at_fork(after_in_child=_EXPORTER._forked)
api.on_shutdown(_EXPORTER.last_round)


def _exported_by_serve() -> None:
    """This process is a Serve replica: its controller reads :data:`REGISTRY` and exports it, so it is not
    shipped a second way."""
    _EXPORTER.off = True


_warned_keys: set[tuple[str, str]] = set()  # (metric, tag key) pairs recorded with a key not declared


def _check_tag_values(tags: dict[str, str], tag_keys: tuple[str, ...], name: str, what: str) -> None:
    for key, val in tags.items():
        if key not in tag_keys:
            raise InvalidArgumentError(
                f"Metric {name!r}: unrecognized tag key {key!r} in {what}; its tag_keys are {tag_keys}. "
                "Declare the key in tag_keys=(...) when creating the metric.")
        if not isinstance(val, str):
            raise InvalidTypeError(
                f"Metric {name!r}: tag values must be str, got {type(val).__name__} {val!r} for {key!r}; "
                "pass str(value).")


class Metric:
    """What Ray's ``Counter``, ``Gauge`` and ``Histogram`` share: ``name``, ``description``,
    ``tag_keys``, :meth:`set_default_tags` and :attr:`info`."""

    _kind = "metric"

    def __init__(self, name: str, description: str = "", tag_keys: Optional[tuple[str, ...]] = None):
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"A metric name must be a non-empty str, got {name!r}: name the metric.")
        self._discard_metric = not _NAME_RE.match(name)
        if self._discard_metric:
            warnings.warn(
                f"Invalid metric name {name!r}: the metric is discarded (nothing it records is kept or exported). "
                "Metric names may hold only letters, digits, '_' and ':', and may not start with a digit.",
                UserWarning, stacklevel=3)
        elif ":" in name:
            warnings.warn(f"Metric name {name!r} contains ':', which Ray no longer allows; use '_' instead.",
                          FutureWarning, stacklevel=3)
        keys = () if tag_keys is None else tag_keys
        if not isinstance(keys, tuple):
            raise InvalidTypeError(f"Metric {name!r}: tag_keys must be a tuple of str, got {type(keys).__name__} "
                                   f"{keys!r}; pass e.g. tag_keys=('model',).")
        for key in keys:
            if not isinstance(key, str):
                raise InvalidTypeError(f"Metric {name!r}: tag keys must be str, got {type(key).__name__} {key!r}.")
        self._name, self._description, self._tag_keys = name, description, keys
        self._default_tags: dict[str, str] = {}
        if self._kind != "histogram":  # a histogram declares itself once its boundaries are checked
            self._declare()

    def __reduce__(self) -> tuple:
        return self.__class__, (self._name, self._description, self._tag_keys)

    def _declare(self, boundaries: tuple[float, ...] = ()) -> None:
        if not self._discard_metric:
            REGISTRY.declare(self._name, self._kind, self._description, self._tag_keys, boundaries)

    def set_default_tags(self, default_tags: dict[str, str]) -> "Metric":
        """Tags used by every record that does not set them itself. Returns the metric itself.

        Raises:
            InvalidArgumentError: a key not in ``tag_keys``.
            InvalidTypeError: a value that is not a str.
        """
        _check_tag_values(default_tags, self._tag_keys, self._name, "set_default_tags()")
        self._default_tags = dict(default_tags)
        return self

    def _record(self, value: Number, tags: Optional[dict[str, str]]) -> None:
        if self._discard_metric:
            return
        if tags:
            tags = self._declared_only(tags)
            _check_tag_values(tags, self._tag_keys, self._name, "the recorded tags")
        final = {**self._default_tags, **(tags or {})}
        missing = [k for k in self._tag_keys if k not in final]
        if missing:
            raise InvalidArgumentError(
                f"Metric {self._name!r}: missing value for tag key(s) {','.join(missing)}; pass tags={{...}} "
                "or set_default_tags({...}).")
        REGISTRY.record(self._name, tuple(sorted(final.items())), float(value))
        if not _EXPORTER.started:
            _EXPORTER.start()

    def _declared_only(self, tags: dict[str, str]) -> dict[str, str]:
        """``tags`` without the keys ``tag_keys`` does not declare. Ray records a point with such a key
        (its ``set_default_tags`` refuses one): here it is dropped from the series, with a warning once
        per key, so a ported script runs and a misspelt key is still seen."""
        extra = [k for k in tags if k not in self._tag_keys]
        if not extra:
            return tags
        for key in extra:
            if (self._name, key) not in _warned_keys:
                _warned_keys.add((self._name, key))
                warnings.warn(f"Metric {self._name!r}: tag key {key!r} is not in its tag_keys {self._tag_keys}, so "
                              "it is left out of the recorded series. Declare it in tag_keys=(...) to keep it.",
                              UserWarning, stacklevel=4)
        return {k: v for k, v in tags.items() if k in self._tag_keys}

    @property
    def info(self) -> dict[str, Any]:
        """``name``, ``description``, ``tag_keys`` and ``default_tags``, as Ray's."""
        return {"name": self._name, "description": self._description, "tag_keys": self._tag_keys,
                "default_tags": self._default_tags}


def _number(value: Any, name: str) -> Number:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidTypeError(f"Metric {name!r}: value must be int or float, got {type(value).__name__} {value!r}.")
    return value


class Counter(Metric):
    """A cumulative value that only goes up (Prometheus' counter)."""

    _kind = "counter"

    def inc(self, value: Number = 1.0, tags: Optional[dict[str, str]] = None) -> None:
        """Add ``value`` (> 0, default 1) to the series of ``tags`` (merged over the default tags).

        Raises:
            InvalidArgumentError: ``value`` is 0 or negative, or a tag is unknown or missing.
            InvalidTypeError: ``value`` is not a number, or a tag value is not a str.
        """
        if _number(value, self._name) <= 0:
            raise InvalidArgumentError(f"Metric {self._name!r}: a counter's increment must be > 0, got {value}; "
                                       "use a Gauge for a value that goes down.")
        self._record(value, tags)


class Gauge(Metric):
    """The last value set (Prometheus' gauge)."""

    _kind = "gauge"

    def set(self, value: Optional[Number], tags: Optional[dict[str, str]] = None) -> None:
        """Set the series of ``tags`` to ``value`` (``None`` does nothing, as in Ray)."""
        if value is None:
            return
        self._record(_number(value, self._name), tags)


class Histogram(Metric):
    """Counts of observed values per bucket, with their sum and count (Prometheus' histogram)."""

    _kind = "histogram"

    def __init__(self, name: str, description: str = "", boundaries: Optional[list[float]] = None,
                 tag_keys: Optional[tuple[str, ...]] = None):
        super().__init__(name, description, tag_keys)
        if not boundaries:
            raise InvalidArgumentError(f"Histogram {name!r} needs boundaries, the buckets' upper bounds: e.g. "
                                       f"Histogram({name!r}, boundaries=[1.0, 2.0]).")
        for i, b in enumerate(boundaries):
            if isinstance(b, bool) or not isinstance(b, (int, float)) or b <= 0:
                raise InvalidArgumentError(f"Histogram {name!r}: boundaries[{i}] = {b!r} in {list(boundaries)}; "
                                           "use positive numbers.")
        self.boundaries = list(boundaries)
        self._declare(tuple(sorted(float(b) for b in boundaries)))

    def __reduce__(self) -> tuple:
        return self.__class__, (self._name, self._description, self.boundaries, self._tag_keys)

    def observe(self, value: Number, tags: Optional[dict[str, str]] = None) -> None:
        """Count ``value`` in its bucket of the series of ``tags``."""
        self._record(_number(value, self._name), tags)

    @property
    def info(self) -> dict[str, Any]:
        return {**super().info, "boundaries": self.boundaries}


__all__ = ["Counter", "Gauge", "Histogram"]
