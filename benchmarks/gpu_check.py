"""muster's GPU paths, run for real on a machine with a CUDA GPU: what worked, what failed, how fast.

    python benchmarks/gpu_check.py                          # every scenario, one line each
    python benchmarks/gpu_check.py --scenarios fork_facts   # some of them

Every scenario's full result goes to one JSON file in benchmarks/results/
(``--results-dir``), with the machine's GPUs and the muster commit.

The CPU test suite cannot reach these paths (no GPU in CI), so this script
drives them end to end, each scenario in its own driver process (bounded by
``--timeout``):

* ``fork_facts`` (plain torch, no muster): which of ``import torch``,
  ``torch.cuda.device_count()`` and ``torch.cuda.is_available()`` start the
  CUDA driver in a process (``libcuda`` mapped), and whether a child forked
  after each can still use the GPU.  muster forks its worker launcher from
  the driver when that is safe; this is what "safe" has to mean.
* ``train_amp_fp16``: ``TorchTrainer`` with one worker and ``use_gpu=True``:
  the worker's ``CUDA_VISIBLE_DEVICES``, ``get_device()``, the process
  group's backend (nccl), the model and batches on the GPU, float16 autocast
  with a ``GradScaler`` (``accelerate(amp=True)`` + ``prepare_optimizer`` +
  ``backward``), a checkpoint of GPU tensors each epoch, then a second run
  resumed from it that reloads them onto the GPU.
* ``train_after_is_available`` / ``train_after_device_count`` /
  ``train_after_cuda_init``: the same run from a driver that called
  ``torch.cuda.is_available()`` or ``torch.cuda.device_count()`` (as most
  scripts do at the top) or put a tensor on the GPU first (then the launcher
  must be a fresh interpreter, not a fork).
* ``two_ranks_one_gpu_nccl`` / ``..._gloo`` / ``fsdp_two_ranks_one_gpu_gloo``:
  two workers sharing one GPU (``resources_per_worker={"GPU": 0.5}``): NCCL
  refuses two ranks on one device, so muster must say so at once and name
  the fix; with gloo, DDP (and FSDP2) on CUDA tensors must train.
* ``tasks_gpu_ids``: tasks with and without ``num_gpus``: the
  ``CUDA_VISIBLE_DEVICES`` each sees and ``muster.get_gpu_ids()``.
* ``tune_half_gpu_trials``: four Tune trials of ``tune.with_resources(fn,
  {"gpu": 0.5})`` on one GPU: each trains on cuda, and two run at a time
  (their start and end times overlap in pairs, never three).
* ``data_map_batches_gpu``: ``map_batches`` with a callable class,
  ``num_gpus=1`` and ``concurrency=1``: the actor computes on cuda and every
  row comes back, in order, with the right values.
* ``data_map_batches_fn_gpu``: the same with a plain function and
  ``num_gpus=1`` (pooled task workers that hold the GPU): each batch runs on
  cuda with ``CUDA_VISIBLE_DEVICES`` set, and every row comes back right.
* ``serve_gpu_replica``: a Serve deployment with ``ray_actor_options=
  {"num_gpus": 1}`` answers HTTP requests (httpx) computed on cuda, in a
  replica that sees ``CUDA_VISIBLE_DEVICES``; then a second app asking for
  two GPUs, which this one-GPU machine can never hold, must fail
  ``serve.run`` at once, naming the GPUs asked for and those that exist.

Launch-to-first-step and step time against torchrun on the GPU come from
``ddp_bench.py --gpu --workers 1``; this script checks behaviour.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))

SCENARIOS = (
    "fork_facts",
    "train_amp_fp16",
    "train_after_is_available",
    "train_after_device_count",
    "train_after_cuda_init",
    "two_ranks_one_gpu_nccl",
    "two_ranks_one_gpu_gloo",
    "fsdp_two_ranks_one_gpu_gloo",
    "tasks_gpu_ids",
    "tune_half_gpu_trials",
    "data_map_batches_gpu",
    "data_map_batches_fn_gpu",
    "serve_gpu_replica",
)


# -- what runs in each worker ------------------------------------------------------------------
def train_func(config: dict) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    import muster.train as train
    from muster.train import Checkpoint
    from muster.train.torch import accelerate, backward, get_device, prepare_data_loader, prepare_model, prepare_optimizer
    from muster.train.torch import amp as amp_mod

    ctx = train.get_context()
    rank = ctx.get_world_rank()
    if config.get("amp"):
        accelerate(amp=True, amp_dtype=getattr(torch, config["amp"]))
    device = get_device()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8192, 64, generator=g)
    y = x @ torch.randn(64, 1, generator=g)
    loader = prepare_data_loader(DataLoader(TensorDataset(x, y), batch_size=256, shuffle=True))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    model = prepare_model(model, parallel_strategy=config.get("strategy", "ddp"))
    optimizer = prepare_optimizer(torch.optim.Adam(model.parameters(), lr=3e-3))
    bare = getattr(model, "module", model)

    start = 0
    restored = None
    ckpt = train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"), map_location=device, weights_only=True)
        bare.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
        restored = str(next(iter(state["model"].values())).device)

    for epoch in range(start, start + config["epochs"]):
        t0 = time.perf_counter()
        for xb, yb in loader:
            optimizer.zero_grad()
            out = model(xb)
            loss = F.mse_loss(out, yb)
            backward(loss)
            optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        metrics = {
            "epoch": epoch,
            "loss": float(loss.detach()),
            "epoch_s": time.perf_counter() - t0,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "device": str(device),
            "gpu_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
            "param_device": str(next(model.parameters()).device),
            "batch_device": str(xb.device),
            "backend": dist.get_backend() if dist.is_initialized() else None,
            "world_size": ctx.get_world_size(),
            "out_dtype": str(out.dtype),
            "scaler": type(amp_mod._settings.scaler).__name__ if amp_mod._settings.scaler is not None else None,
            "wrapped": type(model).__name__,
            "restored_on": restored,
        }
        if config.get("checkpoint") and rank == 0:
            with tempfile.TemporaryDirectory() as d:
                torch.save({"model": bare.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                           os.path.join(d, "state.pt"))
                train.report(metrics, checkpoint=Checkpoint.from_directory(d))
        else:
            train.report(metrics)


def tune_trial(config: dict) -> None:
    """A Tune trial holding half a GPU: a few steps of a small regression on cuda, with its times."""
    import torch

    from muster import tune

    start = time.time()
    device = torch.device("cuda")
    g = torch.Generator(device="cuda").manual_seed(config["seed"])
    x = torch.randn(4096, 32, device=device, generator=g)
    w = torch.zeros(32, 1, device=device, requires_grad=True)
    y = x @ torch.ones(32, 1, device=device)
    opt = torch.optim.SGD([w], lr=0.1)
    for _ in range(200):
        opt.zero_grad()
        loss = ((x @ w - y) ** 2).mean()
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    time.sleep(1.0)  # long enough that trials meant to run together overlap on any machine
    tune.report({"loss": float(loss.detach()), "start": start, "end": time.time(), "pid": os.getpid(),
                 "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "device": str(w.device)})


class GpuDoubler:
    """``map_batches``' callable class: doubles ``id`` on the GPU and says which device did it."""

    def __init__(self) -> None:
        import torch

        self.device = torch.device("cuda")

    def __call__(self, batch: dict) -> dict:
        import torch

        t = torch.tensor(batch["id"], device=self.device) * 2
        return {"id": batch["id"], "doubled": t.cpu().numpy(),
                "device": [torch.cuda.get_device_name(self.device)] * len(batch["id"])}


