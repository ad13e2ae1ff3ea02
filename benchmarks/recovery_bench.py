"""Recovery time and a kill soak for muster's fault tolerance.

One DDP job (MLP 784-256-10 on synthetic data, 2 workers, gloo, a checkpoint
every ``--every`` steps from rank 0) runs while a killer thread SIGKILLs a
random worker ``--kills`` times, at random moments.  Rank 0 logs every step
with a wall-clock time, so the script measures, for each kill:

* recovery time: SIGKILL sent -> first training step of the next attempt;
* where training resumed vs the last durable checkpoint -- the newest round
  whose ``report()`` had returned on every rank before the kill (steps redone
  beyond it must be 0: only the steps after it are repeated).

It also runs the same job uninterrupted and checks each killed run's final
weights against it, bit for bit.  ``--ray`` measures Ray Train on the same job
with the same kills (same count, same seeded moments and ranks): every run is
a fresh driver process, and the frameworks are interleaved, order rotating
each repeat.  Figures are medians over every kill of every repeat, with the
spread.

    python benchmarks/recovery_bench.py --kills 3 --repeat 3 --ray
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench import fmt, interleaved, run_child, summary  # noqa: E402

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

        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # a new local cluster
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
    ap.add_argument("--one", choices=["muster", "ray", "clean"], help=argparse.SUPPRESS)
    ap.add_argument("--workdir", help=argparse.SUPPRESS)
    ap.add_argument("--kills", type=int, default=3, help="kills per run, the same for every framework")
    ap.add_argument("--repeat", type=int, default=3, help="runs per framework (interleaved)")
    ap.add_argument("--every", type=int, default=20, help="checkpoint every N steps")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ray", action="store_true", help="also measure Ray Train on the same job (needs ray)")
    args = ap.parse_args()
    if args.one:  # one run, in this fresh process
        if args.one == "clean":
            row: dict = {"wall_s": run_clean(args.workdir, args.every, args.batch)}
        else:
            row = run_muster(args.workdir, args.kills, args.every, args.batch, args.seed, args.one)
        print(json.dumps(row), flush=True)
        return
    base = tempfile.mkdtemp(prefix="muster-recovery-")
    common = [f"--kills={args.kills}", f"--every={args.every}", f"--batch={args.batch}", f"--seed={args.seed}"]
    clean_dir = os.path.join(base, "clean")
    clean = run_child(__file__, ["clean", f"--workdir={clean_dir}", *common])
    reference = torch.load(os.path.join(clean_dir, "final.pt"))
    frameworks = ["muster", "ray"] if args.ray else ["muster"]
    runs: dict[str, list[dict]] = {fw: [] for fw in frameworks}
    for rep, fw in interleaved(frameworks, args.repeat):
        workdir = os.path.join(base, f"{fw}-{rep}")
        row = run_child(__file__, [fw, f"--workdir={workdir}", *common])
        final = torch.load(os.path.join(workdir, "final.pt"))
        final = {k.removeprefix("module."): v for k, v in final.items()}
        row["final_weights_identical_to_uninterrupted"] = all(torch.equal(final[k], reference[k]) for k in reference)
        runs[fw].append(row)
        print(f"[{rep + 1}/{args.repeat}] {fw:6s} kills {row['kills']}, recovery "
              f"{', '.join(f'{r:.2f}' for r in row['recovery_s'])} s, redone beyond durable "
              f"{row['steps_redone_beyond_last_checkpoint']}, identical weights "
              f"{row['final_weights_identical_to_uninterrupted']}, wall {row['wall_s']:.1f} s", flush=True)
    report: dict = {"kills_per_run": args.kills, "repeat": args.repeat, "clean_wall_s": clean["wall_s"],
                    "torch": torch.__version__, "cpus": os.cpu_count(), "frameworks": {}}
    for fw, rows in runs.items():
        rec = summary([r for row in rows for r in row["recovery_s"]])
        redone = [d for row in rows for d in row["steps_redone_beyond_last_checkpoint"]]
        report["frameworks"][fw] = {
            "kills": sum(r["kills"] for r in rows),
            "recovery_s": rec,
            "steps_redone_beyond_last_durable": redone,
            "durable_checkpoints_lost": sum(1 for d in redone if d > 0),
            "identical_final_weights": [r["final_weights_identical_to_uninterrupted"] for r in rows],
            "wall_s": summary([r["wall_s"] for r in rows]),
        }
        print(f"{fw:6s} SIGKILL -> next step {fmt(rec)} over {report['frameworks'][fw]['kills']} kills; "
              f"durable checkpoints lost {report['frameworks'][fw]['durable_checkpoints_lost']}; "
              f"run wall {fmt(report['frameworks'][fw]['wall_s'], digits=1)} (uninterrupted {clean['wall_s']:.1f} s)")
    out = os.path.join(os.path.dirname(__file__), "results")
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"recovery_{int(time.time())}.json")
    with open(path, "w") as f:
        json.dump({**report, "runs": runs}, f, indent=1)
    print(f"results: {path}")
    ok = all(d <= 0 for d in report["frameworks"]["muster"]["steps_redone_beyond_last_durable"])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
