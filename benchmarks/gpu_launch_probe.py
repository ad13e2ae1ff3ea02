"""Where a one-GPU TorchTrainer's launch goes: timestamps of each step between the driver's imports and the
training function, on a machine with a CUDA GPU.

    python benchmarks/gpu_launch_probe.py [--rounds 3]

``ddp_bench.py --gpu`` shows the span from the driver's imports to the training function growing from ~0.9 s
on a CPU to ~4.6 s on an H200. This script splits that span. It wraps, in the driver before ``muster.init()``
(the zygote and its workers are forked from it, so they inherit the wrappers), the zygote's preload, the
backend's ``on_worker_start``, ``torch.cuda.set_device`` and ``init_process_group``, and each writes the
time it starts and ends to one file. Each round runs in a fresh driver process. It also times, each in a fresh
interpreter, the costs that the split points at: ``import torch``, CUDA's first context, and
``import torch._dynamo``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

T0 = time.time()


def mark(name: str) -> None:
    with open(os.environ["GPU_PROBE_MARKS"], "a") as f:
        f.write(f"{name} {os.getpid()} {time.time() - T0:.4f}\n")


def timed(name: str, fn: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        mark(f"{name}:start")
        try:
            return fn(*args, **kwargs)
        finally:
            mark(f"{name}:end")
    return wrapper


def train_func(config: dict) -> None:
    import torch

    from muster import train
    from muster.train.torch import get_device, prepare_model

    mark("train_func:start")
    model = prepare_model(torch.nn.Linear(784, 10))
    model(torch.randn(128, 784, device=get_device())).sum().backward()
    torch.cuda.synchronize()
    mark("first_step")
    train.report({"ok": 1})


def driver() -> None:
    mark("driver:start")
    import torch
    import torch.distributed as dist

    import muster
    from muster.core.local import zygote
    from muster.train import ScalingConfig
    from muster.train.torch import TorchTrainer
    from muster.train.torch.config import TorchBackend

    mark("imports_done")
    zygote._preload = timed("zygote_preload", zygote._preload)
    TorchBackend.on_worker_start = timed("on_worker_start", TorchBackend.on_worker_start)
    torch.cuda.set_device = timed("cuda_set_device", torch.cuda.set_device)
    dist.init_process_group = timed("init_process_group", dist.init_process_group)
    with tempfile.TemporaryDirectory() as storage:
        muster.init()
        mark("init_done")
        TorchTrainer(train_func, scaling_config=ScalingConfig(num_workers=1, use_gpu=True),
                     run_config=muster.train.RunConfig(storage_path=storage, verbose=0)).fit()
    mark("fit_done")
    muster.shutdown()


SNIPPETS = {
    "import torch": "import torch",
    "cuda first context (after import torch)": "import torch; torch.cuda.set_device(0); torch.zeros(1, device='cuda')",
    "import torch._dynamo (after import torch)": "import torch; import torch._dynamo",
}


def time_snippet(code: str, after_import: bool) -> float:
    prog = ("import time, torch; t = time.perf_counter(); " + code.split("; ", 1)[1]
            if after_import else "import time; t = time.perf_counter(); " + code)
    out = subprocess.run([sys.executable, "-c", prog + "; print(time.perf_counter() - t)"],
                         capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.driver:
        driver()
        return 0
    rounds: list[dict[str, float]] = []
    for i in range(args.rounds):
        with tempfile.NamedTemporaryFile("r", suffix=".marks") as f:
            env = dict(os.environ, GPU_PROBE_MARKS=f.name)
            subprocess.run([sys.executable, os.path.abspath(__file__), "--driver"], env=env, check=True,
                           timeout=300)
            marks: dict[str, float] = {}
            for line in f.read().splitlines():
                name, pid, t = line.split()
                n = sum(1 for k in marks if k.split("#")[0] == name)  # a repeated mark (a second preload) numbered
                marks[f"{name}#{n + 1}" if n else name] = float(t)
            rounds.append(marks)
            print(f"round {i + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(marks.items(), key=lambda x: x[1])),
                  flush=True)
    names = sorted(rounds[0], key=lambda k: rounds[0][k])
    print("\nmedian seconds after the driver's first line:")
    for name in names:
        print(f"  {name:28s} {statistics.median(r[name] for r in rounds if name in r):7.2f}")
    singles = {label: statistics.median(time_snippet(code, "(after" in label) for _ in range(args.rounds))
               for label, code in SNIPPETS.items()}
    print("\nin a fresh interpreter (median):")
    for label, s in singles.items():
        print(f"  {label:45s} {s:6.2f} s")
    print(json.dumps({"rounds": rounds, "fresh": singles}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
