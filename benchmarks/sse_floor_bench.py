"""The HTTP floor under llm_bench.py's time to first token: a plain ASGI app on granian that
answers every POST with one SSE event at once, read by the same lean httpx client.

    python benchmarks/sse_floor_bench.py --requests 200

Whatever an HTTP server does, a streamed answer costs at least this much here; llm_bench.py's
"added TTFT" (HTTP vs the in-process engine) includes it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

APP = '''
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    await send({"type": "http.response.body", "body": b'data: {"choices": [{"text": "hi"}]}\\n\\n', "more_body": True})
    await send({"type": "http.response.body", "body": b"data: [DONE]\\n\\n"})
'''


async def ttft(http, url: str) -> float:
    body = {"model": "x", "prompt": "hello", "max_tokens": 1, "stream": True}
    sent = time.perf_counter()
    async with http.stream("POST", url, json=body) as response:
        async for line in response.aiter_lines():  # the same parsing as llm_bench.py's lean client
            if line.startswith("data: ") and line != "data: [DONE]":
                event = json.loads(line[6:])
                if event["choices"] and event["choices"][0]["text"]:
                    return time.perf_counter() - sent
    raise RuntimeError("no event came back")


async def measure(url: str, requests: int) -> list[float]:
    import httpx

    async with httpx.AsyncClient(timeout=30) as http:
        for _ in range(20):  # warm-up: connection, first-call costs
            await ttft(http, url)
        return [await ttft(http, url) for _ in range(requests)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="sse-floor-")
    with open(os.path.join(folder, "plainapp.py"), "w") as f:
        f.write(APP)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "granian", "--interface", "asgi", "--host", "127.0.0.1",
                               "--port", str(port), "--no-ws", "plainapp:app"], cwd=folder,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("granian did not start")
                time.sleep(0.1)
        values = asyncio.run(measure(f"http://127.0.0.1:{port}/v1/completions", args.requests))
    finally:
        server.terminate()
        server.wait(10)
    ms = sorted(v * 1e3 for v in values)
    print(f"plain granian SSE app, lean httpx client, {len(ms)} requests: TTFT p50 {statistics.median(ms):.2f} ms "
          f"(min {ms[0]:.2f}, p90 {ms[int(0.9 * (len(ms) - 1))]:.2f})")


if __name__ == "__main__":
    main()
