"""Kill soak for the commit protocol: whole-or-absent checkpoints under random SIGKILLs.

A 2-worker DDP job (MLP with dropout, Adam, a shuffled prepared loader) reports
every ``--every`` steps; *each* rank passes its own shard file, rank 0 the
model state too.  The ranks are out of step at every report (each sleeps a
random, rank-specific time before it, and rank 0's saves are slower), and the
upload mode changes per rank and round (sync / async).  A killer thread in
the driver SIGKILLs a random worker ``--kills`` times at random moments, so
kills land mid-step, mid-save, mid-upload and between a rank's report and the
other's.

At the end it checks:

* every committed checkpoint is whole: both shards and the model state, all of
  the same step, the manifest lists both ranks and verifies (sizes, CRC32);
* nothing stale: each shard's content is the step of its own round;
* every attempt resumed from a committed checkpoint (or the start);
* the final weights equal an uninterrupted run's bit for bit.

    python benchmarks/commit_soak.py --kills 20

Exit status 0 when every check passed. The result of the run recorded in
docs/fault-tolerance.md was taken on a 2-core machine shared with other work.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time

import torch

STEPS_PER_EPOCH = 24
EPOCHS = 4


def train_loop(config):
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    import muster.train as train
    from muster.train import Checkpoint
    from muster.train.torch import prepare_data_loader, prepare_model

    ctx = train.get_context()
    rank, attempt = ctx.get_world_rank(), ctx.get_attempt()
    with open(os.path.join(config["dir"], f"pid_{attempt}_{rank}"), "w") as f:
        f.write(str(os.getpid()))
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    rows = STEPS_PER_EPOCH * 2 * config["batch"]
    X, Y = torch.randn(rows, 32, generator=g), torch.randint(0, 4, (rows,), generator=g)
    model = prepare_model(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 4)))
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
    if rank == 0:
        with open(os.path.join(config["dir"], "resumed.log"), "a") as f:
            f.write(f"{attempt} {os.path.basename(ckpt.path) if ckpt else '-'}\n")
    jitter = random.Random(1000 * attempt + rank)  # its own generator: the training RNG is untouched
    log = open(os.path.join(config["dir"], f"steps_{rank}.log"), "a", buffering=1)
    for epoch in range(start_epoch, EPOCHS):
        for x, y in loader:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            step += 1
            log.write(f"{attempt} {step}\n")
            if step % config["every"]:
                continue
            if config["jitter"]:
                time.sleep(jitter.uniform(0, 0.05) + (0.03 if rank == 0 else 0.0))
            folder = tempfile.mkdtemp()
            torch.save({"step": step, "rank": rank}, os.path.join(folder, f"shard_{rank}.pt"))
            if rank == 0:
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch, "step": step},
                           os.path.join(folder, "state.pt"))
            mode = "async" if (step // config["every"] + rank) % 2 else "sync"
            train.report({"loss": loss.item(), "step": step}, checkpoint=Checkpoint.from_directory(folder),
                         checkpoint_upload_mode=mode)
    if rank == 0:
        torch.save(model.module.state_dict(), os.path.join(config["dir"], "final.pt"))


def _fit(workdir: str, args: argparse.Namespace, kills: int, jitter: bool):
    from muster.train import FailureConfig, RunConfig, ScalingConfig
    from muster.train.torch import TorchTrainer

    os.makedirs(workdir, exist_ok=True)
    return TorchTrainer(
        train_loop,
        train_loop_config={"dir": workdir, "every": args.every, "batch": args.batch, "jitter": jitter},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=os.path.join(workdir, "runs"), verbose=0,
                             failure_config=FailureConfig(max_failures=kills)),
    ).fit()


def _steps(workdir: str, attempt: int) -> int:
    total = 0
    for path in glob.glob(os.path.join(workdir, "steps_*.log")):
        total = max(total, sum(1 for line in open(path) if line.split()[0] == str(attempt)))
    return total


def soak(workdir: str, args: argparse.Namespace) -> dict:
    kill_log: list[tuple[int, int]] = []
    stop = threading.Event()

    def killer() -> None:
        rng = random.Random(args.seed)
        for attempt in range(args.kills):
            target = rng.randint(1, args.every * 2)  # anywhere: mid-step, mid-save, mid-upload
            deadline = time.monotonic() + 120
            while not stop.is_set() and _steps(workdir, attempt) < target and time.monotonic() < deadline:
                time.sleep(0.005)
            if stop.is_set() or time.monotonic() >= deadline:
                return
            time.sleep(rng.uniform(0, 0.05))
            rank = rng.randint(0, 1)
            try:
                pid = int(open(os.path.join(workdir, f"pid_{attempt}_{rank}")).read())
                os.kill(pid, signal.SIGKILL)
                kill_log.append((attempt, rank))
            except (OSError, ValueError):
                return

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    t0 = time.time()
    result = _fit(workdir, args, args.kills, jitter=True)
    stop.set()
    return {"result": result, "kills": kill_log, "wall_s": time.time() - t0}


def check(run_path: str, workdir: str) -> list[str]:
    from muster.train.storage import MANIFEST, Storage

    problems = []
    storage = Storage.at(run_path)
    names = sorted(n for n in os.listdir(run_path) if n.startswith("checkpoint_"))
    for name in names:
        folder = os.path.join(run_path, name)
        if not os.path.exists(os.path.join(folder, MANIFEST)):
            continue  # not a checkpoint (never happens on a local disk: the rename is atomic)
        manifest = json.load(open(os.path.join(folder, MANIFEST)))
        step = manifest["metrics"]["step"]
        if manifest["ranks"] != [0, 1]:
            problems.append(f"{name}: ranks {manifest['ranks']}")
        for rank in (0, 1):
            path = os.path.join(folder, f"shard_{rank}.pt")
            if not os.path.exists(path):
                problems.append(f"{name}: shard_{rank}.pt missing (partial checkpoint)")
            elif torch.load(path)["step"] != step:
                problems.append(f"{name}: shard_{rank}.pt is from step {torch.load(path)['step']}, not {step} (stale)")
        if not os.path.exists(os.path.join(folder, "state.pt")) or torch.load(
            os.path.join(folder, "state.pt"), weights_only=False
        )["step"] != step:
            problems.append(f"{name}: state.pt missing or of another step")
        bad = storage.verify(folder)
        if bad:
            problems.append(f"{name}: {bad}")
    for line in open(os.path.join(workdir, "resumed.log")):
        attempt, name = line.split()
        if name != "-" and name not in names:
            problems.append(f"attempt {attempt} resumed from {name}, which is not a committed checkpoint")
    if os.path.exists(os.path.join(run_path, ".staging")) and os.listdir(os.path.join(run_path, ".staging")):
        problems.append(".staging not empty at the end")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--every", type=int, default=4, help="report (with checkpoint files) every N steps")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import muster

    muster.init()
    with tempfile.TemporaryDirectory() as root:
        out = soak(os.path.join(root, "soak"), args)
        _fit(os.path.join(root, "clean"), args, 0, jitter=False)
        a = torch.load(os.path.join(root, "clean", "final.pt"))
        b = torch.load(os.path.join(root, "soak", "final.pt"))
        problems = check(out["result"].path, os.path.join(root, "soak"))
        identical = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
        if not identical:
            problems.append("final weights differ from the uninterrupted run")
        resumed = [line.split()[1] for line in open(os.path.join(root, "soak", "resumed.log"))]
        summary = {
            "kills": len(out["kills"]),
            "killed_ranks": [r for _, r in out["kills"]],
            "attempts": len(resumed),
            "resumed_from": resumed,
            "committed": len([n for n in os.listdir(out["result"].path) if n.startswith("checkpoint_")]),
            "bit_identical": identical,
            "problems": problems,
            "wall_s": round(out["wall_s"], 1),
        }
    print(json.dumps(summary, indent=1))
    muster.shutdown()
    return 0 if not problems and len(out["kills"]) >= args.kills else 1


if __name__ == "__main__":
    sys.exit(main())
