"""Two Serve LLM apps whose replicas share one GPU (``num_gpus=0.5`` each): both must load and answer, and
nvidia-smi shows what each replica's process holds (the KV cache is capped at 0.9 x the replica's share).

    python benchmarks/llm_gpu_share.py      # on a machine with one CUDA GPU (~40 s on an H200)
"""

import json
import subprocess
import tempfile
import time
import urllib.request

from muster import serve
from muster.serve.llm import LLMConfig, build_openai_app
from muster.serve.llm.tiny_model import build_tiny_model


def main() -> None:
    path = build_tiny_model(tempfile.mkdtemp(), hidden_size=256, num_layers=4)
    serve.start(http_options={"host": "127.0.0.1", "port": 0})
    port = serve.status().http["port"]
    for name in ("a", "b"):
        cfg = LLMConfig(model_loading_config=dict(model_id=name, model_source=str(path)), llm_engine="transformers",
                        engine_kwargs=dict(max_model_len=256, max_num_seqs=16),
                        deployment_config=dict(ray_actor_options={"num_cpus": 1, "num_gpus": 0.5}))
        start = time.time()
        serve.run(build_openai_app({"llm_configs": [cfg]}), name=name, route_prefix=f"/{name}")
        print(f"app {name} up in {time.time() - start:.1f} s", flush=True)
    for name in ("a", "b"):
        body = json.dumps({"model": name, "prompt": "hello there", "max_tokens": 8, "temperature": 0}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/{name}/v1/completions", body,
                                         {"content-type": "application/json"})
        answer = json.loads(urllib.request.urlopen(request, timeout=60).read())
        print(name, "answered:", answer["usage"], flush=True)
    for query in ("--query-compute-apps=pid,used_memory", "--query-gpu=memory.total,memory.used"):
        print(subprocess.run(["nvidia-smi", query, "--format=csv"], capture_output=True, text=True).stdout)
    serve.shutdown()


if __name__ == "__main__":
    main()