def gpu_tripler(batch: dict) -> dict:
    """``map_batches``' plain function: triples ``id`` on the GPU this worker holds."""
    import torch

    t = torch.tensor(batch["id"], device="cuda") * 3
    return {"id": batch["id"], "tripled": t.cpu().numpy(),
            "visible": [os.environ.get("CUDA_VISIBLE_DEVICES")] * len(batch["id"])}


def _serve_gpu_replica(out: dict) -> None:
    """``serve_gpu_replica``: HTTP answers computed on the replica's GPU, then a deployment that can never fit."""
    import socket

    import httpx

    from muster import serve

    @serve.deployment(ray_actor_options={"num_gpus": 1})
    class OnGpu:
        def __init__(self) -> None:
            import torch

            self.w = torch.arange(1.0, 5.0, device="cuda")

        async def __call__(self, request: Any) -> dict:
            import torch

            x = torch.tensor((await request.json())["x"], device="cuda", dtype=torch.float32)
            return {"y": float((x * self.w).sum()), "device": str(x.device), "pid": os.getpid(),
                    "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    t = time.perf_counter()
    serve.run(OnGpu.bind(), name="gpu", route_prefix="/gpu")
    out["ready_s"] = round(time.perf_counter() - t, 2)
    with httpx.Client(timeout=30) as client:
        answers = [client.post(f"http://127.0.0.1:{port}/gpu", json={"x": [1, 2, 3, i]}).json() for i in range(20)]
    out["answers_ok"] = all(a["y"] == 14 + 4 * i for i, a in enumerate(answers))
    out["replica"] = {k: sorted({str(a[k]) for a in answers}) for k in ("device", "visible", "pid")}
    t = time.perf_counter()
    try:
        serve.run(OnGpu.options(name="TwoGpus", ray_actor_options={"num_gpus": 2}).bind(), name="big",
                  route_prefix="/big")
        out["too_big"] = "deployed, but this machine has one GPU"
    except Exception as exc:  # noqa: BLE001 - the message is what this scenario reports
        out["too_big"] = f"{type(exc).__name__}: {exc}"[:600]
    out["too_big_s"] = round(time.perf_counter() - t, 2)
    serve.shutdown()


def _max_overlap(rows: list[dict]) -> int:
    """The most trials whose ``[start, end]`` windows hold one moment in common."""
    return max(sum(1 for o in rows if o["start"] <= r["start"] < o["end"]) for r in rows) if rows else 0


# -- one scenario, in its own driver process -----------------------------------------------------
def _fit(storage: str, name: str, workers: int = 1, gpu_share: float = 1.0, backend: str | None = None,
         resume: Any = None, **config: Any) -> Any:
    from muster.train import RunConfig, ScalingConfig
    from muster.train.torch import TorchConfig, TorchTrainer

    scaling = ScalingConfig(num_workers=workers, use_gpu=True,
                            resources_per_worker=None if gpu_share == 1.0 else {"CPU": 1, "GPU": gpu_share})
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"epochs": 2, **config},
        scaling_config=scaling,
        torch_config=TorchConfig(backend=backend) if backend else None,
        run_config=RunConfig(name=name, storage_path=storage, verbose=0),
        resume_from_checkpoint=resume,
    )
    return trainer.fit()


