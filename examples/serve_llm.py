"""Serve LLM: the seed's OpenAI-compatible endpoint, run with muster on a tiny offline model.

This is the "Ray Serve LLM" sample from the Ray Train/Serve/Data overview
with ``ray`` replaced by ``muster``: an ``LLMConfig`` (model id and source,
autoscaling, engine arguments), ``build_openai_app``, then the official
``openai`` client. Two changes, both because this machine has no GPU and
downloads nothing:

* ``model_source`` is a tiny random-weight Llama written to a local folder
  (``muster.serve.llm.tiny_model``), so the answer is gibberish;
* ``accelerator_type="A100"`` and ``tensor_parallel_size=2`` are left out
  (kept in comments): on a GPU node they give each replica 2 A100s.

Run it::

    python examples/serve_llm.py                    # serves, asks once, stops
    muster serve run examples.serve_llm:app         # or: cd examples && muster serve run serve_llm:app

and, while ``muster serve run`` is up, call it from any OpenAI client at
``http://localhost:8000/v1``.
"""

import argparse
import os
import tempfile
from pathlib import Path

from muster import serve
from muster.serve.llm import LLMConfig, build_openai_app
from muster.serve.llm.tiny_model import build_tiny_model

MODEL_DIR = Path(os.environ.get("MUSTER_EXAMPLE_MODEL_DIR") or tempfile.mkdtemp(prefix="muster-tiny-llm-"))
if not (MODEL_DIR / "config.json").exists():
    build_tiny_model(MODEL_DIR)

llm_config = LLMConfig(
    model_loading_config=dict(
        model_id="my-llama",
        model_source=str(MODEL_DIR),  # the seed: "meta-llama/Llama-3.1-8B-Instruct"
    ),
    # accelerator_type="A100",
    deployment_config=dict(
        autoscaling_config=dict(
            min_replicas=1,
            max_replicas=4,
        )
    ),
    engine_kwargs=dict(
        max_model_len=256,  # the seed: 8192
        # tensor_parallel_size=2,
    ),
)

app = build_openai_app({"llm_configs": [llm_config]})

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8000, help="HTTP port (0 picks a free one)")
    parser.add_argument("--storage-path", default=None, help="unused (kept for the examples test runner)")
    args = parser.parse_args()

    serve.start(http_options={"host": "127.0.0.1", "port": args.port})
    serve.run(app)
    port = serve.status().http["port"]
    print(f"Serving my-llama at http://localhost:{port}/v1")

    from openai import OpenAI

    client = OpenAI(base_url=f"http://localhost:{port}/v1", api_key="not-needed")
    response = client.chat.completions.create(
        model="my-llama",
        messages=[{"role": "user", "content": "Explain gradient checkpointing in 2 sentences."}],
    )
    print(repr(response.choices[0].message.content))  # random weights: gibberish, control bytes included
    usage = response.usage
    print(f"finish_reason={response.choices[0].finish_reason} prompt_tokens={usage.prompt_tokens} "
          f"completion_tokens={usage.completion_tokens}")
    serve.shutdown()
