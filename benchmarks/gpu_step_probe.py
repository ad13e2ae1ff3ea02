"""Where a muster worker's GPU step loses time against torchrun's: the same loop, variant by variant.

    python benchmarks/gpu_step_probe.py              # on a machine with a CUDA GPU
    python benchmarks/gpu_step_probe.py --cpu        # the same probe on CPU (a dry run of the script)

``ddp_bench.py --gpu --workers 1`` measured muster's steady-state step 10-15%
slower than torchrun's (2.65 vs 2.37 ms on an H200).  The step there is a
small MLP on batches of 128, so it is bound by the CPU side (Python, kernel
launches, the host-to-device copy), and anything that differs between the two
processes shows.  This probe runs the benchmark's model and data in two
places, each one after the other in the same process:

* a plain process (as torchrun's worker is: no muster),
* a muster ``TorchTrainer`` worker with ``use_gpu=True`` (one worker),

and in each, interleaved rounds of these loops (median step per variant):

* ``plain``: a ``DataLoader`` over a ``DistributedSampler`` and ``.to(device)``,
  as benchmarks/jobs/torchrun_job.py does;
* ``nonblocking``: the same with ``.to(device, non_blocking=True)``;
* ``generator``: ``nonblocking`` with the copy made in a generator wrapped
  around the loader (the shape of ``prepare_data_loader``'s loader);
* ``prepared``: ``prepare_data_loader``'s loader (muster worker only), and
  ``prepared_own_sampler``: the same with ``add_dist_sampler=False`` over the
  ``plain`` loader's sampler;
* ``threads=N``: ``plain`` after ``torch.set_num_threads(N)`` with N the
  machine's cores (muster gives each worker its CPU share as its thread count).

Each place also reports its thread count, CPU affinity, live Python threads
and switch interval.  The figures go to stdout as one JSON line per place.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))


def probe(device_name: str, rounds: int, steps: int, prepared: bool) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    device = torch.device(device_name)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(60_000, 784, generator=g)
    y = torch.randint(0, 10, (60_000,), generator=g)
    dataset = TensorDataset(x, y)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
    ).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    environment = {
        "torch_threads": torch.get_num_threads(),
        "affinity": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "python_threads": sorted(t.name for t in threading.enumerate()),
        "switch_interval_s": sys.getswitchinterval(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }

    def plain_loader() -> Any:
        return DataLoader(dataset, batch_size=128, sampler=DistributedSampler(dataset, num_replicas=1, rank=0))

    def run(batches: Any, move: Any) -> list[float]:
        times, last = [], time.perf_counter()
        for i, (inputs, targets) in enumerate(batches):
            if i == steps:
                break
            inputs, targets = move(inputs), move(targets)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(inputs), targets)
            loss.backward()
            optimizer.step()
            loss.item()
            now = time.perf_counter()
            times.append(now - last)
            last = now
        return times[5:]  # the first steps of a pass start the loader

    variants: dict[str, Any] = {
        "plain": lambda: run(plain_loader(), lambda t: t.to(device)),
        "nonblocking": lambda: run(plain_loader(), lambda t: t.to(device, non_blocking=True)),
    }

    def moved(batches: Any) -> Any:  # a bare generator that moves each batch, as a wrapper would
        for inputs, targets in batches:
            yield inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)

    variants["generator"] = lambda: run(moved(plain_loader()), lambda t: t)
    if prepared:
        from muster.train.torch import prepare_data_loader

        loader = prepare_data_loader(DataLoader(dataset, batch_size=128, shuffle=True))
        own = prepare_data_loader(plain_loader(), add_dist_sampler=False)
        variants["prepared"] = lambda: run(loader, lambda t: t)
        variants["prepared_own_sampler"] = lambda: run(own, lambda t: t)
    cores = os.cpu_count() or 1

    def with_threads() -> list[float]:
        before = torch.get_num_threads()
        torch.set_num_threads(cores)
        try:
            return run(plain_loader(), lambda t: t.to(device))
        finally:
            torch.set_num_threads(before)

    variants[f"threads={cores}"] = with_threads
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(rounds):
        order = list(variants)[r % len(variants):] + list(variants)[:r % len(variants)]
        for name in order:
            samples[name].extend(variants[name]())
    medians = {name: round(statistics.median(s) * 1e3, 4) for name, s in samples.items()}
    counts = {k: len(v) for k, v in samples.items()}
    return {"environment": environment, "median_step_ms": medians, "steps_each": counts}


def train_func(config: dict) -> None:
    from muster.train.torch import get_device

    result = probe(str(get_device()), config["rounds"], config["steps"], prepared=True)
    print("PROBE muster_worker " + json.dumps(result), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu", action="store_true", help="run on CPU (checks the script, measures nothing about GPUs)")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--place", choices=["plain", "muster", "both"], default="both")
    args = p.parse_args()
    if args.place == "both":  # each place in its own process: CUDA in the driver would change how muster starts workers
        import subprocess

        for place in ("plain", "muster"):
            subprocess.run([sys.executable, __file__, "--place", place, "--rounds", str(args.rounds),
                            "--steps", str(args.steps), *(["--cpu"] if args.cpu else [])], check=True)
        return
    if args.place == "plain":
        import torch

        device = "cpu" if args.cpu else "cuda:0"
        if not args.cpu:
            torch.cuda.set_device(0)
        print("PROBE plain_process " + json.dumps(probe(device, args.rounds, args.steps, prepared=False)), flush=True)
    else:
        import tempfile

        from muster.train import RunConfig, ScalingConfig
        from muster.train.torch import TorchTrainer

        trainer = TorchTrainer(
            train_func,
            train_loop_config={"rounds": args.rounds, "steps": args.steps},
            scaling_config=ScalingConfig(num_workers=1, use_gpu=not args.cpu),
            run_config=RunConfig(storage_path=tempfile.mkdtemp(), verbose=0),
        )
        trainer.fit()


if __name__ == "__main__":
    main()
