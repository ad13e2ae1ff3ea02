"""Recovery time and a kill soak for muster's fault tolerance.

One DDP job (MLP 784-256-10 on synthetic data, 2 workers, gloo, a checkpoint
every ``--every`` steps from rank 0) runs while a killer thread SIGKILLs a
random worker ``--kills`` times, at random moments.  Rank 0 logs every step
with a wall-clock time, so the script measures, for each kill:

* recovery time: SIGKILL sent -> first training step of the next attempt;
* where training resumed vs the last durable checkpoint -- the newest round
  whose ``report()`` had returned on every rank before the kill (steps redone
  beyond it must be 0: only the steps after it are repeated).

It then runs the same job uninterrupted and checks the final weights are
equal bit for bit (the soak).  ``--ray`` adds Ray Train's recovery time for
the same job when ``ray`` is installed.

    python benchmarks/recovery_bench.py --kills 8
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import threading
import time

import torch

STEPS_PER_EPOCH = 60
EPOCHS = 4


def train_loop(config):
    import glob

    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    if config.get("api") == "ray":
        import ray.train as train
        from ray.train import Checkpoint
        from ray.train.torch import prepare_data_loader, prepare_model
    else:
        import muster.train as train
        from muster.train import Checkpoint
        from muster.train.torch import prepare_data_loader, prepare_model

    ctx = train.get_context()
    rank = ctx.get_world_rank()
    attempt = len(glob.glob(os.path.join(config["dir"], f"pid_*_{rank}")))  # works on either engine
    with open(os.path.join(config["dir"], f"pid_{attempt}_{rank}"), "w") as f:
        f.write(str(os.getpid()))
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    rows = STEPS_PER_EPOCH * 2 * config["batch"]
    X, Y = torch.randn(rows, 784, generator=g), torch.randint(0, 10, (rows,), generator=g)
    model = prepare_model(nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Dropout(0.1), nn.Linear(256, 10)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = prepare_data_loader(DataLoader(TensorDataset(X, Y), batch_size=config["batch"], shuffle=True))
    start_epoch, step = 0, 0
    ckpt = train.get_checkpoint()
    if ckpt:
        with ckpt.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"))
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start_epoch, step = state["epoch"], state["step"]
    log = open(os.path.join(config["dir"], "steps.log"), "a", buffering=1) if rank == 0 else None
    reports = open(os.path.join(config["dir"], "reports.log"), "a", buffering=1)
    for epoch in range(start_epoch, EPOCHS):
        for x, y in loader:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            step += 1
            if log:
                log.write(f"{attempt} {step} {time.time()}\n")
            if step % config["every"] == 0:
                if rank == 0:
                    with tempfile.TemporaryDirectory() as d:
                        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch,
                                    "step": step}, os.path.join(d, "state.pt"))
                        train.report({"loss": loss.item(), "step": step}, checkpoint=Checkpoint.from_directory(d))
                else:
                    train.report({"loss": loss.item(), "step": step})
                reports.write(f"{rank} {step} {time.time()}\n")  # report() has returned on this rank
    if rank == 0:
        torch.save(model.module.state_dict(), os.path.join(config["dir"], "final.pt"))


def run_muster(workdir: str, kills: int, every: int, batch: int, seed: int, api: str = "muster") -> dict:
    if api == "ray":
        import ray
        from ray.train import FailureConfig, RunConfig, ScalingConfig
        from ray.train.torch import TorchTrainer

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    else:
        from muster.train import FailureConfig, RunConfig, ScalingConfig
        from muster.train.torch import TorchTrainer

    os.makedirs(workdir, exist_ok=True)
    kill_log: list[tuple[int, float, int]] = []  # (attempt killed, time, rank)
    stop = threading.Event()

    def killer() -> None:
        rng = random.Random(seed)
        for attempt in range(kills):
            # wait until this attempt has trained a random number of steps
            target = rng.randint(every // 2, every * 3)
            while not stop.is_set():
                lines = _steps(workdir)
                mine = [s for a, s, _ in lines if a == attempt]
                if len(mine) >= target:
                    break
                time.sleep(0.01)
            if stop.is_set():
                return
            rank = rng.randint(0, 1)
            pid = int(open(os.path.join(workdir, f"pid_{attempt}_{rank}")).read())
            kill_log.append((attempt, time.time(), rank))
            os.kill(pid, signal.SIGKILL)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    t0 = time.time()
    extra = {"verbose": 0} if api == "muster" else {}
    result = TorchTrainer(
        train_loop,
        train_loop_config={"dir": workdir, "every": every, "batch": batch, "api": api},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=os.path.join(workdir, "runs"),
                             failure_config=FailureConfig(max_failures=kills), **extra),
    ).fit()
    stop.set()
    wall = time.time() - t0
    steps = _steps(workdir)
    returned = _steps(workdir, "reports.log")  # (rank, step, time report() returned)
    recoveries, redone_beyond = [], []
    for attempt, t_kill, _rank in kill_log:
        after = [(s, t) for a, s, t in steps if a == attempt + 1]
        if not after:
            continue
        recoveries.append(after[0][1] - t_kill)
        # durable: the newest round whose report() had returned on both ranks before the kill
        done = [{s for r, s, t in returned if r == rank and t <= t_kill} for rank in (0, 1)]
        durable = max(done[0] & done[1], default=0)
        resumed_at = after[0][0] - 1  # the step count it resumed from
        redone_beyond.append(durable - resumed_at)  # > 0 would mean a durable checkpoint was lost
    return {
        "wall_s": wall,
        "kills": len(kill_log),
        "recovery_s": recoveries,
        "steps_redone_beyond_last_checkpoint": redone_beyond,
        "final_step": result.metrics["step"],
    }


def run_clean(workdir: str, every: int, batch: int) -> float:
    from muster.train import RunConfig, ScalingConfig
    from muster.train.torch import TorchTrainer

    os.makedirs(workdir, exist_ok=True)
    t0 = time.time()
    TorchTrainer(
        train_loop,
        train_loop_config={"dir": workdir, "every": every, "batch": batch},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=os.path.join(workdir, "runs"), verbose=0),
    ).fit()
    return time.time() - t0


def _steps(workdir: str, name: str = "steps.log") -> list[tuple[int, int, float]]:
    path = os.path.join(workdir, name)
    if not os.path.exists(path):
        return []
    out = []
    for line in open(path):
        parts = line.split()
        if len(parts) == 3:
            out.append((int(parts[0]), int(parts[1]), float(parts[2])))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=8)
    ap.add_argument("--every", type=int, default=20, help="checkpoint every N steps")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ray", action="store_true", help="also measure Ray Train's recovery (needs ray)")
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="muster-recovery-")
    ray_report = None
    if args.ray:
        ray_soak = run_muster(os.path.join(base, "ray"), min(args.kills, 3), args.every, args.batch, args.seed, "ray")
        ray_report = {"wall_s": ray_soak["wall_s"], "kills": ray_soak["kills"], "recovery_s": ray_soak["recovery_s"],
                      "recovery_median_s": statistics.median(ray_soak["recovery_s"]) if ray_soak["recovery_s"] else None}
    soak = run_muster(os.path.join(base, "soak"), args.kills, args.every, args.batch, args.seed)
    clean_wall = run_clean(os.path.join(base, "clean"), args.every, args.batch)
    a = torch.load(os.path.join(base, "soak", "final.pt"))
    b = torch.load(os.path.join(base, "clean", "final.pt"))
    identical = all(torch.equal(a[k], b[k]) for k in a)
    rec = soak["recovery_s"]
    report = {
        **soak,
        "clean_wall_s": clean_wall,
        "final_weights_identical_to_uninterrupted": identical,
        "recovery_median_s": statistics.median(rec) if rec else None,
        "recovery_max_s": max(rec) if rec else None,
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "ray": ray_report,
    }
    print(json.dumps(report, indent=1))
    out = os.path.join(os.path.dirname(__file__), "results")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"recovery_{int(time.time())}.json"), "w") as f:
        json.dump(report, f, indent=1)
    sys.exit(0 if identical and all(r <= 0 for r in soak["steps_redone_beyond_last_checkpoint"]) else 1)


if __name__ == "__main__":
    main()