def _rows(result: Any) -> list[dict]:
    df = result.metrics_dataframe
    return [] if df is None else json.loads(df.to_json(orient="records"))


def _fork_facts() -> dict:
    """In fresh interpreters: does each CUDA query start the driver, and can a forked child use the GPU?"""
    probe = r"""
import os, sys, torch
def libcuda():
    with open("/proc/self/maps") as f:
        return any("libcuda.so" in line for line in f)
after_import = libcuda()
step = sys.argv[1]
if step == "device_count":
    n = torch.cuda.device_count()
elif step == "is_available":
    n = int(torch.cuda.is_available())
else:
    n = -1
mapped = libcuda()
pid = os.fork()
if pid == 0:
    try:
        count = torch.cuda.device_count()
        torch.zeros(1, device="cuda").add_(1).item()
        os._exit(10 + count)  # the GPU worked; the exit code carries what device_count() said
    except Exception as exc:
        sys.stderr.write(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}\n")
        os._exit(3)
status = os.waitpid(pid, 0)[1]
print(f"{after_import} {n} {mapped} {os.waitstatus_to_exitcode(status)}")
"""
    facts = {}
    for step in ("import", "device_count", "is_available"):
        p = subprocess.run([sys.executable, "-c", probe, step], capture_output=True, text=True, timeout=120)
        words = p.stdout.split()
        facts[step] = {
            "libcuda_after_import": words[0] == "True" if words else None,
            "result": int(words[1]) if len(words) > 1 else None,
            "libcuda_mapped": words[2] == "True" if len(words) > 2 else None,
            "forked_child_uses_gpu": int(words[3]) >= 10 if len(words) > 3 else None,
            "forked_child_device_count": int(words[3]) - 10 if len(words) > 3 and int(words[3]) >= 10 else None,
            "child_error": p.stderr.strip()[-300:] or None,
        }
    return facts


