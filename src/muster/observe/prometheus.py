"""User metrics (``muster.util.metrics`` / ``serve.metrics``) across processes, and their Prometheus text.

A series is a dict as :meth:`muster.util.metrics._Registry.snapshot` gives it. :func:`merge` (from
:mod:`muster.core.user_metrics`) folds the snapshots of several processes (a deployment's replicas, an
engine's workers) into one list: series with the same name and tags add up (counters, histograms) or
keep the value set last (gauges). :func:`render` writes them in
Prometheus' text exposition format, named as Ray's metrics endpoint names them (``ray_`` before the
name, ``_total`` after a counter's).
"""

from __future__ import annotations

import math
from typing import Any

from muster.core.user_metrics import merge

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
__all__ = ["CONTENT_TYPE", "merge", "render"]


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
        desc = next((s["description"] for s in group if s.get("description")), "")  # one process may omit it
        desc = desc.replace("\\", "\\\\").replace("\n", "\\n")
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
