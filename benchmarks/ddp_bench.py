"""The same DDP job under torchrun, muster and Ray Train, side by side.

    python benchmarks/ddp_bench.py                       # every framework installed, once
    python benchmarks/ddp_bench.py --repeat 3            # median of 3 runs each
    python benchmarks/ddp_bench.py --frameworks torchrun,muster --quick
    python benchmarks/ddp_bench.py --gpu --workers 1     # one GPU per worker, nccl
    python benchmarks/ddp_bench.py --strategy fsdp --amp # FSDP2 and mixed precision (Ray: no --amp)

The job (benchmarks/jobs/torchrun_job.py for raw torchrun; trainer_job.py for
muster and Ray Train, which differ only in their imports: identical model,
data, loop and checkpoints): an MLP 784-512-512-10 on synthetic rows
(torch.randn features, random labels, fixed seed), batch 128 per worker, Adam,
2 workers, 2 epochs, DistributedSampler sharding, one checkpoint per epoch
(model + optimizer state, torch.save, rank 0 only).

Each framework's launcher or driver runs as its own subprocess, so interpreter
start and import costs count.  For each run this measures:

* launch -> first step: from just before the subprocess is spawned to the end
  of rank 0's first optimizer step (rank 0 writes a wall-clock timestamp);
* steady-state step time: median of rank 0's per-step times (data loading,
  forward, backward, all-reduce, Adam step), skipping the first
  ``--skip-steps`` steps of each epoch;
* wall time: subprocess start to exit;
* peak memory of the whole process tree (launcher/driver and every
  descendant): the peak of the summed RSS and of the summed PSS
  (see _procmon.py for how they are sampled).

Under the table come diagnostics that help read it on a shared machine:
rank 0's main-thread CPU time per step, the time rank 0 spent per step
runnable but waiting for a CPU (/proc/thread-self/schedstat), the CPU time of
the whole tree, and the load other processes put on the machine during the
run (all busy CPU time from /proc/stat minus the tree's and this script's).
Before each run the script waits (``--quiet-wait``, up to 120 s) for other
processes to use less than ``--quiet-cores`` (0.2) cores.  Runs rotate order
each repeat so no framework always goes first.

Results are printed as a table with ratios to torchrun and written as JSON
(every run, every figure, the machine, the muster commit) to
benchmarks/results/.  See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _procmon import TreeMemorySampler  # noqa: E402

FRAMEWORKS = ("torchrun", "muster", "ray")
MIB = 1024 * 1024

# (key, label, unit, format) of the figures compared in the table.
FIGURES = [
    ("launch_to_first_step_s", "launch -> first step", "s", "{:.2f}"),
    ("step_ms", "steady-state step", "ms", "{:.2f}"),
    ("wall_s", "whole-job wall time", "s", "{:.2f}"),
    ("peak_rss_mib", "peak RSS, process tree", "MiB", "{:.0f}"),
    ("peak_pss_mib", "peak PSS, process tree", "MiB", "{:.0f}"),
]
# Diagnostics printed under the table: where the time went, and how busy the machine was.
DIAGNOSTICS = [
    ("step_cpu_ms", "rank-0 main-thread CPU per step", "ms", "{:.2f}"),
    ("step_wait_ms_mean", "rank-0 wait for a free CPU per step (mean)", "ms", "{:.2f}"),
    ("tree_cpu_s", "CPU time, whole process tree", "s", "{:.1f}"),
    ("background_cores", "other processes' load during run", "cores", "{:.2f}"),
]

# Timestamps the job scripts write (marks.txt), in the order they happen.
MARKS = ["driver_start", "imports_done", "worker_start", "train_func_start", "setup_done", "first_step", "train_end",
         "fit_done"]


def busy_cpu_s() -> float:
    """CPU seconds the whole machine has spent busy since boot (all cores, /proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def wait_for_quiet(max_wait_s: float, threshold_cores: float) -> float:
    """Wait (up to ``max_wait_s``) until other processes use less than ``threshold_cores``; return their load."""
    deadline = time.monotonic() + max_wait_s
    noted = False
    while True:
        b0, s0 = busy_cpu_s(), time.process_time()
        time.sleep(1.0)
        load = (busy_cpu_s() - b0) - (time.process_time() - s0)
        if load < threshold_cores or time.monotonic() >= deadline:
            return load
        if not noted:
            print(f"(machine busy: {load:.2f} cores in use by other processes; waiting up to "
                  f"{max_wait_s:.0f} s for it to quiet down)", end=" ", flush=True)
            noted = True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def framework_available(name: str) -> tuple[bool, str]:
    if name == "ray":
        if importlib.util.find_spec("ray") is None:
            return False, 'ray is not installed here (pip install "ray[train]")'
        try:
            import ray.train.torch  # noqa: F401
        except Exception as exc:  # noqa: BLE001
            return False, f"ray is installed but ray.train.torch does not import: {exc}"
    if name == "muster" and importlib.util.find_spec("muster") is None:
        return False, "muster is not importable (pip install -e . from the repository root)"
    return True, ""


def command(name: str, args: argparse.Namespace, out: str, scratch: str) -> list[str]:
    job = ["--rows", str(args.rows), "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
           "--out", out, "--strategy", args.strategy, *(["--gpu"] if args.gpu else []),
           *(["--amp"] if args.amp else [])]
    if name == "torchrun":
        return [
            sys.executable, "-m", "torch.distributed.run",
            "--nnodes=1", f"--nproc_per_node={args.workers}",
            "--master_addr=127.0.0.1", f"--master_port={free_port()}",
            os.path.join(HERE, "jobs", "torchrun_job.py"), *job, "--ckpt-dir", scratch,
        ]
    script = os.path.join(HERE, "jobs", "trainer_job.py")
    return [sys.executable, script, "--api", name, *job, "--workers", str(args.workers), "--storage", scratch]


def run_once(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One run of one framework: spawn, sample memory, collect the job's timestamps."""
    tmp = tempfile.mkdtemp(prefix=f"ddp-bench-{name}-")
    out, scratch = os.path.join(tmp, "out"), os.path.join(tmp, "scratch")
    os.makedirs(out)
    os.makedirs(scratch)
    run_id = uuid.uuid4().hex
    env = dict(os.environ)
    env.update({
        "OMP_NUM_THREADS": str(args.omp_threads),  # torchrun's default, and muster's for a 1-CPU worker
        "PYTHONUNBUFFERED": "1",
        "DDP_BENCH_RUN": run_id,  # to find stragglers after the run
        "RAY_USAGE_STATS_ENABLED": "0",  # no telemetry upload from the Ray run
    })
    cmd = command(name, args, out, scratch)
    log_path = os.path.join(tmp, "log.txt")
    load_before = wait_for_quiet(args.quiet_wait, args.quiet_cores) if args.quiet_wait > 0 else None
    with open(log_path, "wb") as log:
        busy0, own0 = busy_cpu_s(), time.process_time()
        t_launch = time.time()
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp,
                                stdin=subprocess.DEVNULL)
        sampler = TreeMemorySampler(proc.pid, args.interval, args.pss_interval).start()
        try:
            rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
            rc = f"timeout after {args.timeout} s"
        t_end = time.time()
        busy1, own1 = busy_cpu_s(), time.process_time()
    sampler.stop()
    tree_cpu = sampler.tree_cpu_s
    background = (busy1 - busy0) - tree_cpu - (own1 - own0)
    stragglers = _reap_stragglers(run_id)

    result: dict[str, Any] = {
        "framework": name,
        "command": cmd,
        "returncode": rc,
        "wall_s": t_end - t_launch,
        "peak_rss_mib": sampler.peak_rss / MIB,
        "peak_pss_mib": sampler.peak_pss / MIB,
        "peak_processes": sampler.peak_procs,
        "memory_samples": sampler.samples,
        "pss_samples": sampler.pss_samples,
        "sampler_cpu_s": sampler.cpu_s,
        "tree_cpu_s": tree_cpu,
        "background_cores": max(0.0, background) / (t_end - t_launch),
        "background_cores_before": load_before,
        "stragglers_after_exit": stragglers,
    }
    marks = _read_marks(os.path.join(out, "marks.txt"))
    result["marks_s"] = {k: round(v - t_launch, 4) for k, v in marks.items()}
    steps_path = os.path.join(out, "steps.json")
    if rc != 0 or "first_step" not in marks or not os.path.exists(steps_path):
        with open(log_path, "rb") as f:
            tail = f.read()[-4000:].decode(errors="replace")
        result["error"] = f"exit status {rc}; last output:\n{tail}"
        result["log"] = log_path
        return result
    with open(steps_path) as f:
        steps = json.load(f)
    steady = [t for epoch in steps["step_s"] for t in epoch[args.skip_steps:]]
    steady_cpu = [t for epoch in steps.get("step_cpu_s", []) for t in epoch[args.skip_steps:]]
    steady_wait = [t for epoch in steps.get("step_wait_s", []) for t in epoch[args.skip_steps:]]
    result.update({
        "launch_to_first_step_s": marks["first_step"] - t_launch,
        "step_ms": statistics.median(steady) * 1000 if steady else float("nan"),
        "step_ms_mean": statistics.fmean(steady) * 1000 if steady else float("nan"),
        "step_cpu_ms": statistics.median(steady_cpu) * 1000 if steady_cpu else float("nan"),
        "step_wait_ms_mean": statistics.fmean(steady_wait) * 1000 if steady_wait else float("nan"),
        "steps_per_epoch": [len(e) for e in steps["step_s"]],
        "steady_steps": len(steady),
        "torch_threads": steps["threads"],
        "final_loss": steps["loss"],
    })
    if args.keep:
        result["tmp"] = tmp
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def _read_marks(path: str) -> dict[str, float]:
    marks: dict[str, float] = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                name, _, value = line.strip().partition(" ")
                marks.setdefault(name, float(value))
    return marks


def _reap_stragglers(run_id: str, wait_s: float = 15.0) -> list[str]:
    """Processes of this run still alive after its launcher exited: wait for them, then kill them."""
    import psutil

    def find() -> list[psutil.Process]:
        found = []
        for p in psutil.process_iter():
            try:
                if p.pid != os.getpid() and p.environ().get("DDP_BENCH_RUN") == run_id:
                    found.append(p)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass
        return found

    deadline = time.monotonic() + wait_s
    left = find()
    while left and time.monotonic() < deadline:
        time.sleep(0.25)
        left = find()
    names = []
    for p in left:
        try:
            names.append(f"{p.pid} {' '.join(p.cmdline())[:80]}")
            p.kill()
        except psutil.NoSuchProcess:
            pass
    return names


def warm_page_cache(frameworks: list[str]) -> None:
    """Import each framework once so that no measured run pays for a cold disk cache."""
    mods = {"torchrun": "torch, torch.distributed.run", "muster": "torch, muster.train.torch",
            "ray": "torch, ray.train.torch"}
    for name in frameworks:
        subprocess.run([sys.executable, "-c", f"import {mods[name]}"], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def median_of(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if "error" not in r and r.get(key) is not None]
    return statistics.median(values) if values else None


def machine_info() -> dict[str, Any]:
    import psutil
    import torch

    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_gib": round(psutil.virtual_memory().total / 1024**3, 1),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.cuda.is_available(),
    }
    if info["cuda"]:
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        info["cuda_version"] = torch.version.cuda
    for mod in ("muster", "ray"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            info[mod] = None
    try:
        repo = os.path.dirname(HERE)
        info["git_commit"] = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True,
                                            text=True).stdout.strip() or None
        info["git_src_modified"] = bool(subprocess.run(["git", "-C", repo, "status", "--porcelain", "src"],
                                                       capture_output=True, text=True).stdout.strip())
    except OSError:
        pass
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu_model"] = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), None)
    except OSError:
        pass
    return info


def print_table(summary: dict[str, dict[str, float | None]], frameworks: list[str]) -> str:
    base = summary.get("torchrun", {})
    header = ["figure (median)"] + frameworks
    rows = [header]
    for key, label, unit, fmt in FIGURES + DIAGNOSTICS:
        if key == DIAGNOSTICS[0][0]:
            rows.append(["diagnostics:"] + [""] * len(frameworks))
        row = [f"{label} ({unit})"]
        for fw in frameworks:
            v = summary.get(fw, {}).get(key)
            if v is None:
                row.append("-")
                continue
            cell = fmt.format(v)
            b = base.get(key)
            if fw != "torchrun" and b and unit != "cores":
                cell += f"  ({v / b:.3f}x"
                if unit == "MiB":
                    cell += f", {v - b:+.0f} MiB"
                cell += ")"
            row.append(cell)
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    text = "\n".join(lines)
    print(text)
    return text


def print_startup(runs: dict[str, list[dict[str, Any]]], frameworks: list[str]) -> None:
    """Median time of each startup milestone after launch (s), per framework."""
    print("\nmilestones, seconds after launch (median; rank 0 for worker-side ones):")
    for fw in frameworks:
        ok = [r for r in runs.get(fw, []) if "error" not in r]
        if not ok:
            continue
        parts = []
        for m in MARKS:
            values = [r["marks_s"][m] for r in ok if m in r["marks_s"]]
            if values:
                parts.append(f"{m} {statistics.median(values):.2f}")
        print(f"  {fw:9s} " + ", ".join(parts))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--frameworks", default=",".join(FRAMEWORKS), help="comma-separated: torchrun,muster,ray")
    p.add_argument("--repeat", type=int, default=1, help="runs per framework; figures are medians")
    p.add_argument("--quick", action="store_true", help="smoke test: 12,000 rows instead of 60,000")
    p.add_argument("--rows", type=int, default=None, help="synthetic rows (default 60000; 12000 with --quick)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=128, help="per worker")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--strategy", choices=["ddp", "fsdp"], default="ddp",
                   help="fsdp: FSDP2 fully_shard on the whole model (prepare_model(parallel_strategy='fsdp'))")
    p.add_argument("--amp", action="store_true",
                   help="mixed precision: float16 + GradScaler on CUDA, bfloat16 on CPU (accelerate(amp=True))")
    p.add_argument("--gpu", action="store_true",
                   help="one GPU per worker: nccl, the model and batches on the GPU (needs --workers <= GPUs)")
    p.add_argument("--skip-steps", type=int, default=20, help="steps skipped at the start of each epoch")
    p.add_argument("--omp-threads", type=int, default=1, help="OMP_NUM_THREADS for every framework")
    p.add_argument("--interval", type=float, default=0.05, help="RSS sampling interval (s)")
    p.add_argument("--pss-interval", type=float, default=1.0, help="PSS sampling interval (s); see _procmon.py")
    p.add_argument("--timeout", type=float, default=900, help="per run (s)")
    p.add_argument("--quiet-wait", type=float, default=120,
                   help="before each run, wait up to this long (s) for other processes to go quiet; 0: do not wait")
    p.add_argument("--quiet-cores", type=float, default=0.2,
                   help="'quiet' means other processes use less than this many cores")
    p.add_argument("--keep", action="store_true", help="keep each run's temp folder (logs, checkpoints)")
    p.add_argument("--no-warmup", action="store_true", help="skip the page-cache warm-up imports")
    p.add_argument("--results-dir", default=os.path.join(HERE, "results"))
    args = p.parse_args()
    if args.rows is None:
        args.rows = 12_000 if args.quick else 60_000

    wanted = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    unknown = [f for f in wanted if f not in FRAMEWORKS]
    if unknown:
        p.error(f"--frameworks: unknown {unknown}; choose from {', '.join(FRAMEWORKS)}")
    skipped: dict[str, str] = {}
    frameworks = []
    for fw in wanted:
        ok, why = framework_available(fw)
        if ok:
            frameworks.append(fw)
        else:
            skipped[fw] = why
            print(f"skipping {fw}: {why}")

    info = machine_info()
    print(f"machine: {info['cpus']} CPUs ({info.get('cpu_model')}), {info['memory_gib']} GiB, "
          f"torch {info['torch']}, python {info['python']}, muster {info['muster']} "
          f"(commit {str(info.get('git_commit'))[:10]}{', src modified' if info.get('git_src_modified') else ''}), "
          f"ray {info['ray']}" + (f"; GPUs {info['gpus']} (CUDA {info['cuda_version']})" if info.get("gpus") else ""))
    print(f"job: MLP 784-512-512-10, {args.rows} rows, batch {args.batch_size}/worker, {args.workers} workers"
          f"{' (one GPU each, nccl)' if args.gpu else ''}, {args.strategy.upper()}{', AMP' if args.amp else ''}, "
          f"{args.epochs} epochs, Adam, checkpoint per epoch; OMP_NUM_THREADS={args.omp_threads}; "
          f"repeat {args.repeat}")
    if not args.no_warmup:
        warm_page_cache(frameworks)

    runs: dict[str, list[dict[str, Any]]] = {fw: [] for fw in frameworks}
    for rep in range(args.repeat):
        # Rotate the order each repeat so no framework always runs first (or last).
        order = frameworks[rep % len(frameworks):] + frameworks[: rep % len(frameworks)] if frameworks else []
        for fw in order:
            print(f"[{rep + 1}/{args.repeat}] {fw} ...", end=" ", flush=True)
            r = run_once(fw, args)
            runs[fw].append(r)
            if "error" in r:
                print(f"FAILED\n{r['error']}")
                continue
            print(f"first step {r['launch_to_first_step_s']:.2f} s, {r['step_ms']:.2f} ms/step, "
                  f"wall {r['wall_s']:.2f} s, RSS {r['peak_rss_mib']:.0f} MiB, PSS {r['peak_pss_mib']:.0f} MiB, "
                  f"other load {r['background_cores']:.2f} cores"
                  + (f"; killed stragglers: {r['stragglers_after_exit']}" if r["stragglers_after_exit"] else ""))

    summary = {fw: {key: median_of(rs, key) for key, *_ in FIGURES + DIAGNOSTICS} for fw, rs in runs.items()}
    print()
    table = print_table(summary, frameworks)
    print_startup(runs, frameworks)
    for fw, why in skipped.items():
        print(f"{fw}: not run ({why})")

    ratios = {
        fw: {key: (summary[fw][key] / summary["torchrun"][key])
             if summary.get("torchrun", {}).get(key) and summary[fw][key] is not None else None
             for key, *_ in FIGURES}
        for fw in frameworks
    }
    os.makedirs(args.results_dir, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = os.path.join(args.results_dir, f"ddp_bench_{stamp}{'_gpu' if args.gpu else ''}{'_fsdp' if args.strategy == 'fsdp' else ''}"
                        f"{'_amp' if args.amp else ''}{'_quick' if args.quick else ''}.json")
    with open(path, "w") as f:
        json.dump({"time": stamp, "machine": info, "config": vars(args), "skipped": skipped,
                   "median": summary, "ratio_to_torchrun": ratios, "table": table, "runs": runs}, f, indent=1)
    print(f"\nresults: {path}")
    return 0 if all("error" not in r for rs in runs.values() for r in rs) else 1


if __name__ == "__main__":
    sys.exit(main())
