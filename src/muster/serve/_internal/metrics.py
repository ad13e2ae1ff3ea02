"""Per-deployment request metrics, from the replicas' ``stats()`` snapshots."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _pct(sorted_vals: list[float], q: float) -> float | None:
    if not sorted_vals:
        return None
    i = min(len(sorted_vals) - 1, max(0, round(q * (len(sorted_vals) - 1))))
    return round(sorted_vals[i], 3)


@dataclass
class DeploymentMetrics:
    """Rates over the last polling window; counts since the deployment started."""

    served: int = 0
    errors: int = 0
    ongoing: int = 0
    requests_per_s: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
    last: float | None = None
    by_replica: dict[str, dict[str, Any]] = field(default_factory=dict)

    def update(self, snapshots: dict[str, dict[str, Any]], now: float) -> None:
        """Fold in one round of ``{replica id: stats()}``."""
        window_served = 0
        lat: list[float] = []
        ongoing = 0
        dt = now - self.last if self.last is not None else None
        for rid, s in snapshots.items():
            prev = self.by_replica.get(rid, {"served": 0, "errors": 0})
            done = max(0, s["served"] - prev["served"]) + max(0, s["errors"] - prev["errors"])
            window_served += done
            self.served += max(0, s["served"] - prev["served"])
            self.errors += max(0, s["errors"] - prev["errors"])
            ongoing += s["ongoing"]
            lat.extend(s["latency_ms"])
            mine = sorted(s["latency_ms"])
            self.by_replica[rid] = {"served": s["served"], "errors": s["errors"], "ongoing": s["ongoing"],
                                    "requests_per_s": round(done / dt, 2) if dt else 0.0,
                                    "p50_ms": _pct(mine, 0.5), "p99_ms": _pct(mine, 0.99)}
        for rid in list(self.by_replica):
            if rid not in snapshots:
                del self.by_replica[rid]
        self.last = now
        self.ongoing = ongoing
        self.requests_per_s = round(window_served / dt, 2) if dt else 0.0
        lat.sort()
        self.p50_ms, self.p99_ms = _pct(lat, 0.5), _pct(lat, 0.99)

    def as_dict(self) -> dict[str, Any]:
        return {"requests_per_s": self.requests_per_s, "p50_ms": self.p50_ms, "p99_ms": self.p99_ms,
                "served": self.served, "errors": self.errors, "ongoing": self.ongoing,
                "replicas": dict(self.by_replica)}
