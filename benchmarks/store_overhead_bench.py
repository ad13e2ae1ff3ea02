"""Cost of the run store on the training path: ``report()`` latency with the store on vs off.

Two workers each call ``train.report`` N times in a tight loop (no compute,
the worst case for per-report overhead) and time every call; the driver's
store writes rows on its own thread. Runs alternate off/on ``--repeats``
times in one process, each a fresh run.

    python benchmarks/store_overhead_bench.py --reports 2000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time


def loop(config):
    import muster.train as train

    times = []
    for i in range(config["reports"]):
        start = time.perf_counter()
        train.report({"loss": 1.0 / (i + 1), "step": i, "lr": 0.1})
        times.append(time.perf_counter() - start)
    times.sort()
    print(json.dumps({"p50_us": 1e6 * times[len(times) // 2], "p99_us": 1e6 * times[int(len(times) * 0.99)]}))


def one(storage: str, name: str, reports: int, store: bool) -> dict[str, float]:
    from muster.train import RunConfig, ScalingConfig
    from muster.train.torch import TorchTrainer

    os.environ["MUSTER_RUN_STORE"] = "1" if store else "0"
    start = time.perf_counter()
    result = TorchTrainer(loop, train_loop_config={"reports": reports}, scaling_config=ScalingConfig(num_workers=2),
                          run_config=RunConfig(name=name, storage_path=storage, verbose=0)).fit()
    wall = time.perf_counter() - start
    assert len(result.all_reports) == 2 * reports
    return {"wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reports", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import muster

    muster.init(num_cpus=2)
    out: dict[str, list[float]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as storage:
        for r in range(args.repeats):
            for mode in ("off", "on"):
                out[mode].append(one(storage, f"{mode}_{r}", args.reports, mode == "on")["wall_s"])
    summary = {mode: statistics.median(v) for mode, v in out.items()}
    print(json.dumps({"reports_per_rank": args.reports, "wall_s_median": summary,
                      "on_over_off": summary["on"] / summary["off"]}))


if __name__ == "__main__":
    main()
