"""The benchmark job under plain torchrun DDP (the baseline).

    python -m torch.distributed.run --nproc_per_node=2 benchmarks/jobs/torchrun_job.py --out /tmp/x --ckpt-dir /tmp/y

Same model, data, loop and checkpoints as trainer_job.py (muster / Ray Train);
lines marked ``# bench`` only record timestamps for ddp_bench.py.
"""

import time

T_START = time.time()  # bench: this worker script's first line

import argparse
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def cpu_wait():  # bench: seconds this thread has spent runnable but waiting for a CPU
    with open("/proc/thread-self/schedstat") as f:  # bench
        return int(f.read().split()[1]) / 1e9  # bench


def mark(out, name, t=None):  # bench: append one timestamp to out/marks.txt
    with open(os.path.join(out, "marks.txt"), "a") as f:
        f.write(f"{name} {time.time() if t is None else t!r}\n")


def main(config):
    gpu = config["gpu"]
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if gpu else "gloo")
    rank = dist.get_rank()
    out = config["out"]  # bench
    if rank == 0:  # bench
        mark(out, "worker_start", T_START)  # bench
        mark(out, "train_func_start")  # bench

    g = torch.Generator().manual_seed(0)
    x = torch.randn(config["rows"], 784, generator=g)
    y = torch.randint(0, 10, (config["rows"],), generator=g)
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=config["batch_size"], sampler=sampler)

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    )
    model = model.to(device)
    if dist.get_world_size() > 1 and config["strategy"] == "fsdp":
        fully_shard(model)  # FSDP2 over all ranks (the default mesh)
    elif dist.get_world_size() > 1:  # one worker trains the bare model (as prepare_model leaves it)
        model = DistributedDataParallel(model, device_ids=[device] if gpu else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    amp_dtype = torch.float16 if gpu else torch.bfloat16
    scaler = torch.amp.GradScaler("cuda") if config["amp"] and gpu else None
    if rank == 0:  # bench
        mark(out, "setup_done")  # bench

    step_times, step_cpu, step_wait = [], [], []  # bench
    for epoch in range(config["epochs"]):
        loader.sampler.set_epoch(epoch)
        running_loss = 0.0
        epoch_times, epoch_cpu, epoch_wait = [], [], []  # bench
        last, last_cpu, last_wait = time.perf_counter(), time.thread_time(), cpu_wait()  # bench
        for inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            optimizer.zero_grad()
            with torch.autocast(device.type, dtype=amp_dtype, enabled=config["amp"]):
                outputs = model(inputs)
            loss = F.cross_entropy(outputs.float(), targets)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
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
            d = os.path.join(config["ckpt_dir"], f"checkpoint_{epoch:06d}")
            os.makedirs(d, exist_ok=True)
            torch.save(
                {"model": getattr(model, "module", model).state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                os.path.join(d, "checkpoint.pt"),
            )
            print(f"epoch {epoch}: {metrics}", flush=True)

    if rank == 0:  # bench
        import json  # bench

        mark(out, "train_end")  # bench

        with open(os.path.join(out, "steps.json"), "w") as f:  # bench
            json.dump({"step_s": step_times, "step_cpu_s": step_cpu, "step_wait_s": step_wait,  # bench
                       "threads": torch.get_num_threads(),  # bench
                       "loss": metrics["loss"]}, f)  # bench
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=60_000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--out", required=True)
    p.add_argument("--ckpt-dir", default=tempfile.gettempdir())
    p.add_argument("--gpu", action="store_true", help="one GPU per worker, nccl")
    p.add_argument("--strategy", choices=["ddp", "fsdp"], default="ddp")
    p.add_argument("--amp", action="store_true", help="autocast (float16 + GradScaler on CUDA, bfloat16 on CPU)")
    args = p.parse_args()
    main({"rows": args.rows, "epochs": args.epochs, "batch_size": args.batch_size, "out": args.out,
          "ckpt_dir": args.ckpt_dir, "gpu": args.gpu,
          "strategy": args.strategy, "amp": args.amp})
