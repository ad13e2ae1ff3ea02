"""Inference engines behind the LLM server: transformers (default) and vLLM (when installed)."""

from __future__ import annotations

from muster.serve.llm.config import LLMConfig
from muster.serve.llm.engine.base import EngineStats, GenerationChunk, LLMEngine, SamplingParams, TokenLogprob

__all__ = ["EngineStats", "GenerationChunk", "LLMEngine", "SamplingParams", "TokenLogprob", "create_engine"]


def create_engine(config: LLMConfig) -> LLMEngine:
    """The engine ``config.llm_engine`` names (``"auto"``: vLLM when installed, else transformers); not started."""
    if config.resolved_engine() == "vllm":
        from muster.serve.llm.engine.vllm import VLLMEngine

        return VLLMEngine(config)
    from muster.serve.llm.engine.hf import TransformersEngine

    return TransformersEngine(config)
