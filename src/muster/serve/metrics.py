"""Ray Serve's ``serve.metrics``: ``muster.util.metrics``' Counter, Gauge and Histogram that, created in a
replica, carry the ``deployment``, ``replica`` and ``application`` tags (Ray's default tags) on every series.

Outside a replica they are the plain ``muster.util.metrics`` ones. A tag key named ``route`` is filled with
the HTTP request's route prefix when a record does not set it, as in Ray. The controller gathers every
replica's series and exports them (``serve.status()``, the run store, the dashboard's ``/metrics``).
"""

from __future__ import annotations

from typing import Any, Optional

from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.serve import context
from muster.util import metrics

DEPLOYMENT_TAG, REPLICA_TAG, APPLICATION_TAG, ROUTE_TAG = "deployment", "replica", "application", "route"
_RESERVED = (DEPLOYMENT_TAG, REPLICA_TAG, APPLICATION_TAG)


def _serve_tag_keys(name: str, tag_keys: Optional[tuple[str, ...]]) -> Optional[tuple[str, ...]]:
    if tag_keys and not isinstance(tag_keys, tuple):
        raise InvalidTypeError(f"Metric {name!r}: tag_keys must be a tuple of str, got {type(tag_keys).__name__} "
                               f"{tag_keys!r}; pass e.g. tag_keys=('model',).")
    ctx = context._current
    if ctx is None:
        return tag_keys
    _refuse_reserved(name, tag_keys or (), "tag_keys")
    return (DEPLOYMENT_TAG, REPLICA_TAG) + ((APPLICATION_TAG,) if ctx.app_name else ()) + (tag_keys or ())


def _refuse_reserved(name: str, keys: Any, what: str) -> None:
    for key in _RESERVED:
        if key in keys:
            raise InvalidArgumentError(f"Metric {name!r}: the {key!r} tag in {what} is reserved for Ray Serve's "
                                       "own tags (set on every series of a replica); rename your tag.")


def _with_serve_tags(name: str, default_tags: dict[str, str]) -> dict[str, str]:
    ctx = context._current
    if ctx is None:
        return default_tags
    _refuse_reserved(name, default_tags, "set_default_tags()")
    tags = {**default_tags, DEPLOYMENT_TAG: ctx.deployment, REPLICA_TAG: ctx.replica_tag}
    if ctx.app_name:
        tags[APPLICATION_TAG] = ctx.app_name
    return tags


def _with_route(tag_keys: tuple[str, ...], tags: Optional[dict[str, str]]) -> Optional[dict[str, str]]:
    if ROUTE_TAG not in tag_keys or (tags and ROUTE_TAG in tags):
        return tags
    return {**(tags or {}), ROUTE_TAG: context.current_route()}


class _ServeTagged(metrics.Metric):
    """The replica's tags as default tags (a mixin before the ``muster.util.metrics`` class)."""

    def set_default_tags(self, default_tags: dict[str, str]) -> "_ServeTagged":
        super().set_default_tags(_with_serve_tags(self._name, default_tags))
        return self


class Counter(_ServeTagged, metrics.Counter):
    """Ray Serve's counter: :class:`muster.util.metrics.Counter` with the replica's tags."""

    def __init__(self, name: str, description: str = "", tag_keys: Optional[tuple[str, ...]] = None):
        super().__init__(name, description, _serve_tag_keys(name, tag_keys))
        self.set_default_tags({})

    def inc(self, value: metrics.Number = 1.0, tags: Optional[dict[str, str]] = None) -> None:
        super().inc(value, _with_route(self._tag_keys, tags))


class Gauge(_ServeTagged, metrics.Gauge):
    """Ray Serve's gauge: :class:`muster.util.metrics.Gauge` with the replica's tags."""

    def __init__(self, name: str, description: str = "", tag_keys: Optional[tuple[str, ...]] = None):
        super().__init__(name, description, _serve_tag_keys(name, tag_keys))
        self.set_default_tags({})

    def set(self, value: Optional[metrics.Number], tags: Optional[dict[str, str]] = None) -> None:
        super().set(value, _with_route(self._tag_keys, tags))


class Histogram(_ServeTagged, metrics.Histogram):
    """Ray Serve's histogram: :class:`muster.util.metrics.Histogram` with the replica's tags."""

    def __init__(self, name: str, description: str = "", boundaries: Optional[list[float]] = None,
                 tag_keys: Optional[tuple[str, ...]] = None):
        super().__init__(name, description, boundaries, _serve_tag_keys(name, tag_keys))
        self.set_default_tags({})

    def observe(self, value: metrics.Number, tags: Optional[dict[str, str]] = None) -> None:
        super().observe(value, _with_route(self._tag_keys, tags))


__all__ = ["Counter", "Gauge", "Histogram"]
