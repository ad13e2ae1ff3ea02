"""Helpers shared by the side-by-side benchmarks: one run per fresh process, interleaved, medians.

Every measured run happens in a fresh interpreter (``run_child``), so each one
pays its own engine start and none inherits another's warm state.  Runs of
different frameworks or modes are interleaved (``interleaved``): each repeat
rotates the order, so a burst of load from other processes on this shared
machine falls on all of them alike.  Figures are reported as the median with
the spread (min-max) of the repeats (``summary``).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from typing import Any, Iterator, Sequence


def run_child(script: str, args: Sequence[str], timeout_s: float = 1800) -> dict[str, Any]:
    """Run ``python script --one *args`` and return the JSON object it prints last."""
    out = subprocess.run([sys.executable, script, "--one", *args], capture_output=True, text=True, timeout=timeout_s)
    for line in reversed(out.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"benchmark run {args} failed (exit {out.returncode}):\n{out.stdout[-3000:]}\n"
                       f"{out.stderr[-3000:]}")


def interleaved(variants: Sequence[Any], repeat: int) -> Iterator[tuple[int, Any]]:
    """``(repeat index, variant)`` for every run: each repeat rotates the order, so none always goes first."""
    n = len(variants)
    for rep in range(repeat):
        k = rep % n if n else 0
        for v in list(variants[k:]) + list(variants[:k]):
            yield rep, v


def summary(values: Sequence[float]) -> dict[str, Any]:
    """Median, min, max and the values themselves."""
    vals = [v for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0, "values": []}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals), "values": vals}


def fmt(s: dict[str, Any], unit: str = "s", digits: int = 2) -> str:
    """``1.23 s (1.10-1.40, n=3)``."""
    if s["median"] is None:
        return "-"
    f = f"{{:.{digits}f}}"
    return f"{f.format(s['median'])} {unit} ({f.format(s['min'])}-{f.format(s['max'])}, n={s['n']})"
