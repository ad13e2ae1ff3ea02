"""muster.serve vs a plain Starlette app (the limit) vs Ray Serve, driven by wrk.

Every target answers ``GET /?x=N`` with ``{"echo": "N"}``:

* ``limit``: the same handler as a plain Starlette app on one granian process
  (what one ASGI process can do here, with no hop to a replica);
* ``muster``: ``@serve.deployment(num_replicas=2)`` behind muster's ingress
  (granian, plus a uvicorn-ingress point at 64 connections: how the server was chosen);
* ``muster-compose``: an ingress deployment that calls a model deployment through a handle;
* ``muster-batch``: ``__call__`` awaits a ``@serve.batch`` method;
* ``ray``: the same deployment on Ray Serve (when installed), 2 replicas;
* ``muster-base`` (with ``--base-src DIR``): the same echo as ``muster`` on the muster source tree in
  ``DIR`` (e.g. ``git archive main src | tar -x -C /tmp/base``): an interleaved A/B of a change.

``muster`` and ``muster-base`` each run in their own driver process; for them and the limit the CPU
time their processes used per request (all cores, from ``psutil``) is printed too: on a shared machine
it is steadier than req/s.

Points run interleaved (limit, muster, ray at each connection count, for
``--rounds`` rounds); each is ``--duration`` seconds of ``wrk -t1 --latency``.
Medians (with min-max spread) of req/s, p50 and p99 are printed and written to
``--out`` as JSON, with the time from ``serve.run`` to ready.

    python benchmarks/serve_bench.py --duration 5 --rounds 2 --out /tmp/serve_bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

LIMIT_APP = textwrap.dedent('''
    import asyncio, sys
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def echo(request):
        return JSONResponse({"echo": request.query_params.get("x")})

    app = Starlette(routes=[Route("/", echo)])

    from granian.constants import HTTPModes, Interfaces
    from granian.server.embed import Server
    import uvloop
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    server = Server(app, address="127.0.0.1", port=int(sys.argv[1]), interface=Interfaces.ASGINL,
                    http=HTTPModes.http1, websockets=False, log_enabled=False, backlog=2048)
    print("READY", flush=True)
    loop.run_until_complete(server.serve())
''')

# The echo app as a script, on Ray Serve or muster (``lib``): the same deployment, started the same way.
_ECHO_APP = textwrap.dedent('''
    import sys, time
    import {lib}
    from {lib} import serve

    {lib}.init({init})
    t0 = time.perf_counter()
    serve.start(http_options={{"host": "127.0.0.1", "port": int(sys.argv[1])}})
    started = time.perf_counter() - t0

    @serve.deployment(num_replicas=2, ray_actor_options={{"num_cpus": 0.5}}{options})
    class Echo:
        async def __call__(self, request):
            return {{"echo": request.query_params.get("x")}}

    t0 = time.perf_counter()
    serve.run(Echo.bind(), name="echo", route_prefix="/")
    print("READY", time.perf_counter() - t0, started, flush=True)
    sys.stdin.read()
    serve.shutdown()
    {lib}.shutdown()
''')
RAY_APP = _ECHO_APP.format(lib="ray", init="num_cpus=2, include_dashboard=False, log_to_driver=False", options="")
MUSTER_APP = _ECHO_APP.format(lib="muster", init="num_cpus=4", options=", max_ongoing_requests=100")


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) used so far by process ``pid`` and its descendants."""
    import psutil

    total = 0.0
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return float("nan")
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ms(value: str, unit: str) -> float:
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def wrk(url: str, conns: int, duration: float) -> dict[str, float]:
    proc = subprocess.run(
        ["wrk", "-t1", f"-c{conns}", f"-d{max(1, round(duration))}s", "--latency", "--timeout", "10s", url],
        capture_output=True, text=True, timeout=duration + 60,
    )
    out = proc.stdout
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if m is None:
        raise RuntimeError(f"wrk failed on {url}: {proc.stdout}{proc.stderr}")
    rps = float(m.group(1))
    lat = dict(re.findall(r"^\s+(50|99)%\s+([\d.]+\w+)", out, re.M))
    pct = {}
    for k, v in lat.items():
        m = re.match(r"([\d.]+)(\w+)", v)
        pct[k] = _ms(m.group(1), m.group(2))  # type: ignore[union-attr]
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors:.*", out)
    return {"rps": rps, "p50_ms": pct.get("50", float("nan")), "p99_ms": pct.get("99", float("nan")),
            "non2xx": float(non2xx.group(1)) if non2xx else 0.0, "socket_errors": 1.0 if errors else 0.0}


def wait_http(url: str, timeout_s: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout_s} s")


