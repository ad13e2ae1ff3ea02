"""User metrics (``muster.util.metrics`` / ``serve.metrics``) across processes, and their Prometheus text.

A series is a dict as :meth:`muster.util.metrics._Registry.snapshot` gives it. :func:`merge` folds the
snapshots of several processes (a deployment's replicas) into one list: series with the same name and
tags add up (counters, histograms) or keep the value set last (gauges). :func:`render` writes them in
Prometheus' text exposition format, named as Ray's metrics endpoint names them (``ray_`` before the
name, ``_total`` after a counter's).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _key(s: dict[str, Any]) -> tuple:
    return s["name"], tuple(sorted(s["tags"].items()))


def merge(snapshots: Iterable[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One list of series from several processes' snapshots (each cumulative)."""
    out: dict[tuple, dict[str, Any]] = {}
    for snap in snapshots:
        for s in snap:
            have = out.get(_key(s))
            if have is None:
                out[_key(s)] = {**s, "tags": dict(s["tags"]), **({"buckets": list(s["buckets"])}
                                                                  if s["kind"] == "histogram" else {})}
            elif s["kind"] == "counter":
                have["value"] += s["value"]
            elif s["kind"] == "gauge":
                if s.get("time", 0) >= have.get("time", 0):
                    have["value"], have["time"] = s["value"], s.get("time", 0)
            elif len(s["buckets"]) == len(have["buckets"]):  # histograms (of the same boundaries)
                have["buckets"] = [a + b for a, b in zip(have["buckets"], s["buckets"])]
                have["sum"] += s["sum"]
                have["count"] += s["count"]
    return list(out.values())


def _labels(tags: dict[str, str], extra: tuple[tuple[str, str], ...] = ()) -> str:
    items = [*sorted(tags.items()), *extra]
    if not items:
        return ""
    esc = (lambda v: v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n"))
    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in items) + "}"


def _num(v: float) -> str:
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v)) if not float(v).is_integer() else str(int(v))


def render(series: list[dict[str, Any]]) -> str:
    """Prometheus' text format for ``series`` (grouped by metric, one ``# HELP``/``# TYPE`` each)."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    for s in series:
        by_name.setdefault(s["name"], []).append(s)
    lines: list[str] = []
    for name in sorted(by_name):
        group = by_name[name]
        kind = group[0]["kind"]
        full = f"ray_{name}"
        if kind == "counter" and not full.endswith("_total"):
            full += "_total"
        desc = (group[0].get("description") or "").replace("\\", "\\\\").replace("\n", "\\n")
        lines += [f"# HELP {full} {desc}", f"# TYPE {full} {kind}"]
        for s in group:
            if kind != "histogram":
                lines.append(f"{full}{_labels(s['tags'])} {_num(s['value'])}")
                continue
            running = 0
            for bound, c in zip([*s["boundaries"], math.inf], s["buckets"]):
                running += c
                lines.append(f"{full}_bucket{_labels(s['tags'], (('le', _num(bound)),))} {running}")
            lines.append(f"{full}_sum{_labels(s['tags'])} {_num(s['sum'])}")
            lines.append(f"{full}_count{_labels(s['tags'])} {s['count']}")
    return "\n".join(lines) + ("\n" if lines else "")