def run_scenario(name: str, storage: str) -> dict:
    if name == "fork_facts":
        return {"facts": _fork_facts()}

    import torch

    import muster

    if name == "train_after_is_available":
        torch.cuda.is_available()
    elif name == "train_after_device_count":
        torch.cuda.device_count()
    elif name == "train_after_cuda_init":
        torch.zeros(1, device="cuda")
    rt = muster.init()
    out: dict[str, Any] = {"zygote_forked": getattr(rt, "zygote_forked", None),
                           "gpus_counted": muster.cluster_resources().get("GPU")}
    t0 = time.perf_counter()
    try:
        if name == "train_amp_fp16":
            first = _fit(storage, "amp", amp="float16", checkpoint=True)
            out["first"] = _rows(first)
            second = _fit(storage, "amp-resumed", amp="float16", checkpoint=True, resume=first.checkpoint)
            out["resumed"] = _rows(second)
        elif name in ("train_after_is_available", "train_after_device_count", "train_after_cuda_init"):
            out["rows"] = _rows(_fit(storage, name, amp="bfloat16"))
        elif name == "two_ranks_one_gpu_nccl":
            out["rows"] = _rows(_fit(storage, name, workers=2, gpu_share=0.5))
        elif name == "two_ranks_one_gpu_gloo":
            out["rows"] = _rows(_fit(storage, name, workers=2, gpu_share=0.5, backend="gloo"))
        elif name == "fsdp_two_ranks_one_gpu_gloo":
            out["rows"] = _rows(_fit(storage, name, workers=2, gpu_share=0.5, backend="gloo", strategy="fsdp"))
        elif name == "tasks_gpu_ids":
            @muster.remote(num_gpus=1)
            def on_gpu() -> dict:
                import torch as t

                return {"visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "ids": muster.get_gpu_ids(),
                        "sum": float(t.ones(4, device="cuda").sum())}

            @muster.remote(num_gpus=0)
            def on_cpu() -> dict:
                import torch as t

                return {"visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "ids": muster.get_gpu_ids(),
                        "cuda_available": t.cuda.is_available()}

            out["gpu_task"] = muster.get(on_gpu.remote(), timeout=120)
            out["cpu_task"] = muster.get(on_cpu.remote(), timeout=120)
        elif name == "tune_half_gpu_trials":
            from muster import tune

            tuner = tune.Tuner(tune.with_resources(tune_trial, {"gpu": 0.5}),
                               param_space={"seed": tune.grid_search([0, 1, 2, 3])},
                               run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0))
            grid = tuner.fit()
            rows = [dict(r.metrics) for r in grid]
            out["trials"] = [{k: r.get(k) for k in ("loss", "cuda_visible_devices", "device", "pid")} for r in rows]
            out["errors"] = [str(r.error)[:300] for r in grid if r.error]
            out["max_overlap"] = _max_overlap(rows)
        elif name == "data_map_batches_gpu":
            import numpy as np

            import muster.data as data

            ds = data.range(10_000, override_num_blocks=8).map_batches(GpuDoubler, num_gpus=1, concurrency=1,
                                                                       batch_size=1000)
            got = ds.take_all()
            ids = np.array([r["id"] for r in got])
            out["rows"] = len(got)
            out["in_order"] = bool((ids == np.arange(10_000)).all())
            out["values_ok"] = all(r["doubled"] == 2 * r["id"] for r in got)
            out["devices"] = sorted({r["device"] for r in got})
        elif name == "data_map_batches_fn_gpu":
            import muster.data as data

            got = data.range(10_000, override_num_blocks=8).map_batches(gpu_tripler, num_gpus=1,
                                                                        batch_size=1000).take_all()
            out["rows"] = len(got)
            out["in_order"] = [r["id"] for r in got] == list(range(10_000))
            out["all_ids"] = sorted(r["id"] for r in got) == list(range(10_000))
            out["values_ok"] = all(r["tripled"] == 3 * r["id"] for r in got)
            out["devices"] = sorted({str(r["visible"]) for r in got})
        elif name == "serve_gpu_replica":
            _serve_gpu_replica(out)
        else:
            raise SystemExit(f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)}")
    except Exception as exc:  # noqa: BLE001 - the outcome is what this script reports
        out["error"] = f"{type(exc).__name__}: {exc}"[:1500]
    out["seconds"] = round(time.perf_counter() - t0, 2)
    muster.shutdown()
    return out


