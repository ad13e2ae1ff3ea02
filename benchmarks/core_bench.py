"""Ray Core's basics -- tasks, actors, objects -- on muster and on Ray, side by side.

    python benchmarks/core_bench.py                    # muster, and Ray if importable; 3 runs each
    python benchmarks/core_bench.py --runs 5 --tasks 5000
    python benchmarks/core_bench.py --systems muster   # muster alone

Every run is a fresh Python subprocess (runs of the two systems alternate, so
a busy spell on the machine hits both).  Each run measures, with the
system's defaults (``muster.init()`` / ``ray.init()``: every CPU of the
machine, no arguments):

* init -> first result: from just before ``import muster`` (``import ray``)
  to the value of the first task in hand: import, ``init()``, starting the
  first worker, one no-op task, ``get``;
* tiny-task throughput: ``--tasks`` no-op tasks submitted at once, then one
  ``get`` on the list (tasks/s; median over ``--batches`` batches, after one
  warm-up batch so worker start-up is not counted);
* actor call latency: median of ``--calls`` sequential
  ``get(actor.m.remote())`` round trips on one warm actor;
* 100 MB array round trip: ``put`` a 100 MB float64 array, pass the ref to a
  task that returns the array, ``get`` it (median over ``--round-trips``);
* ``util.multiprocessing.Pool``: making a pool of 2 processes (until it can
  take work), then ``pool.map`` of a tiny function over ``--pool-items``
  integers with the default chunksize (median over 3 maps).

The table gives the median over runs and, per figure, how many times better
muster is than Ray (>1: muster ahead).  Results go to benchmarks/results/ as
JSON, with the CPU the rest of the machine used during each run (busy CPU
from /proc/stat minus the run's own process tree): other jobs on a shared box
show up there.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
SYSTEMS = ("muster", "ray")

# (key, label, unit, format, higher_is_better)
FIGURES = [
    ("init_to_first_result_s", "init -> first task result", "s", "{:.2f}", False),
    ("tasks_per_s", "tiny-task throughput", "tasks/s", "{:.0f}", True),
    ("actor_call_ms", "actor call latency (median)", "ms", "{:.3f}", False),
    ("roundtrip_100mb_s", "100 MB array round trip", "s", "{:.3f}", False),
    ("pool_start_s", "Pool(2) start", "s", "{:.2f}", False),
    ("pool_map_s", "Pool.map of tiny calls", "s", "{:.3f}", False),
]


def square(x: int) -> int:
    return x * x


# ----------------------------------------------------------------------------- child
def child(system: str, opts: argparse.Namespace) -> dict[str, Any]:
    """One fresh process: measure every figure for ``system``; return them."""
    t0 = time.perf_counter()
    if system == "muster":
        import muster as api

        api.init()
    else:
        import ray as api

        kwargs = {"include_dashboard": False} if opts.ray_no_dashboard else {}
        api.init(address="local", logging_level="ERROR", **kwargs)  # a new local instance, never a running cluster

    @api.remote
    def noop():
        return None

    @api.remote
    def identity(x):
        return x

    @api.remote
    class Echo:
        def m(self):
            return None

    api.get(noop.remote())
    out: dict[str, Any] = {"init_to_first_result_s": time.perf_counter() - t0}

    import numpy as np

    api.get([noop.remote() for _ in range(opts.tasks)])  # warm-up: every worker started
    rates = []
    for _ in range(opts.batches):
        t = time.perf_counter()
        api.get([noop.remote() for _ in range(opts.tasks)])
        rates.append(opts.tasks / (time.perf_counter() - t))
    out["tasks_per_s"] = statistics.median(rates)
    out["tasks_per_s_all"] = rates

    actor = Echo.remote()
    for _ in range(50):
        api.get(actor.m.remote())
    lat = []
    for _ in range(opts.calls):
        t = time.perf_counter()
        api.get(actor.m.remote())
        lat.append(time.perf_counter() - t)
    out["actor_call_ms"] = statistics.median(lat) * 1e3
    out["actor_call_p90_ms"] = sorted(lat)[int(0.9 * len(lat))] * 1e3
    api.kill(actor)

    array = np.random.default_rng(0).standard_normal(opts.mb * 1024 * 1024 // 8)
    api.get(identity.remote(api.put(array[:1024])))  # warm the path with a small one
    trips = []
    for _ in range(opts.round_trips):
        t = time.perf_counter()
        back = api.get(identity.remote(api.put(array)))
        trips.append(time.perf_counter() - t)
        if back.shape != array.shape or back[-1] != array[-1] or back[12345] != array[12345]:
            raise AssertionError(f"{system}: the array came back changed")
        out["roundtrip_result_writable"] = bool(back.flags.writeable)
        del back
    out["roundtrip_100mb_s"] = statistics.median(trips)
    out["roundtrip_100mb_s_all"] = trips

    if system == "muster":
        from muster.util.multiprocessing import Pool
    else:
        from ray.util.multiprocessing import Pool
    t = time.perf_counter()
    pool = Pool(2)
    pool.map(square, [1])  # its processes can take work
    out["pool_start_s"] = time.perf_counter() - t
    maps = []
    for _ in range(3):
        t = time.perf_counter()
        got = pool.map(square, range(opts.pool_items))
        maps.append(time.perf_counter() - t)
        if got[-1] != (opts.pool_items - 1) ** 2 or len(got) != opts.pool_items:
            raise AssertionError(f"{system}: Pool.map gave a wrong result")
    pool.terminate()
    out["pool_map_s"] = statistics.median(maps)
    out["pool_map_s_all"] = maps
    out["version"] = api.__version__
    api.shutdown()
    return out


# ----------------------------------------------------------------------------- parent
def busy_cpu_s() -> float:
    """CPU seconds the whole machine has spent busy since boot (all cores, /proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def children_cpu_s() -> float:
    """CPU seconds used by this process's finished descendants (the run, its engine, its workers)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_child(system: str, opts: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", system, "--tasks", str(opts.tasks),
           "--batches", str(opts.batches), "--calls", str(opts.calls), "--mb", str(opts.mb),
           "--round-trips", str(opts.round_trips), "--pool-items", str(opts.pool_items)] + (["--ray-no-dashboard"] if opts.ray_no_dashboard else [])
    env = dict(os.environ, RAY_DEDUP_LOGS="0", PYTHONUNBUFFERED="1")
    busy0, own0, wall0 = busy_cpu_s(), children_cpu_s(), time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=opts.timeout)
    busy1, own1, wall1 = busy_cpu_s(), children_cpu_s(), time.monotonic()
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"{system} run failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    result = json.loads(lines[-1][len("RESULT "):])
    result["run_cpu_s"] = own1 - own0
    result["background_cores"] = max(0.0, (busy1 - busy0) - (own1 - own0)) / (wall1 - wall0)
    result["loadavg_1m_after"] = os.getloadavg()[0]
    return result


def importable(module: str) -> bool:
    return subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True).returncode == 0


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    return {s: {k: statistics.median(r[k] for r in rs) for k, *_ in FIGURES} for s, rs in runs.items() if rs}


def table(summary: dict[str, dict[str, float]]) -> str:
    systems = list(summary)
    head = f"{'figure':<30}" + "".join(f"{s:>14}" for s in systems)
    if len(systems) == 2:
        head += f"{'muster vs ray':>16}  ahead?"
    rows = [head, "-" * len(head)]
    for key, label, unit, fmt, higher in FIGURES:
        row = f"{label + ' (' + unit + ')':<30}" + "".join(f"{fmt.format(summary[s][key]):>14}" for s in systems)
        if len(systems) == 2:
            m, r = summary["muster"][key], summary["ray"][key]
            factor = m / r if higher else r / m
            row += f"{factor:>15.2f}x  {'yes' if factor > 1 else 'NO'}"
        rows.append(row)
    return "\n".join(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--systems", default=None, help="comma-separated: muster,ray (default: muster + ray if importable)")
    p.add_argument("--runs", type=int, default=3, help="fresh processes per system (median reported)")
    p.add_argument("--tasks", type=int, default=2000, help="no-op tasks per throughput batch")
    p.add_argument("--batches", type=int, default=3, help="timed throughput batches per run")
    p.add_argument("--calls", type=int, default=1000, help="sequential actor calls per run")
    p.add_argument("--mb", type=int, default=100, help="array size for the round trip, MB")
    p.add_argument("--round-trips", type=int, default=5, help="timed round trips per run")
    p.add_argument("--pool-items", type=int, default=10000, help="integers each Pool.map maps")
    p.add_argument("--ray-no-dashboard", action="store_true",
                   help="ray.init(include_dashboard=False); default: Ray's default (dashboard on with ray[default])")
    p.add_argument("--timeout", type=float, default=600, help="seconds one run may take")
    p.add_argument("--child", choices=SYSTEMS, help=argparse.SUPPRESS)
    p.add_argument("--no-save", action="store_true", help="do not write benchmarks/results/*.json")
    opts = p.parse_args()

    if opts.child:
        print("RESULT " + json.dumps(child(opts.child, opts)), flush=True)
        return

    systems = opts.systems.split(",") if opts.systems else ["muster"] + (["ray"] if importable("ray") else [])
    if "ray" not in systems:
        print("Ray is not importable here: measuring muster alone (pip install 'ray[default]' to compare).")
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    for i in range(opts.runs):
        for s in systems:  # alternate, so a busy spell on the machine hits both
            r = run_child(s, opts)
            runs[s].append(r)
            print(f"run {i + 1}/{opts.runs} {s:<6}: " + "  ".join(
                f"{k}={fmt.format(r[k])}" for k, _, _, fmt, _ in FIGURES
            ) + f"  (other load on the machine: {r['background_cores']:.1f} cores)", flush=True)

    summary = summarize(runs)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"\nmedian of {opts.runs} run(s); {cpus} CPUs, Python {platform.python_version()}, "
          + ", ".join(f"{s} {runs[s][0]['version']}" for s in systems))
    print(table(summary))
    if not opts.no_save:
        os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
        path = os.path.join(HERE, "results", f"core_bench_{time.strftime('%Y%m%d-%H%M%S')}.json")
        with open(path, "w") as f:
            json.dump({"options": {k: v for k, v in vars(opts).items() if k != "child"}, "cpus": cpus,
                       "python": platform.python_version(), "summary": summary, "runs": runs}, f, indent=1)
        print(f"\nwrote {os.path.relpath(path)}")


if __name__ == "__main__":
    main()
