"""Training stall per checkpoint: ``report(..., checkpoint_upload_mode="sync")`` vs ``"async"``.

Each of 2 workers trains a small model but checkpoints a ~500 MB state
(rank 0 saves it with torch.save into a fresh temporary folder, as users do)
every few steps.  The stall is how long ``train.report`` blocks the training
loop; saving the file (torch.save) is the user's own cost and is timed
separately.  The run's wall time shows whether async uploads slow the steps
they overlap with.

Each run is a fresh driver process with its own engine (so neither mode pays
or skips engine start-up for the other); the modes are interleaved, order
rotating each repeat, and figures are medians over ``--repeat`` runs with the
spread (min-max).

    python benchmarks/async_checkpoint_bench.py --mb 500 --checkpoints 4 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench import fmt, interleaved, run_child, summary  # noqa: E402


def loop(config):
    import torch

    import muster.train as train
    from muster.train import Checkpoint

    rank = train.get_context().get_world_rank()
    state = torch.zeros(config["mb"] * 1024 * 1024 // 4)  # float32: mb megabytes
    model = torch.nn.Linear(256, 256)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    stalls, saves = [], []
    for step in range(1, config["steps"] + 1):
        x = torch.randn(64, 256)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % config["every"] == 0:
            if rank == 0:
                folder = tempfile.mkdtemp(prefix="bench-ckpt-")
                t0 = time.perf_counter()
                state[0] = step
                torch.save({"state": state, "model": model.state_dict()}, os.path.join(folder, "state.pt"))
                saves.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                train.report({"step": step}, checkpoint=Checkpoint.from_directory(folder),
                             checkpoint_upload_mode=config["mode"])
                stalls.append(time.perf_counter() - t0)
                import shutil

                shutil.rmtree(folder)  # allowed at once, in both modes
            else:
                t0 = time.perf_counter()
                train.report({"step": step})
                stalls.append(time.perf_counter() - t0)
    with open(os.path.join(config["out"], f"{config['mode']}_{rank}.json"), "w") as f:
        json.dump({"stalls": stalls, "saves": saves}, f)


def run(mode: str, args: argparse.Namespace, base: str) -> dict:
    from muster.train import RunConfig, ScalingConfig
    from muster.train.torch import TorchTrainer

    out = os.path.join(base, mode)
    os.makedirs(out)
    t0 = time.perf_counter()
    result = TorchTrainer(
        loop,
        train_loop_config={"mb": args.mb, "steps": args.every * args.checkpoints, "every": args.every,
                           "mode": mode, "out": out},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=args.storage_path or os.path.join(base, "runs"), verbose=0),
    ).fit()
    wall = time.perf_counter() - t0
    rank0 = json.load(open(os.path.join(out, f"{mode}_0.json")))
    assert len(result.best_checkpoints) == args.checkpoints, "every checkpoint must be committed"
    return {
        "mode": mode,
        "stall_median_s": statistics.median(rank0["stalls"]),
        "stall_max_s": max(rank0["stalls"]),
        "torch_save_median_s": statistics.median(rank0["saves"]),
        "wall_s": wall,
        "checkpoints_committed": len(result.best_checkpoints),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--one", choices=["sync", "async"], help=argparse.SUPPRESS)
    ap.add_argument("--mb", type=int, default=500, help="checkpoint size in MB")
    ap.add_argument("--checkpoints", type=int, default=4)
    ap.add_argument("--every", type=int, default=20, help="steps between checkpoints")
    ap.add_argument("--repeat", type=int, default=3, help="runs per mode (interleaved); figures are medians")
    ap.add_argument("--storage-path", default=None, help="default: a temporary local folder")
    args = ap.parse_args()
    if args.one:  # one measured run, in this fresh process
        base = tempfile.mkdtemp(prefix="muster-async-bench-")
        print(json.dumps(run(args.one, args, base)), flush=True)
        return
    passed = [f"--mb={args.mb}", f"--checkpoints={args.checkpoints}", f"--every={args.every}"]
    if args.storage_path:
        passed.append(f"--storage-path={args.storage_path}")
    runs: dict[str, list[dict]] = {"sync": [], "async": []}
    for rep, mode in interleaved(["sync", "async"], args.repeat):
        row = run_child(__file__, [mode, *passed])
        runs[mode].append(row)
        print(f"[{rep + 1}/{args.repeat}] {mode:5s} stall median {row['stall_median_s']:.3f} s, "
              f"max {row['stall_max_s']:.3f} s, wall {row['wall_s']:.1f} s", flush=True)
    table = {mode: {key: summary([r[key] for r in rows])
                    for key in ("stall_median_s", "stall_max_s", "torch_save_median_s", "wall_s")}
             for mode, rows in runs.items()}
    print("\nmedian over runs (min-max):")
    for mode, t in table.items():
        print(f"  {mode:5s} stall per checkpoint {fmt(t['stall_median_s'], digits=3)}; worst stall "
              f"{fmt(t['stall_max_s'], digits=3)}; torch.save {fmt(t['torch_save_median_s'])}; "
              f"wall {fmt(t['wall_s'], digits=1)}")
    results = os.path.join(os.path.dirname(__file__), "results")
    os.makedirs(results, exist_ok=True)
    path = os.path.join(results, f"async_{int(time.time())}.json")
    with open(path, "w") as f:
        json.dump({"mb": args.mb, "checkpoints": args.checkpoints, "repeat": args.repeat, "summary": table,
                   "runs": runs}, f, indent=1)
    print(f"results: {path}")


if __name__ == "__main__":
    main()
