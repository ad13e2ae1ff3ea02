"""Training stall per checkpoint: ``report(..., checkpoint_upload_mode="sync")`` vs ``"async"``.

Each of 2 workers trains a small model but checkpoints a ~500 MB state
(rank 0 saves it with torch.save into a fresh temporary folder, as users do)
every few steps.  The stall is how long ``train.report`` blocks the training
loop; saving the file (torch.save) is the user's own cost and is timed
separately.  The run's wall time shows whether async uploads slow the steps
they overlap with.

    python benchmarks/async_checkpoint_bench.py --mb 500 --checkpoints 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time


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
    ap.add_argument("--mb", type=int, default=500, help="checkpoint size in MB")
    ap.add_argument("--checkpoints", type=int, default=4)
    ap.add_argument("--every", type=int, default=20, help="steps between checkpoints")
    ap.add_argument("--storage-path", default=None, help="default: a temporary local folder")
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="muster-async-bench-")
    rows = [run("sync", args, base), run("async", args, base)]
    print(f"{'mode':6} {'stall median':>13} {'stall max':>10} {'torch.save':>11} {'wall':>7}")
    for r in rows:
        print(f"{r['mode']:6} {r['stall_median_s']:12.3f}s {r['stall_max_s']:9.3f}s "
              f"{r['torch_save_median_s']:10.3f}s {r['wall_s']:6.1f}s")
    results = os.path.join(os.path.dirname(__file__), "results")
    os.makedirs(results, exist_ok=True)
    with open(os.path.join(results, f"async_{int(time.time())}.json"), "w") as f:
        json.dump({"mb": args.mb, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
