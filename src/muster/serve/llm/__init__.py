"""muster.serve.llm: OpenAI-compatible LLM serving (Ray Serve LLM's names).

``build_openai_app({"llm_configs": [LLMConfig(...)]})`` makes a Serve app
whose ingress answers OpenAI's ``/v1`` routes and routes each request by its
``model`` to that model's ``LLMServer`` deployment, whose replicas hold an
engine with continuous batching (transformers by default, vLLM when installed).
"""

from __future__ import annotations

from muster.serve.llm.builders import LLMServingArgs, OpenAiIngress, build_llm_deployment, build_openai_app
from muster.serve.llm.config import LLMConfig, ModelLoadingConfig
from muster.serve.llm.errors import (
    EngineError,
    EngineOverloadedError,
    InvalidRequestError,
    LLMConfigError,
    LLMRequestError,
    ModelNotFoundError,
)
from muster.serve.llm.openai_app import openai_asgi_app
from muster.serve.llm.server import LLMServer


def __getattr__(name: str) -> object:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.serve.llm", name)


__all__ = [
    "EngineError",
    "EngineOverloadedError",
    "InvalidRequestError",
    "LLMConfig",
    "LLMConfigError",
    "LLMRequestError",
    "LLMServer",
    "LLMServingArgs",
    "ModelLoadingConfig",
    "ModelNotFoundError",
    "OpenAiIngress",
    "build_llm_deployment",
    "build_openai_app",
    "openai_asgi_app",
]
