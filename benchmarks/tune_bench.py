"""Tune throughput and early stopping: muster vs Ray Tune, side by side, same machine.

Two workloads, each run in a fresh process per framework (so engine start-up
is counted, as a user sees it):

* ``trivial``: N trials (default 64), each reporting 10 results and doing
  nothing else -- the cost of a trial itself. Reported: wall time, trials/s.
* ``asha``: 32 trials of a noisy learning curve, each iteration sleeping
  ``--step-s`` (work), under FIFO and under ASHA (max_t 16, grace 1,
  reduction 4). Reported: iterations run and wall time; early stopping pays
  when wall time falls in proportion to the iterations cut.

Both frameworks use their defaults (1 CPU per trial, as many trials at once as
CPUs); Ray runs the trivial workload twice, with and without
``reuse_actors=True`` (its fastest mode).  Every run is a fresh process; the
runs are interleaved (the order rotates each repeat) and each figure is the
median over ``--repeat`` runs with the spread (min-max).

    python benchmarks/tune_bench.py --samples 32 --repeat 3   # muster, and Ray when installed
    python benchmarks/tune_bench.py --only muster
    python benchmarks/tune_bench.py --samples 32 --no-asha --ray-reuse-only --import-torch

``--import-torch`` adds a trivial variant per framework whose driver imports
torch first (counted in its wall time), as a PyTorch user's script does: the
engine then starts its workers from a process holding torch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _bench import fmt, interleaved, run_child, summary  # noqa: E402


# -- the trainables (the same code for both frameworks) ------------------------------
def trivial(config):
    report = _report(config["api"])
    for i in range(10):
        report({"score": config["x"] * (i + 1)})


def curve(config):
    """A learning curve whose final quality is set by ``q``, plus noise; ``step_s`` of work per step."""
    import random

    report = _report(config["api"])
    rng = random.Random(config["seed"])
    for i in range(1, 17):
        time.sleep(config["step_s"])
        report({"loss": config["q"] + 1.0 / i + rng.gauss(0, 0.02)})


def _report(api):
    if api == "ray":
        from ray import tune as ray_tune

        return ray_tune.report
    from muster import tune

    return tune.report


# -- one measurement, in this process -------------------------------------------------
def run_one(api: str, workload: str, samples: int, scheduler: str, step_s: float, reuse: bool,
            import_torch: bool = False) -> dict:
    t0 = time.perf_counter()
    if import_torch:
        import torch  # noqa: F401 - a PyTorch user's driver has it imported
    if api == "ray":
        import ray
        from ray import tune as T

        ray.init(address="local", include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        RunConfig = T.RunConfig
    else:
        import muster
        from muster import tune as T

        muster.init()
        RunConfig = T.RunConfig
    storage = tempfile.mkdtemp(prefix=f"tune-bench-{api}-")
    if workload == "trivial":
        fn, space, metric, mode = trivial, {"x": T.uniform(0, 1)}, "score", "max"
    else:
        fn, metric, mode = curve, "loss", "min"
        space = {"q": T.uniform(0.0, 1.0), "seed": T.randint(0, 10**6), "step_s": step_s}
    space["api"] = api
    sched = None
    if scheduler == "asha":
        sched = T.schedulers.ASHAScheduler(max_t=16, grace_period=1, reduction_factor=4)
    kwargs = {"reuse_actors": True} if (api == "ray" and reuse) else {}
    tuner = T.Tuner(
        fn,
        param_space=space,
        tune_config=T.TuneConfig(num_samples=samples, metric=metric, mode=mode, scheduler=sched, **kwargs),
        run_config=RunConfig(storage_path=storage, verbose=0),
    )
    t_fit = time.perf_counter()
    grid = tuner.fit()
    end = time.perf_counter()
    iters = sum(int((r.metrics or {}).get("training_iteration", 0)) for r in grid)
    errors = sum(1 for r in grid if r.error is not None)
    return {
        "api": api, "workload": workload, "scheduler": scheduler, "trials": len(grid), "errors": errors,
        "iterations": iters, "wall_s": end - t0, "fit_s": end - t_fit, "trials_per_s": len(grid) / (end - t0),
        "reuse_actors": reuse, "import_torch": import_torch,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--api", default="muster")
    ap.add_argument("--workload", default="trivial")
    ap.add_argument("--scheduler", default="fifo")
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--step-s", type=float, default=0.1)
    ap.add_argument("--reuse-actors", action="store_true")
    ap.add_argument("--only", choices=["muster", "ray"])
    ap.add_argument("--repeat", type=int, default=3, help="runs of each variant (interleaved); figures are medians")
    ap.add_argument("--no-asha", action="store_true", help="only the trivial workload")
    ap.add_argument("--ray-reuse-only", action="store_true",
                    help="run Ray's trivial workload only with reuse_actors=True (its fastest mode)")
    ap.add_argument("--import-torch", action="store_true",
                    help="also run the trivial workload with torch imported in the driver first")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "tune_bench.json"))
    a = ap.parse_args()
    if a.one:
        print(json.dumps(run_one(a.api, a.workload, a.samples, a.scheduler, a.step_s, a.reuse_actors,
                                 a.import_torch)), flush=True)
        return
    apis = [a.only] if a.only else ["muster", "ray"]
    if "ray" in apis:
        try:
            import ray  # noqa: F401
        except ImportError:
            apis.remove("ray")
    variants = []
    for api in apis:
        if api == "muster" or not a.ray_reuse_only:
            variants.append((f"{api} trivial", [f"--api={api}", "--workload=trivial", f"--samples={a.samples}"]))
        if api == "ray":
            variants.append(("ray trivial reuse_actors", [f"--api={api}", "--workload=trivial",
                                                          f"--samples={a.samples}", "--reuse-actors"]))
        if a.import_torch:
            ray_flag = ["--reuse-actors"] if api == "ray" else []
            name = "ray trivial reuse_actors +torch" if api == "ray" else f"{api} trivial +torch"
            variants.append((name, [f"--api={api}", "--workload=trivial", f"--samples={a.samples}", "--import-torch",
                                    *ray_flag]))
        if not a.no_asha:
            for sched in ("fifo", "asha"):
                variants.append((f"{api} curve {sched}", [f"--api={api}", "--workload=asha", "--samples=32",
                                                          f"--scheduler={sched}", f"--step-s={a.step_s}"]))
    rows: dict[str, list[dict]] = {name: [] for name, _ in variants}
    for rep, (name, args) in interleaved(variants, a.repeat):
        row = run_child(__file__, args)
        rows[name].append(row)
        print(f"[{rep + 1}/{a.repeat}] {name:32s} trials={row['trials']:3d} errors={row['errors']} "
              f"iters={row['iterations']:4d} wall={row['wall_s']:7.2f}s fit={row['fit_s']:7.2f}s", flush=True)
    table = {name: {key: summary([r[key] for r in rs]) for key in ("wall_s", "fit_s", "iterations", "trials_per_s")}
             for name, rs in rows.items()}
    print("\nmedian over runs (min-max):")
    for name, t in table.items():
        print(f"  {name:32s} wall {fmt(t['wall_s'])}  fit {fmt(t['fit_s'])}  iterations "
              f"{fmt(t['iterations'], unit='', digits=0)}")
    pairs = [("ray trivial", "muster trivial"), ("ray trivial reuse_actors", "muster trivial"),
             ("ray trivial reuse_actors +torch", "muster trivial +torch")]
    for other_name, base_name in pairs:
        for key in ("wall_s", "fit_s"):
            base = table.get(base_name, {}).get(key, {}).get("median")
            other = table.get(other_name, {}).get(key, {}).get("median")
            if base and other:
                print(f"  {other_name} / {base_name}, {key[:-2]}: {other / base:.2f}x")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"samples": a.samples, "repeat": a.repeat, "summary": table, "runs": rows}, f, indent=1)
    print(f"results: {a.out}")


if __name__ == "__main__":
    main()
