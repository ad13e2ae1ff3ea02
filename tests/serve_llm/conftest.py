"""Tiny offline models for the LLM serving tests (built once per session, no download)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="muster.serve.llm needs transformers: pip install 'muster[llm]'")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A random-weight tiny Llama with a byte-level BPE tokenizer and a chat template."""
    from muster.serve.llm.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def tiny_gpt2_no_template(tmp_path_factory) -> Path:
    """A random-weight tiny GPT-2 whose tokenizer has no chat template."""
    from muster.serve.llm.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-gpt2"), architecture="gpt2", chat_template=False)


@pytest.fixture
def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
