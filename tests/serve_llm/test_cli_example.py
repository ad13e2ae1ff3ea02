"""`muster serve run serve_llm:app` on the example's module, called with the openai client, then shut down."""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import openai
import pytest

pytestmark = [pytest.mark.timeout(400), pytest.mark.allow_leftover_workers]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SRC = Path(__file__).resolve().parents[2] / "src"


def test_muster_serve_run_the_example_app(tmp_path, tiny_model):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), str(EXAMPLES)]), MUSTER_SERVE_DIR=str(tmp_path),
               MUSTER_EXAMPLE_MODEL_DIR=str(tiny_model), MUSTER_RUN_STORE="0")
    cli = [sys.executable, "-m", "muster.cli", "serve"]
    proc = subprocess.Popen([*cli, "run", "serve_llm:app", "--port", "0"], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    seen: list[str] = []
    port = None
    try:
        deadline = time.monotonic() + 240
        while port is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                seen.append(lines.get(timeout=1))
            except queue.Empty:
                continue
            m = re.search(r"at http://127\.0\.0\.1:(\d+)", seen[-1])
            port = int(m.group(1)) if m else None
        assert port, "`muster serve run serve_llm:app` did not come up:\n" + "".join(seen)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="not-needed", max_retries=0)
        assert [m.id for m in client.models.list().data] == ["my-llama"]
        response = client.chat.completions.create(
            model="my-llama", max_tokens=5,
            messages=[{"role": "user", "content": "Explain gradient checkpointing in 2 sentences."}],
        )
        assert response.usage.completion_tokens <= 5 and response.choices[0].finish_reason in ("length", "stop")
        down = subprocess.run([*cli, "shutdown", "--port", str(port)], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert down.returncode == 0, down.stderr
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
