"""Options of ``@muster.remote`` / ``.options(...)``: validated once, turned into resources."""

from __future__ import annotations

from typing import Any

from muster.core import resources as res

TASK_OPTIONS = {"num_cpus", "num_gpus", "resources", "max_retries", "retry_exceptions", "name", "memory"}
ACTOR_OPTIONS = {"num_cpus", "num_gpus", "resources", "max_restarts", "max_task_retries", "name", "memory"}


def validate(options: dict[str, Any], allowed: set[str], what: str) -> dict[str, Any]:
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise TypeError(
            f"{what}: unknown option(s) {', '.join(unknown)}. Supported: {', '.join(sorted(allowed))}."
        )
    for key in ("num_cpus", "num_gpus"):
        v = options.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0):
            raise ValueError(f"{what}: {key}={v!r}; use a number >= 0.")
    for key in ("max_retries", "max_restarts", "max_task_retries"):
        v = options.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < -1):
            raise ValueError(f"{what}: {key}={v!r}; use an integer >= 0, or -1 for unlimited.")
    if options.get("resources") is not None:
        custom = options["resources"]
        if not isinstance(custom, dict) or "CPU" in custom or "GPU" in custom:
            raise ValueError(
                f"{what}: resources={custom!r}; pass a dict of custom resources, and CPU/GPU as num_cpus=/num_gpus=."
            )
        res.normalize(custom, what=f"{what} resources")
    return dict(options)


def to_resources(options: dict[str, Any], default_cpus: float) -> dict[str, float]:
    out: dict[str, float] = {"CPU": float(options.get("num_cpus", default_cpus) or 0.0)}
    if options.get("num_gpus"):
        out["GPU"] = float(options["num_gpus"])
    out.update(options.get("resources") or {})
    return res.normalize(out)
