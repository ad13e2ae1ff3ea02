"""How long PB2's bandit takes to choose one config (the GP fit and the UCB search), with N observations;
and, with ``--before REV``, the same for ``pb2_gp.py`` as it was at git revision REV, interleaved run by run.

The observations are PB2's own (four trials recorded as ``pb2_stall_bench.py`` records them, run through
``PB2._observations``); each run chooses with the same seed, so both versions must print the same choice.
Each run is a fresh fit on the calling thread, as PB2's fitting thread runs it; torch is imported first (a
driver without it pays its import once, at its first fit of 100 points or more).

    PYTHONPATH=src python benchmarks/pb2_fit_bench.py --repeat 3 --before HEAD~1 200 1000
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import tempfile
import time
from types import ModuleType

import numpy as np
import torch  # noqa: F401 - imported before timing, as in a driver that runs torch trials

from muster.tune.schedulers import PB2, pb2_gp
from muster.tune.trial import Trial


def observations(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x, y, newpoint)``: N of PB2's observations of four trials, and the donor's (time, score)."""
    rng = np.random.default_rng(0)
    trials = [Trial(f"t{i}", f"t{i}", {"lr": float(lr)}, "/tmp/x", {}) for i, lr in enumerate(rng.uniform(0, 1, 4))]
    sched = PB2(time_attr="training_iteration", metric="score", mode="max", perturbation_interval=1,
                hyperparam_bounds={"lr": [0.0, 1.0]}, log_config=False, seed=0)
    score = {t.trial_id: 0.0 for t in trials}
    for step in range(1, n // len(trials) + 2):
        for t in trials:
            score[t.trial_id] += 1 - (t.config["lr"] - 0.7) ** 2 + 0.1 * rng.standard_normal()
            sched._record(t, float(step), score[t.trial_id])
    x, y, _ = sched._observations()
    return x[-n:], y[-n:], x[-1, :2]


def load_revision(rev: str) -> ModuleType:
    source = subprocess.run(["git", "show", f"{rev}:src/muster/tune/schedulers/pb2_gp.py"], check=True,
                            capture_output=True, text=True).stdout
    path = tempfile.NamedTemporaryFile("w", suffix="_pb2_gp.py", delete=False)
    with path:
        path.write(source)
    spec = importlib.util.spec_from_file_location(f"pb2_gp_{rev.replace('~', '_')}", path.name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def choose(module: ModuleType, x: np.ndarray, y: np.ndarray, newpoint: np.ndarray) -> tuple[float, float]:
    start = time.perf_counter()
    chosen = module.select_config(x, y, None, newpoint, np.array([[0.0], [1.0]]), np.random.default_rng(0))
    return time.perf_counter() - start, float(chosen[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int, default=[200, 1000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", help="a git revision whose pb2_gp.py runs too, interleaved")
    args = parser.parse_args()
    versions = {"now": pb2_gp}
    if args.before:
        versions = {args.before: load_revision(args.before), "now": pb2_gp}
    for n in args.sizes:
        x, y, newpoint = observations(n)
        times: dict[str, list[float]] = {name: [] for name in versions}
        for run in range(args.repeat):
            for name, module in versions.items():
                seconds, lr = choose(module, x, y, newpoint)
                times[name].append(seconds)
                print(f"N={x.shape[0]} run {run + 1} {name}: {seconds:.2f} s, chose lr={lr:.6f}", flush=True)
        for name, runs in times.items():
            print(f"N={x.shape[0]} {name}: median {statistics.median(runs):.2f} s "
                  f"(min {min(runs):.2f}, max {max(runs):.2f}, {len(runs)} runs)", flush=True)


if __name__ == "__main__":
    main()