def summarize(name: str, r: dict) -> str:
    if "timeout" in r:
        return f"TIMED OUT after {r['timeout']} s"
    if "crashed" in r:
        return f"driver exited {r['crashed']}: {r.get('stderr', '')[-200:]}"
    if name == "fork_facts":
        return "; ".join(f"{k}: libcuda {v['libcuda_mapped']}, forked child on GPU {v['forked_child_uses_gpu']} "
                         f"(counts {v['forked_child_device_count']})" for k, v in r["facts"].items())
    if "error" in r:
        return f"error after {r['seconds']} s ({'forked' if r.get('zygote_forked') else 'fresh'} launcher): " \
               f"{r['error'][:300]}"
    if name == "tune_half_gpu_trials":
        return (f"{len(r['trials'])} trials, {len(r['errors'])} errors, at most {r['max_overlap']} at once; "
                f"{r['trials']}; errors {r['errors']}")
    if name in ("data_map_batches_gpu", "data_map_batches_fn_gpu"):
        return (f"every id once {r.get('all_ids', True)}, {r['rows']} rows, in order {r['in_order']}, "
                f"values ok {r['values_ok']}, devices {r['devices']}")
    if name == "serve_gpu_replica":
        return (f"ready in {r['ready_s']} s, 20 answers right {r['answers_ok']}, replica {r['replica']}; "
                f"2 GPUs asked: {r['too_big']!r} after {r['too_big_s']} s")
    if name == "tasks_gpu_ids":
        return f"GPU task {r['gpu_task']}; CPU task {r['cpu_task']}"
    rows = r.get("first", []) + r.get("resumed", []) + r.get("rows", [])
    last = rows[-1] if rows else {}
    keys = ("cuda_visible_devices", "device", "backend", "world_size", "batch_device", "out_dtype", "scaler",
            "wrapped", "restored_on", "gpu_name")
    loss = [round(x["loss"], 4) for x in rows if "loss" in x]
    return (f"ok in {r['seconds']} s ({'forked' if r.get('zygote_forked') else 'fresh'} launcher); losses {loss}; "
            + ", ".join(f"{k}={last.get(k)}" for k in keys))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--results-dir", default=os.path.join(HERE, "results"))
    p.add_argument("--timeout", type=float, default=180, help="per scenario (s)")
    p.add_argument("--scenario", help=argparse.SUPPRESS)  # internal: run one scenario in this process
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.scenario:
        with tempfile.TemporaryDirectory() as storage:
            result = run_scenario(args.scenario, storage)
        with open(args.result, "w") as f:
            json.dump(result, f)
        return 0

    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU visible here: nothing to check (run this on a machine with one)")
        return 2
    print(f"GPUs: {[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}, "
          f"torch {torch.__version__} (CUDA {torch.version.cuda}), python {sys.version.split()[0]}")
    info = {
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
        "torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0],
        "git_commit": subprocess.run(["git", "-C", os.path.dirname(HERE), "rev-parse", "HEAD"],
                                     capture_output=True, text=True).stdout.strip() or None,
    }
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in [s.strip() for s in args.scenarios.split(",") if s.strip()]:
            path = os.path.join(tmp, f"{name}.json")
            t0 = time.perf_counter()
            try:
                proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--scenario", name, "--result", path],
                                      capture_output=True, text=True, timeout=args.timeout)
                if proc.returncode != 0 or not os.path.exists(path):
                    result = {"crashed": proc.returncode, "stderr": proc.stderr[-2000:]}
                else:
                    with open(path) as f:
                        result = json.load(f)
            except subprocess.TimeoutExpired as exc:
                err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
                result = {"timeout": args.timeout, "stderr": err[-2000:]}
            result["wall_s"] = round(time.perf_counter() - t0, 2)
            result["summary"] = summarize(name, result)
            results[name] = result
            print(f"{name} ({result['wall_s']} s): {result['summary']}", flush=True)
    os.makedirs(args.results_dir, exist_ok=True)
    path = os.path.join(args.results_dir, f"gpu_check_{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(path, "w") as f:
        json.dump({"machine": info, "scenarios": results}, f, indent=1)
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
