"""Ray's embeddings guide, run as written: ``engine_kwargs=dict(task="embed")``, and Ray's
``ModelLoadingConfig.tokenizer_source``; served by ``openai_asgi_app`` under uvicorn, driven with the openai
client."""

from __future__ import annotations

import shutil

import openai
import pytest
from _uvicorn_app import served

from muster.serve.llm import LLMConfig, LLMServer, openai_asgi_app

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def client(tiny_model, tmp_path_factory):
    """An embed model whose weights folder holds no tokenizer: the tokenizer comes from tokenizer_source."""
    weights = tmp_path_factory.mktemp("weights-only")
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        shutil.copy(tiny_model / name, weights / name)
    server = LLMServer(LLMConfig(
        model_loading_config=dict(model_id="embedder", model_source=str(weights), tokenizer_source=str(tiny_model)),
        llm_engine="transformers", engine_kwargs=dict(task="embed", max_model_len=128, max_num_seqs=2),
    ))
    with served(openai_asgi_app([server])) as url:
        yield openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=60)
    server.shutdown()


def test_embed_task_with_a_separate_tokenizer_serves_embeddings(client):
    out = client.embeddings.create(model="embedder", input=["A text to embed", "Another text"])
    assert [d.index for d in out.data] == [0, 1] and len(out.data[0].embedding) == 64
    assert out.usage.prompt_tokens > 2  # the text went through the tokenizer from tokenizer_source


def test_embed_task_refuses_generation_by_name(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="embedder", messages=[{"role": "user", "content": "hi"}])
    assert err.value.body["param"] == "model" and "task='embed'" in err.value.body["message"]
    with pytest.raises(openai.BadRequestError, match="/v1/completions is not offered"):
        client.completions.create(model="embedder", prompt="hi", max_tokens=2)