def start_script(code: str, port: int, ready_timeout: float,
                 src: str | None = None) -> tuple[subprocess.Popen, list[float]]:
    """Run ``code`` as a script with ``port``; ``src``: put that muster source tree first on its path.

    Returns the process and the times its READY line gave (``serve.run`` to ready, then ``serve.start``).
    """
    path = os.path.join(tempfile.mkdtemp(prefix="serve-bench-"), "app.py")
    with open(path, "w") as f:
        f.write(code)
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")])
    proc = subprocess.Popen([sys.executable, path, str(port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env)
    deadline = time.monotonic() + ready_timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("READY"):
            wait_http(f"http://127.0.0.1:{port}/?x=1", max(1.0, deadline - time.monotonic()))
            return proc, [float(x) for x in line.split()[1:]]
    proc.kill()
    raise RuntimeError("the app did not start")


def stop_script(proc: subprocess.Popen) -> None:
    try:
        if proc.stdin:
            proc.stdin.close()
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def start_muster(port: int) -> tuple[dict[str, str], dict[str, float]]:
    """Serve the composition and batching apps on one ingress in this process; their URLs and ready times."""
    import muster
    from muster import serve

    muster.init(num_cpus=4)

    @serve.deployment(ray_actor_options={"num_cpus": 0.5}, max_ongoing_requests=100)
    class Model:
        async def predict(self, x):
            return {"echo": x}

        @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.002)
        async def batched(self, xs):
            return [{"echo": x} for x in xs]

    @serve.deployment(ray_actor_options={"num_cpus": 0.5}, max_ongoing_requests=100)
    class Compose:
        def __init__(self, model):
            self.model = model

        async def __call__(self, request):
            return await self.model.predict.remote(request.query_params.get("x"))

    @serve.deployment(ray_actor_options={"num_cpus": 0.5}, max_ongoing_requests=100)
    class Batch:
        def __init__(self, model):
            self.model = model

        async def __call__(self, request):
            return await self.model.batched.remote(request.query_params.get("x"))

    serve.start(http_options={"host": "127.0.0.1", "port": port})
    ready = {}
    t0 = time.perf_counter()
    serve.run(Compose.bind(Model.bind()), name="compose", route_prefix="/compose")
    ready["muster-compose"] = time.perf_counter() - t0
    serve.run(Batch.bind(Model.bind()), name="batch", route_prefix="/batch")
    base = f"http://127.0.0.1:{port}"
    return {"muster-compose": f"{base}/compose?x=1", "muster-batch": f"{base}/batch?x=1"}, ready


def summarize(samples: list[dict[str, float]]) -> dict[str, float]:
    out = {}
    for key in ("rps", "p50_ms", "p99_ms", "cpu_us"):
        vals = [s[key] for s in samples if key in s]
        if not vals:
            continue
        out[key] = statistics.median(vals)
        out[key + "_min"], out[key + "_max"] = min(vals), max(vals)
    out["non2xx"] = sum(s["non2xx"] for s in samples)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--conns", default="1,16,64,256")
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--base-src", default=None, help="a muster source tree to measure side by side (muster-base)")
    args = ap.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is not installed (apt-get install wrk)")
    conns = [int(c) for c in args.conns.split(",")]

    limit_port, ray_port = free_port(), free_port()
    limit, _ = start_script(LIMIT_APP, limit_port, 60)
    urls = {"limit": f"http://127.0.0.1:{limit_port}/?x=1"}
    procs = {"limit": limit}
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "src")
    ready: dict[str, float] = {}
    started: dict[str, float] = {}  # serve.start (the ingress up), before serve.run
    for name, src in (("muster", here), ("muster-base", args.base_src)):
        if src is None:
            continue
        port = free_port()
        procs[name], took = start_script(MUSTER_APP, port, 120, os.path.abspath(src))
        urls[name] = f"http://127.0.0.1:{port}/?x=1"
        if took:
            ready[name] = took[0]
        if len(took) > 1:
            started[name] = took[1]
    in_process_port = free_port()
    muster_urls, more_ready = start_muster(in_process_port)
    urls.update(muster_urls)
    ready.update(more_ready)
    ray_proc = None
    if not args.no_ray:
        try:
            import ray  # noqa: F401

            t0 = time.perf_counter()
            ray_proc, ray_took = start_script(RAY_APP, ray_port, 300)
            ready["ray"] = ray_took[0] if ray_took else time.perf_counter() - t0
            if len(ray_took) > 1:
                started["ray"] = ray_took[1]
            urls["ray"] = f"http://127.0.0.1:{ray_port}/?x=1"
        except Exception as exc:  # noqa: BLE001 - measure the rest
            print(f"Ray Serve not measured: {exc}", file=sys.stderr)
    results: dict[str, dict[int, list[dict[str, float]]]] = {}
    points = [(name, c) for c in conns for name in ("limit", "muster", "muster-base", "ray") if name in urls]
    points += [(name, 64) for name in ("muster-compose", "muster-batch")]
    try:
        for rnd in range(args.rounds):
            for name, c in points:
                proc = procs.get(name)
                cpu0 = cpu_seconds(proc.pid) if proc is not None else None
                r = wrk(urls[name], c, args.duration)
                if proc is not None and cpu0 is not None:
                    r["cpu_us"] = (cpu_seconds(proc.pid) - cpu0) / max(1.0, r["rps"] * max(1, round(args.duration))) * 1e6
                results.setdefault(name, {}).setdefault(c, []).append(r)
                print(f"round {rnd} {name:15s} c={c:<4d} {r['rps']:9.0f} req/s  p50 {r['p50_ms']:8.2f} ms  "
                      f"p99 {r['p99_ms']:8.2f} ms  cpu/req {r.get('cpu_us', float('nan')):6.0f} us  "
                      f"non-2xx {r['non2xx']:.0f}", flush=True)
        # the ingress server, chosen by measurement: the same echo behind a uvicorn ingress
        from muster import serve

        serve.shutdown()
        serve.start(http_options={"host": "127.0.0.1", "port": in_process_port, "server": "uvicorn"})
        serve.run(_echo_app(), name="echo", route_prefix="/")
        for rnd in range(args.rounds):
            r = wrk(f"http://127.0.0.1:{in_process_port}/?x=1", 64, args.duration)
            results.setdefault("muster-uvicorn-ingress", {}).setdefault(64, []).append(r)
            print(f"round {rnd} muster-uvicorn  c=64   {r['rps']:9.0f} req/s  p50 {r['p50_ms']:8.2f} ms  "
                  f"p99 {r['p99_ms']:8.2f} ms", flush=True)
    finally:
        from muster import serve

        serve.shutdown()
        for proc in procs.values():
            stop_script(proc)
        if ray_proc is not None:
            stop_script(ray_proc)
    summary = {name: {str(c): summarize(s) for c, s in per.items()} for name, per in results.items()}
    print("\nmedians (min-max) over", args.rounds, "rounds of", args.duration, "s")
    for name, per in summary.items():
        for c, s in per.items():
            print(f"{name:22s} c={c:<4s} {s['rps']:9.0f} req/s ({s['rps_min']:.0f}-{s['rps_max']:.0f})  "
                  f"p50 {s['p50_ms']:7.2f} ms  p99 {s['p99_ms']:8.2f} ms  cpu/req {s.get('cpu_us', float('nan')):6.0f} us")
    print("ready after serve.run:", {k: round(v, 2) for k, v in ready.items()})
    print("serve.start:", {k: round(v, 2) for k, v in started.items()})
    m, lim = summary["muster"], summary["limit"]
    ratios = {f"muster/limit req/s c={c}": m[c]["rps"] / lim[c]["rps"] for c in m if c in lim}
    if "ray" in summary:
        ratios.update({f"muster/ray req/s c={c}": m[c]["rps"] / summary["ray"][c]["rps"] for c in m
                       if c in summary["ray"]})
    if "1" in m and "1" in lim:
        ratios["added p50 at c=1 (ms)"] = m["1"]["p50_ms"] - lim["1"]["p50_ms"]
    ratios.update({f"muster/limit cpu per request c={c}": m[c]["cpu_us"] / lim[c]["cpu_us"] for c in m
                   if c in lim and "cpu_us" in m[c] and "cpu_us" in lim[c]})
    if "muster-base" in summary:
        b = summary["muster-base"]
        ratios.update({f"muster/muster-base req/s c={c}": m[c]["rps"] / b[c]["rps"] for c in m if c in b})
        ratios.update({f"muster-base/limit req/s c={c}": b[c]["rps"] / lim[c]["rps"] for c in b if c in lim})
        if "1" in b and "1" in lim:
            ratios["muster-base added p50 at c=1 (ms)"] = b["1"]["p50_ms"] - lim["1"]["p50_ms"]
        ratios.update({f"muster/muster-base cpu per request c={c}": m[c]["cpu_us"] / b[c]["cpu_us"] for c in m
                       if c in b and "cpu_us" in m[c] and "cpu_us" in b[c]})
    if "1" in m and "256" in m:
        ratios["muster p99 c=256 / p99 c=1"] = m["256"]["p99_ms"] / m["1"]["p99_ms"]
    if "64" in m:
        ratios["compose/single req/s c=64"] = summary["muster-compose"]["64"]["rps"] / m["64"]["rps"]
        ratios["batch/single req/s c=64"] = summary["muster-batch"]["64"]["rps"] / m["64"]["rps"]
        ratios["granian/uvicorn ingress req/s c=64"] = m["64"]["rps"] / summary["muster-uvicorn-ingress"]["64"]["rps"]
    for k, v in ratios.items():
        print(f"{k:40s} {v:8.2f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"summary": summary, "ready_s": ready, "start_s": started, "ratios": ratios, "duration": args.duration,
                       "rounds": args.rounds}, f, indent=2)


def _echo_app():  # type: ignore[no-untyped-def]
    from muster import serve

    @serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0.5}, max_ongoing_requests=100)
    class Echo:
        async def __call__(self, request):
            return {"echo": request.query_params.get("x")}

    return Echo.bind()


if __name__ == "__main__":
    main()
