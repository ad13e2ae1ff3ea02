"""Per-deployment request metrics, from the replicas' ``stats()`` snapshots.

A replica whose object has a :data:`LLM_METRICS_HOOK` method (``LLMServer``)
adds its token counters, time to first token samples and engine queue to its
snapshot under ``"llm"``; :class:`LLMMetrics` folds those per deployment.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from muster.observe import prometheus

LLM_METRICS_HOOK = "__muster_llm_metrics__"  # a replica object's method: (ack) -> LLMMeter.snapshot() dict


_T = TypeVar("_T")


class Unacked(Generic[_T]):
    """Samples (latencies in ms, say) kept until their reader says it has them.

    :meth:`add` numbers each sample. :meth:`read` first forgets the samples numbered up to ``ack``
    (the number the reader's previous read gave, once it has used that read), then returns the rest
    and the number to acknowledge next. A read whose reply was lost or dropped therefore loses
    nothing: the next read returns its samples again. One thread adds and one reader reads at a time
    (a deque's two ends are thread-safe); at most ``maxlen`` samples wait, the oldest going first.
    """

    def __init__(self, maxlen: int) -> None:
        self._q: deque[tuple[int, _T]] = deque(maxlen=maxlen)
        self._n = itertools.count(1)

    def add(self, value: _T) -> None:
        self._q.append((next(self._n), value))

    def read(self, ack: int) -> tuple[list[_T], int]:
        q = self._q
        while q and q[0][0] <= ack:
            q.popleft()
        kept = list(q)
        return [v for _, v in kept], (kept[-1][0] if kept else ack)


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
    by_replica: dict[str, dict[str, Any]] = field(default_factory=dict)  # the replicas of the last round
    llm: "LLMMetrics | None" = None
    custom: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # per replica: its user metrics' series
    # per replica: (served, errors, when) of its last snapshot; counts are differences from it, so a
    # replica missing from a round (its reply late) is neither lost nor counted twice
    _seen: dict[str, tuple[int, int, float | None]] = field(default_factory=dict)

    def update(self, snapshots: dict[str, dict[str, Any]], now: float,
               live: Collection[str] | None = None) -> None:
        """Fold in one round of ``{replica id: stats()}``; ``live`` (all the deployment's replicas,
        answering or not) lets the replicas that are gone be forgotten."""
        lat: list[float] = []
        ongoing = 0
        rate = 0.0
        view: dict[str, dict[str, Any]] = {}
        for rid, s in snapshots.items():
            # a replica's first snapshot counts from when it started (or the last round, if later): a burst
            # served before the controller's first round still shows as a rate
            starts = [t for t in (self.last, now - s["up_s"] if "up_s" in s else None) if t is not None]
            served, errors, since = self._seen.get(rid, (0, 0, max(starts) if starts else None))
            new_served, new_errors = max(0, s["served"] - served), max(0, s["errors"] - errors)
            self._seen[rid] = (s["served"], s["errors"], now)
            self.served += new_served
            self.errors += new_errors
            mine_rate = round((new_served + new_errors) / (now - since), 2) if since is not None and now > since \
                else 0.0
            rate += mine_rate
            ongoing += s["ongoing"]
            lat.extend(s["latency_ms"])
            mine = sorted(s["latency_ms"])
            if s.get("custom"):
                self.custom[rid] = s["custom"]
            view[rid] = {"served": s["served"], "errors": s["errors"], "ongoing": s["ongoing"],
                         "requests_per_s": mine_rate, "p50_ms": _pct(mine, 0.5), "p99_ms": _pct(mine, 0.99)}
        if live is not None:
            for rid in set(self._seen) - set(live):
                del self._seen[rid]
            for rid in set(self.custom) - set(live):
                del self.custom[rid]
        dt = now - self.last if self.last is not None else None
        self.by_replica = view
        self.last = now
        self.ongoing = ongoing
        self.requests_per_s = round(rate, 2)
        lat.sort()
        self.p50_ms, self.p99_ms = _pct(lat, 0.5), _pct(lat, 0.99)
        llm = {rid: s["llm"] for rid, s in snapshots.items() if s.get("llm")}
        if llm or self.llm is not None:
            self.llm = self.llm or LLMMetrics()
            self.llm.update(llm, dt)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"requests_per_s": self.requests_per_s, "p50_ms": self.p50_ms, "p99_ms": self.p99_ms,
               "served": self.served, "errors": self.errors, "ongoing": self.ongoing,
               "replicas": dict(self.by_replica)}
        if self.llm is not None:
            out["llm"] = self.llm.as_dict()
        if self.custom:  # serve.metrics / muster.util.metrics series of the live replicas
            out["custom_metrics"] = prometheus.merge(self.custom.values())
        return out


@dataclass
class LLMMetrics:
    """An LLM deployment's token throughput, time to first token and engine queue.

    Token and request counts are totals since the deployment started (a replica's counts
    stay in after it is gone); ``tokens_per_s`` and the time to first token percentiles are
    over the last polling window; ``running``/``waiting`` are the engines' queues now.
    """

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens_per_s: float = 0.0
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    ttft_samples: int = 0
    running: int = 0
    waiting: int = 0
    by_replica: dict[str, dict[str, Any]] = field(default_factory=dict)
    _counted: dict[str, dict[str, int]] = field(default_factory=dict)  # replica id -> counts folded in so far

    def update(self, snapshots: dict[str, dict[str, Any]], dt: float | None) -> None:
        """Fold in one round of ``{replica id: stats()["llm"]}`` taken ``dt`` seconds after the previous one."""
        window_tokens, ttft, running, waiting = 0, [], 0, 0
        for rid, s in snapshots.items():
            prev = self._counted.get(rid, {})
            deltas = {k: max(0, s[k] - prev.get(k, 0)) for k in ("requests", "prompt_tokens", "completion_tokens")}
            self.requests += deltas["requests"]
            self.prompt_tokens += deltas["prompt_tokens"]
            self.completion_tokens += deltas["completion_tokens"]
            window_tokens += deltas["completion_tokens"]
            ttft.extend(s["ttft_ms"])
            running, waiting = running + s["running"], waiting + s["waiting"]
            self._counted[rid] = {k: s[k] for k in deltas}
            mine = sorted(s["ttft_ms"])
            self.by_replica[rid] = {
                "requests": s["requests"], "prompt_tokens": s["prompt_tokens"],
                "completion_tokens": s["completion_tokens"], "running": s["running"], "waiting": s["waiting"],
                "tokens_per_s": round(deltas["completion_tokens"] / dt, 2) if dt else 0.0,
                "ttft_p50_ms": _pct(mine, 0.5), "ttft_p99_ms": _pct(mine, 0.99), "ttft_samples": len(mine),
            }
        for rid in list(self.by_replica):
            if rid not in snapshots:  # gone, or late this round (its counts stay in _counted either way)
                del self.by_replica[rid]
        ttft.sort()
        self.tokens_per_s = round(window_tokens / dt, 2) if dt else 0.0
        self.ttft_p50_ms, self.ttft_p99_ms, self.ttft_samples = _pct(ttft, 0.5), _pct(ttft, 0.99), len(ttft)
        self.running, self.waiting = running, waiting

    def as_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "tokens_per_s": self.tokens_per_s,
                "ttft_p50_ms": self.ttft_p50_ms, "ttft_p99_ms": self.ttft_p99_ms, "ttft_samples": self.ttft_samples,
                "running": self.running, "waiting": self.waiting, "queue_depth": self.running + self.waiting,
                "replicas": dict(self.by_replica)}
