"""The vLLM engine, when vLLM is installed (it is not in the default environment: too large)."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (pip install 'muster[vllm]'); the vLLM engine is untested here")

from muster.serve.llm import LLMConfig  # noqa: E402
from muster.serve.llm.engine import SamplingParams, create_engine  # noqa: E402

pytestmark = pytest.mark.timeout(600)


def test_vllm_engine_generates_greedily_with_engine_kwargs_passed_through(tiny_model):
    engine = create_engine(LLMConfig(
        model_loading_config=dict(model_id="tiny", model_source=str(tiny_model)), llm_engine="vllm",
        engine_kwargs=dict(max_model_len=256, enforce_eager=True, max_num_seqs=8),
    ))
    engine.start()
    try:
        assert engine.max_model_len == 256
        prompt = engine.encode_chat([{"role": "user", "content": "hello"}])

        async def once() -> str:
            return "".join([c.text async for c in engine.generate(prompt, SamplingParams(max_tokens=8, temperature=0))])

        first = asyncio.run(once())
        assert first == asyncio.run(once())
    finally:
        engine.shutdown()
