"""The benchmark job, written as a Ray Train user would write it -- and run on
muster or on Ray by switching the imports, which is all a port takes.

An MLP 784-512-512-10 on synthetic data, DDP on N CPU workers, Adam, one
checkpoint per epoch.  Lines marked ``# bench`` only record timestamps for
benchmarks/ddp_bench.py; everything else is the user's script.

    python benchmarks/jobs/trainer_job.py --api muster --out /tmp/x --storage /tmp/y
    python benchmarks/jobs/trainer_job.py --api ray --out /tmp/x --storage /tmp/y
"""

import time

T_START = time.time()  # bench: the driver script's first line

import argparse
import os
import tempfile

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import sys

API = sys.argv[sys.argv.index("--api") + 1] if "--api" in sys.argv else "muster"  # bench: which engine
if API == "ray":
    import ray
    import ray.train as train
    from ray.train import Checkpoint, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer, prepare_data_loader, prepare_model
    from ray.train.torch import accelerate, backward, prepare_optimizer
else:
    import muster.train as train
    from muster.train import Checkpoint, RunConfig, ScalingConfig
    from muster.train.torch import TorchTrainer, prepare_data_loader, prepare_model
    from muster.train.torch import accelerate, backward, prepare_optimizer


def cpu_wait():  # bench: seconds this thread has spent runnable but waiting for a CPU
    with open("/proc/thread-self/schedstat") as f:  # bench
        return int(f.read().split()[1]) / 1e9  # bench


def mark(out, name, t=None):  # bench: append one timestamp to out/marks.txt
    with open(os.path.join(out, "marks.txt"), "a") as f:
        f.write(f"{name} {time.time() if t is None else t!r}\n")


def train_func(config):
    rank = train.get_context().get_world_rank()
    out = config["out"]  # bench
    if rank == 0:  # bench
        mark(out, "train_func_start")  # bench

    g = torch.Generator().manual_seed(0)
    x = torch.randn(config["rows"], 784, generator=g)
    y = torch.randint(0, 10, (config["rows"],), generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=config["batch_size"], shuffle=True)
    loader = prepare_data_loader(loader)

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    )
    if config["amp"]:
        accelerate(amp=True)  # autocast: float16 + GradScaler on CUDA, bfloat16 on CPU
    model = prepare_model(model, parallel_strategy=config["strategy"])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    if config["amp"]:  # Ray 2.60 refuses these three (deprecated): --amp runs on muster only
        optimizer = prepare_optimizer(optimizer)
    if rank == 0:  # bench
        mark(out, "setup_done")  # bench

    step_times, step_cpu, step_wait = [], [], []  # bench
    for epoch in range(config["epochs"]):
        loader.sampler.set_epoch(epoch)
        running_loss = 0.0
        epoch_times, epoch_cpu, epoch_wait = [], [], []  # bench
        last, last_cpu, last_wait = time.perf_counter(), time.thread_time(), cpu_wait()  # bench
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(inputs), targets)
            backward(loss) if config["amp"] else loss.backward()
            optimizer.step()
            running_loss += loss.item()
            now, now_cpu, now_wait = time.perf_counter(), time.thread_time(), cpu_wait()  # bench
            if rank == 0 and not step_times and not epoch_times:  # bench
                mark(out, "first_step")  # bench
            epoch_times.append(now - last)  # bench
            epoch_cpu.append(now_cpu - last_cpu)  # bench
            epoch_wait.append(now_wait - last_wait)  # bench
            last, last_cpu, last_wait = now, now_cpu, now_wait  # bench
        step_times.append(epoch_times)  # bench
        step_cpu.append(epoch_cpu)  # bench
        step_wait.append(epoch_wait)  # bench

        metrics = {"loss": running_loss / len(loader), "epoch": epoch}
        if rank == 0:
            with tempfile.TemporaryDirectory() as d:
                torch.save(
                    {"model": getattr(model, "module", model).state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                    os.path.join(d, "checkpoint.pt"),
                )
                train.report(metrics, checkpoint=Checkpoint.from_directory(d))
        else:
            train.report(metrics)

    if rank == 0:  # bench
        import json  # bench

        mark(out, "train_end")  # bench

        with open(os.path.join(out, "steps.json"), "w") as f:  # bench
            json.dump({"step_s": step_times, "step_cpu_s": step_cpu, "step_wait_s": step_wait,  # bench
                       "threads": torch.get_num_threads(),  # bench
                       "loss": metrics["loss"]}, f)  # bench


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--api", choices=["muster", "ray"], default="muster")
    p.add_argument("--rows", type=int, default=60_000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", required=True)
    p.add_argument("--storage", default=tempfile.gettempdir())
    p.add_argument("--gpu", action="store_true", help="one GPU per worker (nccl)")
    p.add_argument("--strategy", choices=["ddp", "fsdp"], default="ddp")
    p.add_argument("--amp", action="store_true", help="mixed precision (accelerate(amp=True))")
    args = p.parse_args()
    mark(args.out, "driver_start", T_START)  # bench
    mark(args.out, "imports_done")  # bench

    if API == "ray":
        ray.init()
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"rows": args.rows, "epochs": args.epochs, "batch_size": args.batch_size, "out": args.out,
                           "strategy": args.strategy, "amp": args.amp},
        scaling_config=ScalingConfig(num_workers=args.workers, use_gpu=args.gpu),
        run_config=RunConfig(storage_path=args.storage, **({"verbose": 0} if API == "muster" else {})),
    )
    result = trainer.fit()
    mark(args.out, "fit_done")  # bench
    print(f"{API}: final metrics {result.metrics}, checkpoint {result.checkpoint}")
