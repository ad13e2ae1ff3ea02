"""``map_batches`` with a callable class: threads vs an actor pool; and the live view's cost.

Scenarios (each repeat runs every contender once, in turn; medians with [min-max]):

1. ``pool``: a class whose ``__call__`` runs pure Python per row (holds the GIL),
   over ``--rows`` rows: on the consumer's threads (no ``concurrency=``) vs on
   ``concurrency=2`` actors (processes) -- rows/s and the ratio pool / threads.
2. ``live``: a cheap numpy ``map_batches`` pass with the live view's terminal
   publisher on vs off (``DataContext.enable_progress_bars``), rows/s and the ratio.

Run::

    python benchmarks/data_pool_bench.py                 # ~1-2 min on 2 loaded cores
    python benchmarks/data_pool_bench.py --repeats 7 --rows 40000
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import muster
import muster.data as md


class PyWork:
    """Pure-Python work per row: threads cannot run it in parallel (GIL); processes can."""

    def __init__(self, loops: int):
        self.loops = loops

    def __call__(self, batch):
        out = []
        for v in batch["id"].tolist():
            acc = 0
            for i in range(self.loops):
                acc += (v * i) % 7
            out.append(acc)
        return {"id": batch["id"], "w": out}


def rows_per_s(run: Callable[[], int]) -> float:
    t = time.perf_counter()
    n = run()
    return n / (time.perf_counter() - t)


def fmt(xs: list[float]) -> str:
    return f"{statistics.median(xs):>12,.0f} [{min(xs):,.0f}-{max(xs):,.0f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--loops", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    muster.init(num_cpus=2, ignore_reinit_error=True)
    ctx = md.DataContext.get_current()
    ctx.progress_every_s = 0.5

    def threads() -> int:
        return md.range(args.rows, override_num_blocks=20).map_batches(PyWork, fn_constructor_args=(args.loops,)).count()

    def pool() -> int:
        return md.range(args.rows, override_num_blocks=20).map_batches(
            PyWork, fn_constructor_args=(args.loops,), concurrency=2).count()

    def cheap(view: bool) -> Callable[[], int]:
        def run() -> int:
            ctx.enable_progress_bars = view
            return md.range(args.rows * 50, override_num_blocks=200).map_batches(lambda b: {"y": b["id"] * 2}).count()
        return run

    results: dict[str, list[float]] = {"threads": [], "pool": [], "live off": [], "live on": []}
    runs = {"threads": threads, "pool": pool, "live off": cheap(False), "live on": cheap(True)}
    for _ in range(args.repeats):
        for name, run in runs.items():
            results[name].append(rows_per_s(run))
    print(f"\n{'contender':<10} {'rows/s median [min-max]':>40}")
    for name, xs in results.items():
        print(f"{name:<10} {fmt(xs)}")
    ratio = lambda a, b: statistics.median([x / y for x, y in zip(results[a], results[b])])  # noqa: E731
    print(f"\npool / threads (per repeat, median): {ratio('pool', 'threads'):.2f}x")
    print(f"live on / live off (per repeat, median): {ratio('live on', 'live off'):.3f}x")
    muster.shutdown()


if __name__ == "__main__":
    main()
